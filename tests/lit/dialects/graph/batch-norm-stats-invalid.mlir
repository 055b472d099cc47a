// RUN: emmy-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @rank(%x : tensor<2x8x4x4xf32>) -> tensor<2x8xf32> {
  %s = graph.batch_norm_stats %x : tensor<2x8x4x4xf32> -> tensor<2x8xf32>
  func.return %s : tensor<2x8xf32>
}
// CHECK: graph.batch_norm_stats needs an input of rank 3 (batch, channels, spatial)

// -----

func.func @result(%x : tensor<2x8x16xf32>) -> tensor<8x2xf32> {
  %s = graph.batch_norm_stats %x : tensor<2x8x16xf32> -> tensor<8x2xf32>
  func.return %s : tensor<8x2xf32>
}
// CHECK: graph.batch_norm_stats gives f32 [2, 8], two a channel

// -----

func.func @mean(%x : tensor<2x8x16xf32>, %dy : tensor<2x8x16xf32>, %m : tensor<8xbf16>) -> tensor<2x8xf32> {
  %g = graph.batch_norm_stats %x grad %dy mean %m : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<8xbf16> -> tensor<2x8xf32>
  func.return %g : tensor<2x8xf32>
}
// CHECK: graph.batch_norm_stats's mean must be one f32 a channel
