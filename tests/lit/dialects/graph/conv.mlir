// RUN: emmy-opt %s | emmy-opt | filecheck %s

func.func @conv(%x : tensor<2x3x9x9xf32>, %w : tensor<8x3x3x3xf32>, %b : tensor<8xf32>, %dw : tensor<8x1x3x3xf32>) -> tensor<2x8x3x3xf32> {
  %y = graph.conv %x, %w bias %b {stride = [2, 2], padding = [1, 1], dilation = [1, 1], groups = 1 : i64} : tensor<2x3x9x9xf32>, tensor<8x3x3x3xf32>, tensor<8xf32> -> tensor<2x8x5x5xf32>
  // CHECK: %{{.*}} = graph.conv %{{.*}}, %{{.*}} bias %{{.*}} {stride = [2 : i64, 2 : i64], padding = [1 : i64, 1 : i64], dilation = [1 : i64, 1 : i64], groups = 1 : i64} : tensor<2x3x9x9xf32>, tensor<8x3x3x3xf32>, tensor<8xf32> -> tensor<2x8x5x5xf32>
  %z = graph.conv %y, %dw {stride = [1, 1], padding = [0, 0], dilation = [1, 1], groups = 8 : i64} : tensor<2x8x5x5xf32>, tensor<8x1x3x3xf32> -> tensor<2x8x3x3xf32>
  // CHECK-NEXT: %{{.*}} = graph.conv %{{.*}}, %{{.*}} {stride = [1 : i64, 1 : i64], padding = [0 : i64, 0 : i64], dilation = [1 : i64, 1 : i64], groups = 8 : i64} : tensor<2x8x5x5xf32>, tensor<8x1x3x3xf32> -> tensor<2x8x3x3xf32>
  func.return %z : tensor<2x8x3x3xf32>
}
