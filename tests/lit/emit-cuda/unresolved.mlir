// RUN: not emmy-opt %s -t cuda 2>&1 | filecheck %s

fork.site @s "f" "n=8" {
  %vec = fork.knob "vec" [1, 2, 4] default 2
}
// CHECK: emmy-opt: error: the module still has unresolved forks: run resolve-forks and specialize-forks first
