// RUN: emmy-opt %s | filecheck %s

// An RMSNorm's input gradient and each row's rstd, over the last dim of any rank.
func.func @rms_norm_backward(%g : tensor<2x3x16xbf16>, %x : tensor<2x3x16xbf16>, %w : tensor<16xbf16>) -> (tensor<2x3x16xbf16>, tensor<2x3xf32>) {
  %dx, %rstd = graph.rms_norm_backward %g, %x, %w {eps = 1.0e-06 : f64} : tensor<2x3x16xbf16>, tensor<2x3x16xbf16>, tensor<16xbf16> -> (tensor<2x3x16xbf16>, tensor<2x3xf32>)
  func.return %dx, %rstd : tensor<2x3x16xbf16>, tensor<2x3xf32>
}
// CHECK: %dx, %rstd = graph.rms_norm_backward %g, %x, %w {eps = 1.000000e-06 : f64} : tensor<2x3x16xbf16>, tensor<2x3x16xbf16>, tensor<16xbf16> -> (tensor<2x3x16xbf16>, tensor<2x3xf32>)
