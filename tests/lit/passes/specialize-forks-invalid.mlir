// RUN: not emmy-opt %s -p 'specialize-forks' 2>&1 | filecheck %s

// Knobs become constants of their chosen values, so each must have one.
fork.site @s "f" "n=8" {
  %vec = fork.knob "vec" [1, 2, 4] default 2
}
// CHECK: emmy-opt: error: fork 'vec' is unresolved: run resolve-forks first
