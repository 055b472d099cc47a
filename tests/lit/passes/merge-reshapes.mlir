// RUN: emmy-opt %s -p merge-reshapes | filecheck %s

// Three reshapes of one value to one shape are one; the chain after them (gelu_new's
// pieces, reading x three times) moves before the reshape, onto the bias add, which it
// joins as one chain; the reshape comes after it.
func.func @conv1d_gelu(%mm : tensor<16x64xf32>, %b : tensor<64xf32>) -> tensor<2x8x64xf32> {
  %h = graph.add %mm, %b : tensor<16x64xf32>, tensor<64xf32> -> tensor<16x64xf32>
  %x0 = graph.reshape %h : tensor<16x64xf32> -> tensor<2x8x64xf32>
  %x1 = graph.reshape %h : tensor<16x64xf32> -> tensor<2x8x64xf32>
  %c = graph.constant 4.471500e-02 : f32 -> tensor<f32>
  %cube = graph.mul %x0, %x1 : tensor<2x8x64xf32>, tensor<2x8x64xf32> -> tensor<2x8x64xf32>
  %y = graph.mul %cube, %c : tensor<2x8x64xf32>, tensor<f32> -> tensor<2x8x64xf32>
  func.return %y : tensor<2x8x64xf32>
}
// CHECK-LABEL: func.func @conv1d_gelu(
// CHECK-NEXT:    %h = graph.add %mm, %b
// CHECK-NEXT:    %c = graph.constant
// CHECK-NEXT:    %[[CUBE:.*]] = graph.mul %h, %h : tensor<16x64xf32>, tensor<16x64xf32> -> tensor<16x64xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.mul %[[CUBE]], %c : tensor<16x64xf32>, tensor<f32> -> tensor<16x64xf32>
// CHECK-NEXT:    %{{.*}} = graph.reshape %[[Y]] : tensor<16x64xf32> -> tensor<2x8x64xf32>
// CHECK-NOT:     graph.reshape

// A product read through a reshape stays so (the chain after it is a row kernel's
// prologue, as it was); so does an op that broadcasts a reshaped value.
func.func @kept(%s : tensor<8x16x16xf32>, %h : tensor<16x64xf32>, %r : tensor<2x8x64xf32>) -> (tensor<2x4x16x16xf32>, tensor<2x8x64xf32>) {
  %q = graph.matmul %s, %s : tensor<8x16x16xf32>, tensor<8x16x16xf32> -> tensor<8x16x16xf32>
  %v = graph.reshape %q : tensor<8x16x16xf32> -> tensor<2x4x16x16xf32>
  %c = graph.constant 2.500000e-01 : f32 -> tensor<f32>
  %scaled = graph.mul %v, %c : tensor<2x4x16x16xf32>, tensor<f32> -> tensor<2x4x16x16xf32>
  %e = graph.exp %h : tensor<16x64xf32> -> tensor<16x64xf32>
  %w = graph.reshape %e : tensor<16x64xf32> -> tensor<2x8x64xf32>
  %sum = graph.add %w, %r : tensor<2x8x64xf32>, tensor<2x8x64xf32> -> tensor<2x8x64xf32>
  func.return %scaled, %sum : tensor<2x4x16x16xf32>, tensor<2x8x64xf32>
}
// CHECK-LABEL: func.func @kept(
// CHECK:         %v = graph.reshape %q
// CHECK:         %scaled = graph.mul %v, %c
// CHECK:         %w = graph.reshape %e
// CHECK-NEXT:    %sum = graph.add %w, %r
