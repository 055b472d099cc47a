// RUN: emmy-opt %s -p resolve-forks | filecheck %s --check-prefix=DEFAULT
// RUN: emmy-opt %s -p 'resolve-forks{pin="vec=1,algo=b"}' | filecheck %s --check-prefix=PIN
// RUN: emmy-opt %s -p 'resolve-forks{pin="threads=128"}' | filecheck %s --check-prefix=CONSTRAINT

fork.site @s "f" "n=6,T=f32" {
  %threads = fork.knob "threads" [64, 128] default 64
  %vec = fork.knob "vec" [1, 2, 4] default 4 where "n % vec == 0 && threads * vec <= 256"
  %algo = fork.knob "algo" ["a", "b"] default "a"
}
// n % 4 != 0: vec moves to the nearest valid option, and says why.
// DEFAULT: fork.knob "threads" [64, 128] default 64 = 64 by {oracle = "default"}
// DEFAULT-NEXT: fork.knob "vec" [1, 2, 4] default 4 where "n % vec == 0 && threads * vec <= 256" = 1 by {oracle = "constraint"}
// DEFAULT-NEXT: fork.knob "algo" ["a", "b"] default "a" = "a" by {oracle = "default"}

// PIN: fork.knob "threads" [64, 128] default 64 = 64 by {oracle = "default"}
// PIN-NEXT: = 1 by {oracle = "pin"}
// PIN-NEXT: = "b" by {oracle = "pin"}

// CONSTRAINT: = 128 by {oracle = "pin"}
// CONSTRAINT-NEXT: = 1 by {oracle = "constraint"}
