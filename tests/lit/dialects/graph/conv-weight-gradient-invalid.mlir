// RUN: emmy-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @gradient_shape(%dy : tensor<2x8x9x9xf32>, %x : tensor<2x3x9x9xf32>) -> tensor<8x3x3x3xf32> {
  %dw = graph.conv_weight_gradient %dy, %x {stride = [2, 2], padding = [1, 1], dilation = [1, 1], groups = 1 : i64} : tensor<2x8x9x9xf32>, tensor<2x3x9x9xf32> -> tensor<8x3x3x3xf32>
  func.return %dw : tensor<8x3x3x3xf32>
}
// CHECK: graph.conv_weight_gradient gradient shape [2, 8, 9, 9] should be [2, 8, 5, 5]

// -----

func.func @groups(%dy : tensor<2x8x7x7xf32>, %x : tensor<2x6x9x9xf32>) -> tensor<8x3x3x3xf32> {
  %dw = graph.conv_weight_gradient %dy, %x {stride = [1, 1], padding = [0, 0], dilation = [1, 1], groups = 4 : i64} : tensor<2x8x7x7xf32>, tensor<2x6x9x9xf32> -> tensor<8x3x3x3xf32>
  func.return %dw : tensor<8x3x3x3xf32>
}
// CHECK: graph.conv_weight_gradient of 6 channels in 4 groups cannot give a weight of 3 channels per group and 8 filters

// -----

func.func @dtypes(%dy : tensor<2x8x7x7xf16>, %x : tensor<2x3x9x9xf32>) -> tensor<8x3x3x3xf32> {
  %dw = graph.conv_weight_gradient %dy, %x {stride = [1, 1], padding = [0, 0], dilation = [1, 1], groups = 1 : i64} : tensor<2x8x7x7xf16>, tensor<2x3x9x9xf32> -> tensor<8x3x3x3xf32>
  func.return %dw : tensor<8x3x3x3xf32>
}
// CHECK: graph.conv_weight_gradient operands and result must share one dtype

// -----

func.func @padding(%dy : tensor<2x8x7x7xf32>, %x : tensor<2x3x9x9xf32>) -> tensor<8x3x3x3xf32> {
  %dw = graph.conv_weight_gradient %dy, %x {stride = [1, 1], padding = [-1, 0], dilation = [1, 1], groups = 1 : i64} : tensor<2x8x7x7xf32>, tensor<2x3x9x9xf32> -> tensor<8x3x3x3xf32>
  func.return %dw : tensor<8x3x3x3xf32>
}
// CHECK: graph.conv_weight_gradient padding must be 2 values >= 0
