// RUN: emmy-opt %s -p 'resolve-forks{db=none}' | filecheck %s --check-prefix=DEFAULT
// RUN: emmy-opt %s -p 'resolve-forks{db=none pin="vec=1,algo=b"}' | filecheck %s --check-prefix=PIN
// RUN: emmy-opt %s -p 'resolve-forks{db=none pin="threads=128,vec=1,algo=a"}' | filecheck %s --check-prefix=ALL
// RUN: emmy-opt %s -p 'resolve-forks{db=none oracles="pins,default" pin="threads=128"}' | filecheck %s --check-prefix=CONSTRAINT

fork.site @s "f" "n=6,T=f32" {
  %threads = fork.knob "threads" [64, 128] default 64
  %vec = fork.knob "vec" [1, 2, 4] default 4 where "n % vec == 0 && threads * vec <= 256"
  %algo = fork.knob "algo" ["a", "b"] default "a"
}
// n % 4 != 0: the default oracle moves vec to the nearest valid option, and says so.
// DEFAULT: fork.site @s "f" "n=6,T=f32" attributes {decision = #fork.decision<oracle = "default", evidence = #evidence.default<declared = false, moved_by_constraints = ["vec"]>>} {
// DEFAULT-NEXT: fork.knob "threads" [64, 128] default 64 = 64 by "default"
// DEFAULT-NEXT: fork.knob "vec" [1, 2, 4] default 4 where "n % vec == 0 && threads * vec <= 256" = 2 by "default"
// DEFAULT-NEXT: fork.knob "algo" ["a", "b"] default "a" = "a" by "default"

// Partial pins narrow the choice; the other forks keep their oracle.
// PIN: fork.knob "threads" [64, 128] default 64 = 64 by "default"
// PIN-NEXT: = 1 by "pin"
// PIN-NEXT: = "b" by "pin"

// Pins that name every fork decide the site alone.
// ALL: attributes {decision = #fork.decision<oracle = "pins"
// ALL-NEXT: = 128 by "pin"

// CONSTRAINT: = 128 by "pin"
// CONSTRAINT-NEXT: = 2 by "default"
