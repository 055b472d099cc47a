// RUN: not emmy-opt %s -p 'resolve-forks{db=none pin="vec=3"}' 2>&1 | filecheck %s --check-prefix=OPTION
// RUN: not emmy-opt %s -p 'resolve-forks{db=none pin="width=2"}' 2>&1 | filecheck %s --check-prefix=NAME
// RUN: not emmy-opt %s -p 'resolve-forks{db=none pin="vec=4"}' 2>&1 | filecheck %s --check-prefix=INVALID

fork.site @s "f" "n=6" {
  %vec = fork.knob "vec" [1, 2, 4] default 1 where "n % vec == 0"
}
// OPTION: emmy-opt: error: bad pin vec=3: not an option of fork 'vec' [1, 2, 4]
// NAME: emmy-opt: error: bad pin width=2: no fork named 'width' (forks: vec)
// INVALID: emmy-opt: error: no oracle decided site s (f, n=6): no valid config with vec=4
