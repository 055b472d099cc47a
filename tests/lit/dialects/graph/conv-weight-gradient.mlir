// RUN: emmy-opt %s | emmy-opt | filecheck %s

func.func @conv_weight_gradient(%dy : tensor<2x8x5x5xf32>, %x : tensor<2x3x9x9xf32>, %dg : tensor<2x6x7x7xbf16>, %xg : tensor<2x6x9x9xbf16>) -> (tensor<8x3x3x3xf32>, tensor<6x2x3x3xbf16>) {
  %dw = graph.conv_weight_gradient %dy, %x {stride = [2, 2], padding = [1, 1], dilation = [1, 1], groups = 1 : i64} : tensor<2x8x5x5xf32>, tensor<2x3x9x9xf32> -> tensor<8x3x3x3xf32>
  // CHECK: %{{.*}} = graph.conv_weight_gradient %{{.*}}, %{{.*}} {stride = [2 : i64, 2 : i64], padding = [1 : i64, 1 : i64], dilation = [1 : i64, 1 : i64], groups = 1 : i64} : tensor<2x8x5x5xf32>, tensor<2x3x9x9xf32> -> tensor<8x3x3x3xf32>
  %dg_w = graph.conv_weight_gradient %dg, %xg {stride = [1, 1], padding = [1, 1], dilation = [2, 2], groups = 3 : i64} : tensor<2x6x7x7xbf16>, tensor<2x6x9x9xbf16> -> tensor<6x2x3x3xbf16>
  // CHECK-NEXT: %{{.*}} = graph.conv_weight_gradient %{{.*}}, %{{.*}} {stride = [1 : i64, 1 : i64], padding = [1 : i64, 1 : i64], dilation = [2 : i64, 2 : i64], groups = 3 : i64} : tensor<2x6x7x7xbf16>, tensor<2x6x9x9xbf16> -> tensor<6x2x3x3xbf16>
  func.return %dw, %dg_w : tensor<8x3x3x3xf32>, tensor<6x2x3x3xbf16>
}
