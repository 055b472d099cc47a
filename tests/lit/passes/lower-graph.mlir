// RUN: emmy-opt %s -p lower-graph | filecheck %s

func.func @main(%x : tensor<8x64xf32>, %b : tensor<64xf32>) -> tensor<8x64xf32> {
  %c = graph.constant 2.000000e+00 : f32 -> tensor<f32>
  %m = graph.mul %x, %c : tensor<8x64xf32>, tensor<f32> -> tensor<8x64xf32>
  %a = graph.add %m, %b : tensor<8x64xf32>, tensor<64xf32> -> tensor<8x64xf32>
  %g = graph.gelu %a : tensor<8x64xf32> -> tensor<8x64xf32>
  %s = graph.softmax %g {dim = -1 : i64} : tensor<8x64xf32> -> tensor<8x64xf32>
  func.return %s : tensor<8x64xf32>
}
// The elementwise chain that alone feeds the softmax becomes its prologue, written into
// the key: one site, read from x and b.
// CHECK: fork.site @softmax_0 "softmax" "rows=8,cols=64,T=f32,inputs=full/row,fn=gelu(((in0 * 2.0) + in1))" {
// CHECK: fork.knob "vec" [1, 2, 4, 8] default 8 where "cols % vec == 0 && vec * sizeof(T) <= 16"
// CHECK-NOT: fork.site
// CHECK: func.func @main(%[[X:[^:]*]]: tensor<8x64xf32>, %[[B:[^:]*]]: tensor<64xf32>) -> tensor<8x64xf32> {
// CHECK-NEXT: %[[SM:.*]] = kernel.call @softmax_0(%[[X]], %[[B]]) : (tensor<8x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
// CHECK-NEXT: func.return %[[SM]] : tensor<8x64xf32>
