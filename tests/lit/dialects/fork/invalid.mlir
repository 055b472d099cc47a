// RUN: emmy-opt %s --split-input-file --verify-diagnostics | filecheck %s

fork.site @s "f" "n=1" {
  %a = fork.knob "vec" [1, 2] default 4
}
// CHECK: default 4 of fork 'vec' is not one of its options [1, 2]

// -----

fork.site @s "f" "n=1" {
  %a = fork.knob "vec" [1, 2, 2] default 1
}
// CHECK: fork 'vec' lists an option twice

// -----

fork.site @s "f" "n=1" {
  %a = fork.knob "vec" [1, "a"] default 1
}
// CHECK: fork 'vec' mixes integer and symbol options

// -----

fork.site @s "f" "n=1" {
  %a = fork.knob "vec" [1, 2] default 1 = 8
}
// CHECK: value 8 of fork 'vec' is not one of its options [1, 2]

// -----

fork.site @s "f" "n=1" {
  %a = fork.knob "vec" [1, 2] default 1
  %b = fork.knob "vec" [1, 2] default 2
}
// CHECK: fork.site has two forks named 'vec'

// -----

fork.site @s "f" "n=1" {
  %a = fork.knob "algo" ["x", "y"] default "x"
  kernel.func @k() {
    fork.alternatives %a ["x"] {
    } {
    }
    kernel.return
  }
}
// CHECK: fork.alternatives names 1 options but has 2 regions

// -----

fork.site @s "f" "n=1" {
  %a = fork.knob "algo" ["x", "y"] default "x"
  kernel.func @k() {
    fork.alternatives %a ["y", "x"] {
    } {
    }
    kernel.return
  }
}
// CHECK: fork.alternatives options ['y', 'x'] differ from fork 'algo' options ['x', 'y']

// -----

fork.site @s "f" "n=1" {
  %a = fork.knob "vec" [] default 1
}
// CHECK: fork 'vec' has no options

// -----

func.func @f(%x : tensor<4xf32>) -> tensor<4xf32> {
  %y = fork.alternatives @p ["a", "b"] {
    fork.yield %x : tensor<4xf32>
  } {
  } : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: fork.alternatives option 'b' yields 0 value(s) of types []; the op has results of types [TensorType(

// -----

func.func @f(%x : tensor<4xf32>) {
  fork.yield %x : tensor<4xf32>
}
// CHECK: 'fork.yield' expects parent op 'fork.alternatives'
