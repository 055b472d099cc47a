// RUN: emmy-opt %s --split-input-file --parsing-diagnostics | filecheck %s

// gelu's approximation is none or tanh, as torch's.
func.func @gelu(%x : tensor<4xf32>) -> tensor<4xf32> {
  %a = graph.gelu %x {approximate = #graph<approximation cubic>} : tensor<4xf32> -> tensor<4xf32>
  func.return %a : tensor<4xf32>
}
// CHECK: Expected `none`, or `tanh`.

// -----

func.func @reduce_kind(%x : tensor<4x8xf32>) -> tensor<4xf32> {
  %y = graph.reduce %x {kind = #graph<reduction median>} : tensor<4x8xf32> -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: Expected `sum`, `prod`, `max`, `min`, `mean`, `logsumexp`, `var`, `std`, `argmax`, `argmin`, `any`, or `all`.
