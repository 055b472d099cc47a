// RUN: emmy-opt %s -p lower-graph | filecheck %s

// A boolean mask becomes its additive form by a kernel of its own, which attention reads.
func.func @main(%q : tensor<1x2x8x16xf32>, %keep : tensor<1x8xi8>) -> tensor<1x2x8x16xf32> {
  %bias = graph.mask_bias %keep : tensor<1x8xi8> -> tensor<1x8xf32>
  %o = graph.attention %q, %q, %q mask %bias {scale = 2.500000e-01 : f64} : tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x8xf32> -> tensor<1x2x8x16xf32>
  func.return %o : tensor<1x2x8x16xf32>
}
// CHECK: fork.site @mask_bias_{{[0-9]+}} "mask_bias" "n=8,T=f32" {
// CHECK: fork.knob "threads" [64, 128, 256, 512] default 256
// CHECK: func.func @main(%[[Q:[^:]*]]: tensor<1x2x8x16xf32>, %[[KEEP:[^:]*]]: tensor<1x8xi8>)
// CHECK-NEXT: %[[BIAS:.*]] = kernel.call @mask_bias_{{[0-9]+}}(%[[KEEP]]) : (tensor<1x8xi8>) -> tensor<1x8xf32>
// CHECK-NEXT: kernel.call @attention_{{[0-9]+}}(%[[Q]], %[[Q]], %[[Q]], %[[BIAS]])
