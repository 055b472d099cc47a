// RUN: emmy-opt %s -p lower-graph | filecheck %s

// index_select of rows (ids [7] i64), a flip of both dims, a triu and a cat of three: each
// one gather or cat site, keyed by its collapsed address map.
func.func @main(%x : tensor<100x64xf32>, %ids : tensor<7xi64>, %m : tensor<2x8x8xf32>, %a : tensor<2x3xi64>, %b : tensor<2x5xi64>) -> (tensor<7x64xf32>, tensor<100x64xf32>, tensor<2x8x8xf32>, tensor<2x11xi64>) {
  %y = graph.gather %x[%ids] {strides = [0, 1], offset = 0 : i64, index_strides = [[1, 0]], index_sizes = [100], index_steps = [64]} : tensor<100x64xf32>, tensor<7xi64> -> tensor<7x64xf32>
  %f = graph.gather %x[] {strides = [-64, -1], offset = 6399 : i64, index_strides = [], index_sizes = [], index_steps = []} : tensor<100x64xf32> -> tensor<100x64xf32>
  %t = graph.triangle %m {part = #graph<triangle upper>, diagonal = 1 : i64} : tensor<2x8x8xf32> -> tensor<2x8x8xf32>
  %c = graph.cat %a, %b, %a {dim = 1 : i64} : tensor<2x3xi64>, tensor<2x5xi64>, tensor<2x3xi64> -> tensor<2x11xi64>
  func.return %y, %f, %t, %c : tensor<7x64xf32>, tensor<100x64xf32>, tensor<2x8x8xf32>, tensor<2x11xi64>
}

// CHECK-DAG: fork.site @[[Y:gather_[0-9]+]] "gather" "size=6400,d0=1,d1=1,d2=7,d3=64,s0=0,s1=0,s2=0,s3=1,offset=0,T=f32,indices=1,m0=7,n0=100,r0=64,q02=1" {
// CHECK-DAG: fork.site @[[F:gather_[0-9]+]] "gather" "size=6400,d0=1,d1=1,d2=1,d3=6400,s0=0,s1=0,s2=0,s3=-1,offset=6399,T=f32" {
// CHECK-DAG: fork.site @[[T:gather_[0-9]+]] "gather" "size=128,d0=1,d1=2,d2=8,d3=8,s0=0,s1=64,s2=8,s3=1,offset=0,T=f32,tri=upper,diag=1" {
// CHECK-DAG: fork.site @[[C:cat_[0-9]+]] "cat" "outer=2,total=11,inner=1,T=i64,parts=3,w0=3,w1=5,w2=3" {
// CHECK: kernel.call @[[Y]](%{{.*}}, %{{.*}}) : (tensor<100x64xf32>, tensor<7xi64>) -> tensor<7x64xf32>
// CHECK: kernel.call @[[F]](%{{.*}}) : (tensor<100x64xf32>) -> tensor<100x64xf32>
// CHECK: kernel.call @[[T]](%{{.*}}) : (tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
// CHECK: kernel.call @[[C]](%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<2x3xi64>, tensor<2x5xi64>, tensor<2x3xi64>) -> tensor<2x11xi64>
