// RUN: emmy-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @result_shape(%x : tensor<2x3x9x9xf32>, %w : tensor<8x3x3x3xf32>) -> tensor<2x8x9x9xf32> {
  %y = graph.conv %x, %w {stride = [2, 2], padding = [1, 1], dilation = [1, 1], groups = 1 : i64} : tensor<2x3x9x9xf32>, tensor<8x3x3x3xf32> -> tensor<2x8x9x9xf32>
  func.return %y : tensor<2x8x9x9xf32>
}
// CHECK: graph.conv result shape [2, 8, 9, 9] should be [2, 8, 5, 5]

// -----

func.func @groups(%x : tensor<2x6x9x9xf32>, %w : tensor<8x3x3x3xf32>) -> tensor<2x8x7x7xf32> {
  %y = graph.conv %x, %w {stride = [1, 1], padding = [0, 0], dilation = [1, 1], groups = 4 : i64} : tensor<2x6x9x9xf32>, tensor<8x3x3x3xf32> -> tensor<2x8x7x7xf32>
  func.return %y : tensor<2x8x7x7xf32>
}
// CHECK: graph.conv of 6 channels in 4 groups with a weight of 3 channels per group and 8 filters

// -----

func.func @stride(%x : tensor<2x3x9x9xf32>, %w : tensor<8x3x3x3xf32>) -> tensor<2x8x7x7xf32> {
  %y = graph.conv %x, %w {stride = [0, 1], padding = [0, 0], dilation = [1, 1], groups = 1 : i64} : tensor<2x3x9x9xf32>, tensor<8x3x3x3xf32> -> tensor<2x8x7x7xf32>
  func.return %y : tensor<2x8x7x7xf32>
}
// CHECK: graph.conv stride must be 2 values >= 1

// -----

func.func @bias(%x : tensor<2x3x9x9xf32>, %w : tensor<8x3x3x3xf32>, %b : tensor<3xf32>) -> tensor<2x8x7x7xf32> {
  %y = graph.conv %x, %w bias %b {stride = [1, 1], padding = [0, 0], dilation = [1, 1], groups = 1 : i64} : tensor<2x3x9x9xf32>, tensor<8x3x3x3xf32>, tensor<3xf32> -> tensor<2x8x7x7xf32>
  func.return %y : tensor<2x8x7x7xf32>
}
// CHECK: graph.conv bias must have 8 elements
