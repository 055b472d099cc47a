// RUN: emmy-opt %s -p lower-graph | filecheck %s

// Row kernels (the norms, softmax) fused with the elementwise chains around them.

// A residual add before a LayerNorm whose sum is used again (the residual stream): the add
// becomes the norm's prologue, and the kernel writes the sum as its second output. The
// gelu that alone reads the norm becomes its epilogue.
func.func @residual(%x : tensor<4x64xf32>, %r : tensor<4x64xf32>, %g : tensor<64xf32>, %b : tensor<64xf32>) -> (tensor<4x64xf32>, tensor<4x64xf32>) {
  %h = graph.add %x, %r : tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x64xf32>
  %n = graph.layer_norm %h, %g, %b {eps = 1.000000e-05 : f64} : tensor<4x64xf32>, tensor<64xf32>, tensor<64xf32> -> tensor<4x64xf32>
  %y = graph.gelu %n : tensor<4x64xf32> -> tensor<4x64xf32>
  func.return %y, %h : tensor<4x64xf32>, tensor<4x64xf32>
}
// CHECK: fork.site @[[LN:layer_norm_[0-9]+]] "layer_norm" "rows=4,cols=64,T=f32,eps=1e-05,inputs=full/full,fn=(in0 + in1),epilogue=gelu(acc),store=yes" {
// CHECK: func.func @residual(%[[X:[^:]*]]: tensor<4x64xf32>, %[[R:[^:]*]]: tensor<4x64xf32>, %[[G:[^:]*]]: tensor<64xf32>, %[[B:[^:]*]]: tensor<64xf32>)
// CHECK-NEXT: %[[Y:[^,]*]], %[[H:[^ ]*]] = kernel.call @[[LN]](%[[X]], %[[R]], %[[G]], %[[B]]) : (tensor<4x64xf32>, tensor<4x64xf32>, tensor<64xf32>, tensor<64xf32>) -> (tensor<4x64xf32>, tensor<4x64xf32>)
// CHECK-NEXT: func.return %[[Y]], %[[H]] : tensor<4x64xf32>, tensor<4x64xf32>

// A scaled input read once and a bias-like epilogue input: no second output; the
// epilogue's input is numbered after the prologue's, read per row.
func.func @scaled(%x : tensor<2x3x32xf16>, %w : tensor<32xf16>, %c : tensor<32xf16>) -> tensor<2x3x32xf16> {
  %half = graph.constant 5.000000e-01 : f16 -> tensor<f16>
  %s = graph.mul %x, %half : tensor<2x3x32xf16>, tensor<f16> -> tensor<2x3x32xf16>
  %n = graph.rms_norm %s, %w {eps = 1.000000e-06 : f64} : tensor<2x3x32xf16>, tensor<32xf16> -> tensor<2x3x32xf16>
  %y = graph.add %n, %c : tensor<2x3x32xf16>, tensor<32xf16> -> tensor<2x3x32xf16>
  func.return %y : tensor<2x3x32xf16>
}
// CHECK: fork.site @[[RMS:rms_norm_[0-9]+]] "rms_norm" "rows=6,cols=32,T=f16,eps=1e-06,inputs=full/row,fn=(in0 * 0.5),epilogue=(acc + in1)" {
// CHECK: func.func @scaled(%[[SX:[^:]*]]: tensor<2x3x32xf16>, %[[SW:[^:]*]]: tensor<32xf16>, %[[SC:[^:]*]]: tensor<32xf16>)
// CHECK-NEXT: %{{.*}} = kernel.call @[[RMS]](%[[SX]], %[[SC]], %[[SW]]) : (tensor<2x3x32xf16>, tensor<32xf16>, tensor<32xf16>) -> tensor<2x3x32xf16>
// CHECK-NOT: graph.

// An epilogue that reads the norm's input from memory: the input's chain stays its own
// site, since the norm cannot both compute it and read it.
func.func @reads_input(%x : tensor<4x64xf32>, %r : tensor<4x64xf32>, %g : tensor<64xf32>, %b : tensor<64xf32>) -> tensor<4x64xf32> {
  %h = graph.add %x, %r : tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x64xf32>
  %n = graph.layer_norm %h, %g, %b {eps = 1.000000e-05 : f64} : tensor<4x64xf32>, tensor<64xf32>, tensor<64xf32> -> tensor<4x64xf32>
  %y = graph.add %n, %h : tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x64xf32>
  func.return %y : tensor<4x64xf32>
}
// CHECK-DAG: fork.site @[[ADD:elementwise_[0-9]+]] "elementwise" "n=256,cols=64,T=f32,inputs=full/full,fn=(in0 + in1)" {
// CHECK-DAG: fork.site @[[LN2:layer_norm_[0-9]+]] "layer_norm" "rows=4,cols=64,T=f32,eps=1e-05,epilogue=(acc + in0)" {
// CHECK: func.func @reads_input(
// CHECK-NEXT: %[[H2:.*]] = kernel.call @[[ADD]](
// CHECK-NEXT: %{{.*}} = kernel.call @[[LN2]](%[[H2]], %{{.*}}, %{{.*}}) :

// A residual add that alone reads a matmul's product stays the matmul's epilogue (one
// write of the sum instead of the product and the sum).
func.func @matmul_first(%x : tensor<4x64xf32>, %w : tensor<64x64xf32>, %r : tensor<4x64xf32>, %g : tensor<64xf32>) -> (tensor<4x64xf32>, tensor<4x64xf32>) {
  %mm = graph.matmul %x, %w : tensor<4x64xf32>, tensor<64x64xf32> -> tensor<4x64xf32>
  %h = graph.add %mm, %r : tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x64xf32>
  %n = graph.rms_norm %h, %g {eps = 1.000000e-06 : f64} : tensor<4x64xf32>, tensor<64xf32> -> tensor<4x64xf32>
  func.return %n, %h : tensor<4x64xf32>, tensor<4x64xf32>
}
// CHECK-DAG: "matmul" "batch=1,m=4,n=64,k=64,b_batch=1,b_rows=64,b_cols=64,layout=kn,T=f32,epilogue=(acc + in0),inputs=full"
// CHECK-DAG: "rms_norm" "rows=4,cols=64,T=f32,eps=1e-06" {

// A softmax fuses the same way: scaled scores plus a mask as its prologue, a product
// after it as its epilogue, one kernel.
func.func @softmax(%s : tensor<4x16xf32>, %m : tensor<16xf32>, %v : tensor<4x16xf32>) -> tensor<4x16xf32> {
  %c = graph.constant 1.250000e-01 : f32 -> tensor<f32>
  %scaled = graph.mul %s, %c : tensor<4x16xf32>, tensor<f32> -> tensor<4x16xf32>
  %masked = graph.add %scaled, %m : tensor<4x16xf32>, tensor<16xf32> -> tensor<4x16xf32>
  %p = graph.softmax %masked {dim = -1 : i64} : tensor<4x16xf32> -> tensor<4x16xf32>
  %y = graph.mul %p, %v : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<4x16xf32>
  func.return %y : tensor<4x16xf32>
}
// CHECK: fork.site @[[SM:softmax_[0-9]+]] "softmax" "rows=4,cols=16,T=f32,inputs=full/row/full,fn=((in0 * 0.125) + in1),epilogue=(acc * in2)" {
// CHECK: func.func @softmax(%[[S:[^:]*]]: tensor<4x16xf32>, %[[M:[^:]*]]: tensor<16xf32>, %[[V:[^:]*]]: tensor<4x16xf32>)
// CHECK-NEXT: %{{.*}} = kernel.call @[[SM]](%[[S]], %[[M]], %[[V]]) : (tensor<4x16xf32>, tensor<16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: func.return

// A softmax's and a log-softmax's gradients, each one row kernel over its output.
func.func @softmax_backward(%g : tensor<2x3x16xf32>, %p : tensor<2x3x16xf32>, %l : tensor<6x10xf16>, %gl : tensor<6x10xf16>) -> (tensor<2x3x16xf32>, tensor<6x10xf16>) {
  %dp = graph.softmax_backward %g, %p : tensor<2x3x16xf32>, tensor<2x3x16xf32> -> tensor<2x3x16xf32>
  %dl = graph.softmax_backward %gl, %l {log} : tensor<6x10xf16>, tensor<6x10xf16> -> tensor<6x10xf16>
  func.return %dp, %dl : tensor<2x3x16xf32>, tensor<6x10xf16>
}
// CHECK-DAG: fork.site @[[SB:softmax_backward_[0-9]+]] "softmax_backward" "rows=6,cols=16,T=f32" {
// CHECK-DAG: fork.site @[[LB:softmax_backward_[0-9]+]] "softmax_backward" "rows=6,cols=10,T=f16,log=yes" {
// CHECK: func.func @softmax_backward(%[[G:[^:]*]]: tensor<2x3x16xf32>, %[[P:[^:]*]]: tensor<2x3x16xf32>, %[[L:[^:]*]]: tensor<6x10xf16>, %[[GL:[^:]*]]: tensor<6x10xf16>)
// CHECK-NEXT: %{{.*}} = kernel.call @[[SB]](%[[G]], %[[P]])
// CHECK-NEXT: %{{.*}} = kernel.call @[[LB]](%[[GL]], %[[L]])

// A LayerNorm's input gradient: one row kernel over the gradient, the input, the saved
// statistics and the weight.
func.func @layer_norm_backward(%g : tensor<2x3x16xf32>, %x : tensor<2x3x16xf32>, %m : tensor<2x3xf32>, %r : tensor<2x3xf32>, %w : tensor<16xf32>) -> tensor<2x3x16xf32> {
  %dx = graph.layer_norm_backward %g, %x, %m, %r, %w : tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<16xf32> -> tensor<2x3x16xf32>
  func.return %dx : tensor<2x3x16xf32>
}
// CHECK: fork.site @[[LNB:layer_norm_backward_[0-9]+]] "layer_norm_backward" "rows=6,cols=16,T=f32" {
// CHECK: func.func @layer_norm_backward(%[[G:[^:]*]]: tensor<2x3x16xf32>, %[[X:[^:]*]]: tensor<2x3x16xf32>, %[[M:[^:]*]]: tensor<2x3xf32>, %[[R:[^:]*]]: tensor<2x3xf32>, %[[W:[^:]*]]: tensor<16xf32>)
// CHECK-NEXT: %{{.*}} = kernel.call @[[LNB]](%[[G]], %[[X]], %[[M]], %[[R]], %[[W]])

// An RMSNorm's input gradient and each row's rstd: one row kernel over the gradient, the
// input and the weight, which writes both.
func.func @rms_norm_backward(%g : tensor<2x3x16xf32>, %x : tensor<2x3x16xf32>, %w : tensor<16xf32>) -> (tensor<2x3x16xf32>, tensor<2x3xf32>) {
  %dx, %rstd = graph.rms_norm_backward %g, %x, %w {eps = 1.0e-05 : f64} : tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<16xf32> -> (tensor<2x3x16xf32>, tensor<2x3xf32>)
  func.return %dx, %rstd : tensor<2x3x16xf32>, tensor<2x3xf32>
}
// CHECK: fork.site @[[RNB:rms_norm_backward_[0-9]+]] "rms_norm_backward" "rows=6,cols=16,T=f32,eps=1e-05" {
// CHECK: func.func @rms_norm_backward(%[[G:[^:]*]]: tensor<2x3x16xf32>, %[[X:[^:]*]]: tensor<2x3x16xf32>, %[[W:[^:]*]]: tensor<16xf32>)
// CHECK-NEXT: %{{.*}}, %{{.*}} = kernel.call @[[RNB]](%[[G]], %[[X]], %[[W]])

// A training forward's LayerNorm, whose backward reads each row's mean and rstd: the same
// kernel writes them beside y and the residual sum it takes as its prologue.
func.func @statistics(%x : tensor<4x64xf32>, %r : tensor<4x64xf32>, %g : tensor<64xf32>, %b : tensor<64xf32>) -> (tensor<4x64xf32>, tensor<4x64xf32>, tensor<4xf32>, tensor<4xf32>) {
  %h = graph.add %x, %r : tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x64xf32>
  %n, %mean, %rstd = graph.layer_norm %h, %g, %b {eps = 1.000000e-05 : f64} : tensor<4x64xf32>, tensor<64xf32>, tensor<64xf32> -> tensor<4x64xf32>, tensor<4xf32>, tensor<4xf32>
  func.return %n, %h, %mean, %rstd : tensor<4x64xf32>, tensor<4x64xf32>, tensor<4xf32>, tensor<4xf32>
}
// CHECK: fork.site @[[LNS:layer_norm_[0-9]+]] "layer_norm" "rows=4,cols=64,T=f32,eps=1e-05,inputs=full/full,fn=(in0 + in1),store=yes,stats=yes" {
// CHECK: func.func @statistics(%[[SX:[^:]*]]: tensor<4x64xf32>, %[[SR:[^:]*]]: tensor<4x64xf32>, %[[SG:[^:]*]]: tensor<64xf32>, %[[SB:[^:]*]]: tensor<64xf32>)
// CHECK-NEXT: %[[SN:[^,]*]], %[[SH:[^,]*]], %[[SM:[^,]*]], %[[SS:[^ ]*]] = kernel.call @[[LNS]](%[[SX]], %[[SR]], %[[SG]], %[[SB]])
// CHECK-NEXT: func.return %[[SN]], %[[SH]], %[[SM]], %[[SS]]
