// RUN: emmy-opt %s -p fuse-graph | filecheck %s

// A parallel residual (GPT-NeoX): the block's input %h, an elementwise sum, feeds two
// norms. The later norm, met first, takes the sum as its prologue and writes %h too; the
// earlier norm reads %h, so the fused op goes before that read, not where the later norm
// was (else %h would be used before it is defined).
func.func @parallel(%x : tensor<4x64xf32>, %r : tensor<4x64xf32>, %g1 : tensor<64xf32>, %b1 : tensor<64xf32>, %g2 : tensor<64xf32>, %b2 : tensor<64xf32>, %w : tensor<64x64xf32>) -> tensor<4x64xf32> {
  %h = graph.add %x, %r : tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x64xf32>
  %n1 = graph.layer_norm %h, %g1, %b1 {eps = 1.000000e-05 : f64} : tensor<4x64xf32>, tensor<64xf32>, tensor<64xf32> -> tensor<4x64xf32>
  %a = graph.matmul %n1, %w : tensor<4x64xf32>, tensor<64x64xf32> -> tensor<4x64xf32>
  %n2 = graph.layer_norm %h, %g2, %b2 {eps = 1.000000e-05 : f64} : tensor<4x64xf32>, tensor<64xf32>, tensor<64xf32> -> tensor<4x64xf32>
  %m = graph.matmul %n2, %w : tensor<4x64xf32>, tensor<64x64xf32> -> tensor<4x64xf32>
  %s = graph.add %a, %m : tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x64xf32>
  %y = graph.add %s, %h : tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x64xf32>
  func.return %y : tensor<4x64xf32>
}
// CHECK-LABEL: func.func @parallel(
// CHECK-NEXT:    %n2, %h = graph.fused(%x, %r, %g2, %b2) {
// CHECK:           graph.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    %n1 = graph.layer_norm %h, %g1, %b1
// CHECK-NEXT:    %m = graph.matmul %n2, %w
// CHECK-NEXT:    %y = graph.fused(%n1, %w, %m, %h) {

// Where the later norm's weights are computed after the earlier norm reads %h, the fused
// op could not come before that read: the earlier norm takes the sum as its prologue
// instead, and the later one reads %h.
func.func @late_weights(%x : tensor<4x64xf32>, %r : tensor<4x64xf32>, %g : tensor<64xf32>, %b : tensor<64xf32>, %w : tensor<64x64xf32>) -> (tensor<4x64xf32>, tensor<4x64xf32>) {
  %h = graph.add %x, %r : tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x64xf32>
  %n1 = graph.layer_norm %h, %g, %b {eps = 1.000000e-05 : f64} : tensor<4x64xf32>, tensor<64xf32>, tensor<64xf32> -> tensor<4x64xf32>
  %a = graph.matmul %n1, %w : tensor<4x64xf32>, tensor<64x64xf32> -> tensor<4x64xf32>
  %g2 = graph.reduce %a {kind = #graph<reduction sum>, dim = 0 : i64} : tensor<4x64xf32> -> tensor<64xf32>
  %n2 = graph.layer_norm %h, %g2, %b {eps = 1.000000e-05 : f64} : tensor<4x64xf32>, tensor<64xf32>, tensor<64xf32> -> tensor<4x64xf32>
  func.return %n2, %a : tensor<4x64xf32>, tensor<4x64xf32>
}
// CHECK-LABEL: func.func @late_weights(
// CHECK-NEXT:    %n1, %h = graph.fused(%x, %r, %g, %b) {
// CHECK:         %a = graph.matmul %n1, %w
// CHECK-NEXT:    %g2 = graph.reduce %a
// CHECK-NEXT:    %n2 = graph.layer_norm %h, %g2, %b
