// RUN: emmy-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @past_the_end(%x : tensor<4x8xf32>) -> tensor<4x8xf32> {
  %y = graph.gather %x[] {strides = [-8, 1], offset = 0 : i64, index_strides = [], index_sizes = [], index_steps = []} : tensor<4x8xf32> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
// CHECK: graph.gather reads elements -24..7 of tensor<4x8xf32>

// -----

func.func @float_index(%x : tensor<4x8xf32>, %i : tensor<3xf32>) -> tensor<3x8xf32> {
  %y = graph.gather %x[%i] {strides = [0, 1], offset = 0 : i64, index_strides = [[1, 0]], index_sizes = [4], index_steps = [8]} : tensor<4x8xf32>, tensor<3xf32> -> tensor<3x8xf32>
  func.return %y : tensor<3x8xf32>
}
// CHECK: graph.gather indices must be i32 or i64, not tensor<3xf32>

// -----

func.func @index_too_short(%x : tensor<4x8xf32>, %i : tensor<2xi64>) -> tensor<3x8xf32> {
  %y = graph.gather %x[%i] {strides = [0, 1], offset = 0 : i64, index_strides = [[1, 0]], index_sizes = [4], index_steps = [8]} : tensor<4x8xf32>, tensor<2xi64> -> tensor<3x8xf32>
  func.return %y : tensor<3x8xf32>
}
// CHECK: graph.gather reads element 2 of tensor<2xi64>

// -----

func.func @vector_triangle(%x : tensor<8xf32>) -> tensor<8xf32> {
  %y = graph.triangle %x {part = #graph<triangle upper>, diagonal = 0 : i64} : tensor<8xf32> -> tensor<8xf32>
  func.return %y : tensor<8xf32>
}
// CHECK: graph.triangle takes a matrix or a batch of them, as it gives

// -----

func.func @cat_misfit(%a : tensor<2x3xf32>, %b : tensor<3x5xf32>) -> tensor<2x8xf32> {
  %c = graph.cat %a, %b {dim = 1 : i64} : tensor<2x3xf32>, tensor<3x5xf32> -> tensor<2x8xf32>
  func.return %c : tensor<2x8xf32>
}
// CHECK: graph.cat input tensor<3x5xf32> does not fit tensor<2x8xf32>

// -----

func.func @cat_total(%a : tensor<2x3xf32>, %b : tensor<2x5xf32>) -> tensor<2x9xf32> {
  %c = graph.cat %a, %b {dim = 1 : i64} : tensor<2x3xf32>, tensor<2x5xf32> -> tensor<2x9xf32>
  func.return %c : tensor<2x9xf32>
}
// CHECK: graph.cat inputs give 8 along dim 1, not 9
