// RUN: emmy-opt %s -p fuse-graph | filecheck %s

// What becomes one kernel is grouped into a graph.fused whose body reads only its
// arguments; the first value it yields is the kernel's result.

// A residual add before a LayerNorm whose sum is used again: the add is the norm's
// prologue and the fused op yields the sum too; the gelu reading the norm is its epilogue.
func.func @residual(%x : tensor<4x64xf32>, %r : tensor<4x64xf32>, %g : tensor<64xf32>, %b : tensor<64xf32>) -> (tensor<4x64xf32>, tensor<4x64xf32>) {
  %h = graph.add %x, %r : tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x64xf32>
  %n = graph.layer_norm %h, %g, %b {eps = 1.000000e-05 : f64} : tensor<4x64xf32>, tensor<64xf32>, tensor<64xf32> -> tensor<4x64xf32>
  %y = graph.gelu %n : tensor<4x64xf32> -> tensor<4x64xf32>
  func.return %y, %h : tensor<4x64xf32>, tensor<4x64xf32>
}
// CHECK-LABEL: func.func @residual(%x: tensor<4x64xf32>, %r: tensor<4x64xf32>, %g: tensor<64xf32>, %b: tensor<64xf32>)
// CHECK-NEXT:    %y, %h = graph.fused(%x, %r, %g, %b) {
// CHECK-NEXT:    ^bb0(%[[X:.*]]: tensor<4x64xf32>, %[[R:.*]]: tensor<4x64xf32>, %[[G:.*]]: tensor<64xf32>, %[[B:.*]]: tensor<64xf32>):
// CHECK-NEXT:      %[[H:.*]] = graph.add %[[X]], %[[R]]
// CHECK-NEXT:      %[[N:.*]] = graph.layer_norm %[[H]], %[[G]], %[[B]]
// CHECK-NEXT:      %[[Y:.*]] = graph.gelu %[[N]]
// CHECK-NEXT:      graph.yield %[[Y]], %[[H]] : tensor<4x64xf32>, tensor<4x64xf32>
// CHECK-NEXT:    } : (tensor<4x64xf32>, tensor<4x64xf32>, tensor<64xf32>, tensor<64xf32>) -> (tensor<4x64xf32>, tensor<4x64xf32>)
// CHECK-NEXT:    func.return %y, %h

// A chain that alone reads a matmul's product is its epilogue; the constant it reads is
// copied into the body.
func.func @epilogue(%x : tensor<4x64xf32>, %w : tensor<64x32xf32>, %bias : tensor<32xf32>) -> tensor<4x32xf32> {
  %half = graph.constant 5.000000e-01 : f32 -> tensor<f32>
  %mm = graph.matmul %x, %w : tensor<4x64xf32>, tensor<64x32xf32> -> tensor<4x32xf32>
  %s = graph.add %mm, %bias : tensor<4x32xf32>, tensor<32xf32> -> tensor<4x32xf32>
  %y = graph.mul %s, %half : tensor<4x32xf32>, tensor<f32> -> tensor<4x32xf32>
  func.return %y : tensor<4x32xf32>
}
// CHECK-LABEL: func.func @epilogue(
// CHECK-NEXT:    %y = graph.fused(%x, %w, %bias) {
// CHECK-NEXT:    ^bb0(
// CHECK-NEXT:      %half = graph.constant 5.000000e-01
// CHECK-NEXT:      %mm = graph.matmul
// CHECK-NEXT:      %s = graph.add %mm,
// CHECK-NEXT:      %{{.*}} = graph.mul %s, %half
// CHECK-NEXT:      graph.yield
// CHECK-NEXT:    } : (tensor<4x64xf32>, tensor<64x32xf32>, tensor<32xf32>) -> tensor<4x32xf32>
// CHECK-NEXT:    func.return %y

// An op that fuses with nothing stays as it is.
func.func @alone(%x : tensor<8x16xf32>) -> tensor<8x16xf32> {
  %y = graph.softmax %x {dim = -1 : i64} : tensor<8x16xf32> -> tensor<8x16xf32>
  func.return %y : tensor<8x16xf32>
}
// CHECK-LABEL: func.func @alone(
// CHECK-NEXT:    %y = graph.softmax %x
// CHECK-NEXT:    func.return %y

// A value the chain reads twice and nothing else reads (a gradient's shared factor, x in
// x + x · x): the chain's, not a kernel of its own.
func.func @shared(%a : tensor<4x64xf32>, %b : tensor<4x64xf32>) -> tensor<4x64xf32> {
  %t = graph.mul %a, %b : tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x64xf32>
  %s = graph.mul %t, %t : tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x64xf32>
  %y = graph.add %t, %s : tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x64xf32>
  func.return %y : tensor<4x64xf32>
}
// CHECK-LABEL: func.func @shared(
// CHECK-NEXT:    %y = graph.fused(%a, %b) {
// CHECK-NEXT:    ^bb0(
// CHECK-NEXT:      %t = graph.mul
// CHECK-NEXT:      %s = graph.mul %t, %t
// CHECK-NEXT:      %{{.*}} = graph.add %t, %s
// CHECK-NEXT:      graph.yield
// CHECK-NEXT:    } : (tensor<4x64xf32>, tensor<4x64xf32>) -> tensor<4x64xf32>
// CHECK-NEXT:    func.return %y

// Values shared level after level: spelled out at each use, the chain's text would double
// with each level; past its limit (emmy.families.chains) a shared value is an input.
func.func @shared_everywhere(%a : tensor<8xf32>) -> tensor<8xf32> {
  %t0 = graph.mul %a, %a : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %t1 = graph.mul %t0, %t0 : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %t2 = graph.mul %t1, %t1 : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %t3 = graph.mul %t2, %t2 : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %t4 = graph.mul %t3, %t3 : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %t5 = graph.mul %t4, %t4 : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %t6 = graph.mul %t5, %t5 : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %t7 = graph.mul %t6, %t6 : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %t8 = graph.mul %t7, %t7 : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %t9 = graph.mul %t8, %t8 : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %y = graph.exp %t9 : tensor<8xf32> -> tensor<8xf32>
  func.return %y : tensor<8xf32>
}
// CHECK-LABEL: func.func @shared_everywhere(
// CHECK-NEXT:    %t7 = graph.fused(%a) {
// CHECK:           graph.yield
// CHECK-NEXT:    } : (tensor<8xf32>) -> tensor<8xf32>
// CHECK-NEXT:    %t8 = graph.fused(%t7) {
// CHECK-NEXT:    ^bb0(
// CHECK-NEXT:      %t8_1 = graph.mul
// CHECK-NEXT:      graph.yield
// CHECK-NEXT:    } : (tensor<8xf32>) -> tensor<8xf32>
// CHECK-NEXT:    %y = graph.fused(%t8) {
// CHECK-NEXT:    ^bb0(
// CHECK-NEXT:      %t9 = graph.mul
// CHECK-NEXT:      %y_1 = graph.exp %t9
// CHECK-NEXT:      graph.yield
