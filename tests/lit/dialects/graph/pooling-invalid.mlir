// RUN: emmy-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @window_past_the_plane(%x : tensor<2x9x11xf32>) -> tensor<2x6x6xf32> {
  %y = graph.pool %x {kind = #graph<pooling max>, window = [3, 3], stride = [2, 2], padding = [1, 1], dilation = [1, 1]} : tensor<2x9x11xf32> -> tensor<2x6x6xf32>
  func.return %y : tensor<2x6x6xf32>
}
// CHECK: graph.pool of 9 by a window of 3 padded by 1 cannot give 6

// -----

func.func @float_indices(%x : tensor<2x9x11xf32>) -> tensor<2x3x3xf32> {
  %y = graph.pool %x {kind = #graph<pooling argmax>, adaptive} : tensor<2x9x11xf32> -> tensor<2x3x3xf32>
  func.return %y : tensor<2x3x3xf32>
}
// CHECK: graph.pool argmax of tensor<2x9x11xf32> cannot give tensor<2x3x3xf32>

// -----

func.func @adaptive_window(%x : tensor<2x9x11xf32>) -> tensor<2x3x3xf32> {
  %y = graph.pool %x {kind = #graph<pooling avg>, adaptive, window = [3, 3]} : tensor<2x9x11xf32> -> tensor<2x3x3xf32>
  func.return %y : tensor<2x3x3xf32>
}
// CHECK: an adaptive graph.pool has no window, stride or padding

// -----

func.func @nearest_corners(%x : tensor<2x5x7xf32>) -> tensor<2x10x14xf32> {
  %y = graph.resize %x {mode = #graph<resize nearest>, scales = [0.5 : f64, 0.5 : f64], align_corners} : tensor<2x5x7xf32> -> tensor<2x10x14xf32>
  func.return %y : tensor<2x10x14xf32>
}
// CHECK: graph.resize aligns corners in bilinear mode alone

// -----

func.func @resize_gradient_batch(%dy : tensor<2x3x10x14xf32>) -> tensor<2x5x5x7xf32> {
  %dx = graph.resize_backward %dy {mode = #graph<resize nearest>, scales = [0.5 : f64, 0.5 : f64]} : tensor<2x3x10x14xf32> -> tensor<2x5x5x7xf32>
  func.return %dx : tensor<2x5x5x7xf32>
}
// CHECK: graph.resize_backward of tensor<2x3x10x14xf32> cannot give tensor<2x5x5x7xf32>
