// RUN: emmy-opt %s -p lower-graph | filecheck %s

// A value with two uses is computed once: the chain splits there.
func.func @main(%x : tensor<16xf16>) -> tensor<16xf16> {
  %e = graph.exp %x : tensor<16xf16> -> tensor<16xf16>
  %m = graph.mul %e, %e : tensor<16xf16>, tensor<16xf16> -> tensor<16xf16>
  func.return %m : tensor<16xf16>
}
// CHECK-DAG: "n=16,cols=16,T=f16,inputs=full,fn=(in0 * in0)"
// CHECK-DAG: "n=16,cols=16,T=f16,inputs=full,fn=exp(in0)"
