// RUN: emmy-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @result_past_the_stride(%x : tensor<2x8x5x5xf32>, %w : tensor<8x3x3x3xf32>) -> tensor<2x3x11x11xf32> {
  %y = graph.conv_transpose %x, %w {stride = [2, 2], padding = [1, 1], dilation = [1, 1], groups = 1 : i64} : tensor<2x8x5x5xf32>, tensor<8x3x3x3xf32> -> tensor<2x3x11x11xf32>
  func.return %y : tensor<2x3x11x11xf32>
}
// CHECK: graph.conv_transpose result shape [2, 3, 11, 11] should be [2, 3, 9, 9], each spatial size up to [1, 1] more

// -----

func.func @weight_channels(%x : tensor<2x6x5x5xf32>, %w : tensor<8x3x3x3xf32>) -> tensor<2x3x7x7xf32> {
  %y = graph.conv_transpose %x, %w {stride = [1, 1], padding = [0, 0], dilation = [1, 1], groups = 1 : i64} : tensor<2x6x5x5xf32>, tensor<8x3x3x3xf32> -> tensor<2x3x7x7xf32>
  func.return %y : tensor<2x3x7x7xf32>
}
// CHECK: graph.conv_transpose of 6 channels in 1 groups with a weight of 8 input channels

// -----

func.func @bias(%x : tensor<2x8x5x5xf32>, %w : tensor<8x2x3x3xf32>, %b : tensor<2xf32>) -> tensor<2x4x7x7xf32> {
  %y = graph.conv_transpose %x, %w bias %b {stride = [1, 1], padding = [0, 0], dilation = [1, 1], groups = 2 : i64} : tensor<2x8x5x5xf32>, tensor<8x2x3x3xf32>, tensor<2xf32> -> tensor<2x4x7x7xf32>
  func.return %y : tensor<2x4x7x7xf32>
}
// CHECK: graph.conv_transpose bias must have 4 elements

// -----

func.func @dilation(%x : tensor<2x8x5x5xf32>, %w : tensor<8x3x3x3xf32>) -> tensor<2x3x9x9xf32> {
  %y = graph.conv_transpose %x, %w {stride = [2, 2], padding = [1, 1], dilation = [0, 1], groups = 1 : i64} : tensor<2x8x5x5xf32>, tensor<8x3x3x3xf32> -> tensor<2x3x9x9xf32>
  func.return %y : tensor<2x3x9x9xf32>
}
// CHECK: graph.conv_transpose dilation must be 2 values >= 1
