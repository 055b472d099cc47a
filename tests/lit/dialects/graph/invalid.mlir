// RUN: emmy-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @no_broadcast(%x : tensor<4x8xf32>, %y : tensor<3xf32>) -> tensor<4x8xf32> {
  %a = graph.add %x, %y : tensor<4x8xf32>, tensor<3xf32> -> tensor<4x8xf32>
  func.return %a : tensor<4x8xf32>
}
// CHECK: graph.add shapes [4, 8] and [3] do not broadcast

// -----

func.func @wrong_result(%x : tensor<4x8xf32>, %y : tensor<8xf32>) -> tensor<8xf32> {
  %a = graph.mul %x, %y : tensor<4x8xf32>, tensor<8xf32> -> tensor<8xf32>
  func.return %a : tensor<8xf32>
}
// CHECK: graph.mul result shape [8] should be [4, 8]

// -----

func.func @mixed(%x : tensor<4xf32>, %y : tensor<4xf16>) -> tensor<4xf32> {
  %a = graph.sub %x, %y : tensor<4xf32>, tensor<4xf16> -> tensor<4xf32>
  func.return %a : tensor<4xf32>
}
// CHECK: graph.sub operands and result must share one dtype

// -----

func.func @int_tensor(%x : tensor<4xi32>) -> tensor<4xi32> {
  %a = graph.exp %x : tensor<4xi32> -> tensor<4xi32>
  func.return %a : tensor<4xi32>
}
// CHECK: graph.exp operand must be a tensor of f32, f16 or bf16

// -----

func.func @dim(%x : tensor<4x8xf32>) -> tensor<4x8xf32> {
  %a = graph.softmax %x {dim = 2 : i64} : tensor<4x8xf32> -> tensor<4x8xf32>
  func.return %a : tensor<4x8xf32>
}
// CHECK: graph.softmax dim 2 is out of range for rank 2

// -----

func.func @gelu(%x : tensor<4xf32>) -> tensor<4xf32> {
  %a = graph.gelu %x {approximate = "cubic"} : tensor<4xf32> -> tensor<4xf32>
  func.return %a : tensor<4xf32>
}
// CHECK: graph.gelu approximate must be none or tanh, not 'cubic'

// -----

func.func @constant() -> tensor<2xf32> {
  %c = graph.constant 1.000000e+00 : f32 -> tensor<2xf32>
  func.return %c : tensor<2xf32>
}
// CHECK: graph.constant gives a 0-d tensor

// -----

func.func @softmax_shape(%x : tensor<4x8xf32>) -> tensor<8x4xf32> {
  %a = graph.softmax %x {dim = 0 : i64} : tensor<4x8xf32> -> tensor<8x4xf32>
  func.return %a : tensor<8x4xf32>
}
// CHECK: graph.softmax result must have the input's shape

// -----

func.func @unary_shape(%x : tensor<4x8xf32>) -> tensor<8xf32> {
  %a = graph.tanh %x : tensor<4x8xf32> -> tensor<8xf32>
  func.return %a : tensor<8xf32>
}
// CHECK: graph.tanh must keep the shape and dtype of its input

// -----

func.func @rank0(%x : tensor<f32>) -> tensor<f32> {
  %a = graph.softmax %x {dim = 0 : i64} : tensor<f32> -> tensor<f32>
  func.return %a : tensor<f32>
}
// CHECK: graph.softmax needs a tensor of rank 1 or more
