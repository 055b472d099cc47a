// RUN: emmy-opt %s -p lower-graph | filecheck %s

// A static KV cache's update at one decoding step (a position of i64) and at a prefill of
// 5 (positions of i32): one index_copy site each, keyed by shapes alone (the positions are
// an operand of the call, read at run time).
func.func @main(%k : tensor<2x2x9x16xf32>, %pos : tensor<1xi64>, %new : tensor<2x2x1x16xf32>, %v : tensor<1x4x9x8xbf16>, %pre : tensor<5xi32>, %rows : tensor<1x4x5x8xbf16>) -> (tensor<2x2x9x16xf32>, tensor<1x4x9x8xbf16>) {
  %a = graph.index_copy %k[%pos], %new {dim = 2 : i64} : tensor<2x2x9x16xf32>, tensor<1xi64>, tensor<2x2x1x16xf32> -> tensor<2x2x9x16xf32>
  %b = graph.index_copy %v[%pre], %rows {dim = 2 : i64} : tensor<1x4x9x8xbf16>, tensor<5xi32>, tensor<1x4x5x8xbf16> -> tensor<1x4x9x8xbf16>
  func.return %a, %b : tensor<2x2x9x16xf32>, tensor<1x4x9x8xbf16>
}

// CHECK-DAG: fork.site @[[A:index_copy_[0-9]+]] "index_copy" "outer=4,rows=9,inner=16,m=1,T=f32,I=i64" {
// CHECK-DAG: fork.site @[[B:index_copy_[0-9]+]] "index_copy" "outer=4,rows=9,inner=8,m=5,T=bf16,I=i32" {
// CHECK: kernel.call @[[A]](%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<2x2x9x16xf32>, tensor<1xi64>, tensor<2x2x1x16xf32>) -> tensor<2x2x9x16xf32>
// CHECK: kernel.call @[[B]](%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<1x4x9x8xbf16>, tensor<5xi32>, tensor<1x4x5x8xbf16>) -> tensor<1x4x9x8xbf16>
