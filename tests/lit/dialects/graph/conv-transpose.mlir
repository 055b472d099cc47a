// RUN: emmy-opt %s | emmy-opt | filecheck %s

func.func @conv_transpose(%x : tensor<2x8x5x5xf32>, %w : tensor<8x3x3x3xf32>, %b : tensor<3xf32>, %g : tensor<8x2x4x4xf32>) -> (tensor<2x3x10x10xf32>, tensor<2x4x16x16xf32>) {
  %y = graph.conv_transpose %x, %w bias %b {stride = [2, 2], padding = [1, 1], dilation = [1, 1], groups = 1 : i64} : tensor<2x8x5x5xf32>, tensor<8x3x3x3xf32>, tensor<3xf32> -> tensor<2x3x10x10xf32>
  // CHECK: %{{.*}} = graph.conv_transpose %{{.*}}, %{{.*}} bias %{{.*}} {stride = [2 : i64, 2 : i64], padding = [1 : i64, 1 : i64], dilation = [1 : i64, 1 : i64], groups = 1 : i64} : tensor<2x8x5x5xf32>, tensor<8x3x3x3xf32>, tensor<3xf32> -> tensor<2x3x10x10xf32>
  %z = graph.conv_transpose %x, %g {stride = [3, 3], padding = [2, 2], dilation = [2, 2], groups = 2 : i64} : tensor<2x8x5x5xf32>, tensor<8x2x4x4xf32> -> tensor<2x4x16x16xf32>
  // CHECK-NEXT: %{{.*}} = graph.conv_transpose %{{.*}}, %{{.*}} {stride = [3 : i64, 3 : i64], padding = [2 : i64, 2 : i64], dilation = [2 : i64, 2 : i64], groups = 2 : i64} : tensor<2x8x5x5xf32>, tensor<8x2x4x4xf32> -> tensor<2x4x16x16xf32>
  func.return %y, %z : tensor<2x3x10x10xf32>, tensor<2x4x16x16xf32>
}
