// RUN: emmy-opt %s -p lower-sites | filecheck %s

// Each graph.fused is one site of the family of its matmul or row op (else elementwise),
// called on the fused op's inputs; a graph op outside one is a site of its own.

func.func @fused_norm(%x : tensor<4x64xf32>, %r : tensor<4x64xf32>, %g : tensor<64xf32>, %b : tensor<64xf32>) -> (tensor<4x64xf32>, tensor<4x64xf32>) {
  %y, %h = graph.fused(%x, %r, %g, %b) {
  ^bb0(%0: tensor<4x64xf32>, %1: tensor<4x64xf32>, %2: tensor<64xf32>, %3: tensor<64xf32>):
    %h1 = graph.add %0, %1 : tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x64xf32>
    %n = graph.layer_norm %h1, %2, %3 {eps = 1.000000e-05 : f64} : tensor<4x64xf32>, tensor<64xf32>, tensor<64xf32> -> tensor<4x64xf32>
    %y1 = graph.gelu %n : tensor<4x64xf32> -> tensor<4x64xf32>
    graph.yield %y1, %h1 : tensor<4x64xf32>, tensor<4x64xf32>
  } : (tensor<4x64xf32>, tensor<4x64xf32>, tensor<64xf32>, tensor<64xf32>) -> (tensor<4x64xf32>, tensor<4x64xf32>)
  func.return %y, %h : tensor<4x64xf32>, tensor<4x64xf32>
}
// CHECK: fork.site @layer_norm_0 "layer_norm" "rows=4,cols=64,T=f32,eps=1e-05,inputs=full/full,fn=(in0 + in1),epilogue=gelu(acc),store=yes" {
// CHECK: func.func @fused_norm(%x: tensor<4x64xf32>, %r: tensor<4x64xf32>, %g: tensor<64xf32>, %b: tensor<64xf32>)
// CHECK-NEXT: %y, %h = kernel.call @layer_norm_0(%x, %r, %g, %b) : (tensor<4x64xf32>, tensor<4x64xf32>, tensor<64xf32>, tensor<64xf32>) -> (tensor<4x64xf32>, tensor<4x64xf32>)
// CHECK-NEXT: func.return %y, %h

// The same chain twice, and an op alone: the two chains share one site.
func.func @shared(%x : tensor<8x16xf32>, %c : tensor<16xf32>) -> tensor<8x16xf32> {
  %a = graph.fused(%x, %c) {
  ^bb0(%0: tensor<8x16xf32>, %1: tensor<16xf32>):
    %s = graph.mul %0, %1 : tensor<8x16xf32>, tensor<16xf32> -> tensor<8x16xf32>
    graph.yield %s : tensor<8x16xf32>
  } : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  %b = graph.fused(%a, %c) {
  ^bb0(%0: tensor<8x16xf32>, %1: tensor<16xf32>):
    %s = graph.mul %0, %1 : tensor<8x16xf32>, tensor<16xf32> -> tensor<8x16xf32>
    graph.yield %s : tensor<8x16xf32>
  } : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  %y = graph.softmax %b {dim = -1 : i64} : tensor<8x16xf32> -> tensor<8x16xf32>
  func.return %y : tensor<8x16xf32>
}
// CHECK: fork.site @softmax_1 "softmax" "rows=8,cols=16,T=f32" {
// CHECK: fork.site @elementwise_2 "elementwise" "n=128,cols=16,T=f32,inputs=full/row,fn=(in0 * in1)" {
// CHECK-NOT: fork.site
// CHECK: func.func @shared(
// CHECK-NEXT: %a = kernel.call @elementwise_2(%x, %c)
// CHECK-NEXT: %b = kernel.call @elementwise_2(%a, %c)
// CHECK-NEXT: %y = kernel.call @softmax_1(%b)
// CHECK-NEXT: func.return %y
