// RUN: emmy-opt %s | emmy-opt | filecheck %s

func.func @pools(%x : tensor<2x3x9x11xf32>) -> tensor<2x3x5x6xf32> {
  %y = graph.pool %x {kind = #graph<pooling max>, window = [3, 3], stride = [2, 2], padding = [1, 1], dilation = [1, 1]} : tensor<2x3x9x11xf32> -> tensor<2x3x5x6xf32>
  // CHECK: graph.pool %{{.*}} {kind = #graph<pooling max>, window = [3 : i64, 3 : i64], stride = [2 : i64, 2 : i64], padding = [1 : i64, 1 : i64], dilation = [1 : i64, 1 : i64]} : tensor<2x3x9x11xf32> -> tensor<2x3x5x6xf32>
  %i = graph.pool %x {kind = #graph<pooling argmax>, adaptive} : tensor<2x3x9x11xf32> -> tensor<2x3x7x7xi64>
  // CHECK-NEXT: graph.pool %{{.*}} {kind = #graph<pooling argmax>, adaptive} : tensor<2x3x9x11xf32> -> tensor<2x3x7x7xi64>
  %a = graph.pool %x {kind = #graph<pooling avg>, window = [3, 3], stride = [2, 2], padding = [1, 1], dilation = [1, 1], count_pad, divisor = 4 : i64} : tensor<2x3x9x11xf32> -> tensor<2x3x5x6xf32>
  // CHECK-NEXT: graph.pool %{{.*}} {kind = #graph<pooling avg>, window = [3 : i64, 3 : i64], stride = [2 : i64, 2 : i64], padding = [1 : i64, 1 : i64], dilation = [1 : i64, 1 : i64], count_pad, divisor = 4 : i64}
  func.return %y : tensor<2x3x5x6xf32>
}

func.func @resizes(%x : tensor<2x3x5x7xf32>) -> tensor<2x3x10x14xf32> {
  %y = graph.resize %x {mode = #graph<resize nearest>, scales = [0.5 : f64, 0.5 : f64]} : tensor<2x3x5x7xf32> -> tensor<2x3x10x14xf32>
  // CHECK: graph.resize %{{.*}} {mode = #graph<resize nearest>, scales = [5.000000e-01 : f64, 5.000000e-01 : f64]} : tensor<2x3x5x7xf32> -> tensor<2x3x10x14xf32>
  %b = graph.resize %x {mode = #graph<resize bilinear>, scales = [0.5 : f64, 0.5 : f64], align_corners} : tensor<2x3x5x7xf32> -> tensor<2x3x10x14xf32>
  // CHECK-NEXT: graph.resize %{{.*}} {mode = #graph<resize bilinear>, scales = [5.000000e-01 : f64, 5.000000e-01 : f64], align_corners}
  func.return %b : tensor<2x3x10x14xf32>
}

// An upsampling's input gradient: the properties of its forward, the sizes the other way.
func.func @resize_gradient(%dy : tensor<2x3x10x14xbf16>) -> tensor<2x3x5x7xbf16> {
  %dx = graph.resize_backward %dy {mode = #graph<resize bilinear>, scales = [0.5 : f64, 0.5 : f64]} : tensor<2x3x10x14xbf16> -> tensor<2x3x5x7xbf16>
  // CHECK: graph.resize_backward %{{.*}} {mode = #graph<resize bilinear>, scales = [5.000000e-01 : f64, 5.000000e-01 : f64]} : tensor<2x3x10x14xbf16> -> tensor<2x3x5x7xbf16>
  func.return %dx : tensor<2x3x5x7xbf16>
}
