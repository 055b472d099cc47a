// RUN: emmy-opt %s | emmy-opt | filecheck %s

// A training BatchNorm's statistics: the forward's (mean, variance), the backward's sums.
func.func @batch_norm_stats(%x : tensor<2x8x16xbf16>, %dy : tensor<2x8x16xbf16>, %m : tensor<8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %s = graph.batch_norm_stats %x : tensor<2x8x16xbf16> -> tensor<2x8xf32>
  // CHECK: %{{.*}} = graph.batch_norm_stats %{{.*}} : tensor<2x8x16xbf16> -> tensor<2x8xf32>
  %g = graph.batch_norm_stats %x grad %dy mean %m : tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<8xf32> -> tensor<2x8xf32>
  // CHECK-NEXT: %{{.*}} = graph.batch_norm_stats %{{.*}} grad %{{.*}} mean %{{.*}} : tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<8xf32> -> tensor<2x8xf32>
  func.return %s, %g : tensor<2x8xf32>, tensor<2x8xf32>
}
