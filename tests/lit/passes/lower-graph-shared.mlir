// RUN: emmy-opt %s -p lower-graph | filecheck %s

// A value the chain alone reads, twice: one kernel, which spells the value out at each use
// (the CUDA compiler computes it once), not a kernel that writes it for another to read.
func.func @main(%x : tensor<16xf16>) -> tensor<16xf16> {
  %e = graph.exp %x : tensor<16xf16> -> tensor<16xf16>
  %m = graph.mul %e, %e : tensor<16xf16>, tensor<16xf16> -> tensor<16xf16>
  func.return %m : tensor<16xf16>
}
// CHECK: fork.site @[[ONE:elementwise_[0-9]+]] "elementwise" "n=16,cols=16,T=f16,inputs=full,fn=(exp(in0) * exp(in0))"
// CHECK-LABEL: func.func @main(
// CHECK-NEXT: kernel.call @[[ONE]]
// CHECK-NEXT: func.return

// A value read outside the chain too: the chain splits there, the value computed once.
func.func @kept(%x : tensor<16xf16>) -> (tensor<16xf16>, tensor<16xf16>) {
  %e = graph.exp %x : tensor<16xf16> -> tensor<16xf16>
  %m = graph.mul %e, %e : tensor<16xf16>, tensor<16xf16> -> tensor<16xf16>
  func.return %m, %e : tensor<16xf16>, tensor<16xf16>
}
// CHECK-DAG: "n=16,cols=16,T=f16,inputs=full,fn=(in0 * in0)"
// CHECK-DAG: "n=16,cols=16,T=f16,inputs=full,fn=exp(in0)"
