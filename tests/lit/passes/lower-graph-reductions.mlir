// RUN: emmy-opt %s -p lower-graph | filecheck %s

// graph.reduce picks its family by kind and dtype: float values (reduce_rows, a var with
// its correction; over a dim before the last, in place: reduce_cols), an index (arg_rows), integer and boolean rows (reduce_rows_int, with
// the result's dtype Y, over any dim in place: [rows, cols, inner]); graph.cumsum
// accumulates floats in f32 and integers in i64, over any dim in place too.
func.func @reductions(%x : tensor<4x10xf32>, %ids : tensor<2x16xi64>, %mask : tensor<2x16xi8>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xi64>, tensor<2xi64>, tensor<2xi8>, tensor<2x16xi64>, tensor<4x10xf32>) {
  %p = graph.reduce %x {kind = #graph<reduction prod>} : tensor<4x10xf32> -> tensor<4xf32>
  %v = graph.reduce %x {kind = #graph<reduction var>, correction = 1 : i64} : tensor<4x10xf32> -> tensor<4xf32>
  %a = graph.reduce %x {kind = #graph<reduction argmax>} : tensor<4x10xf32> -> tensor<4xi64>
  %s = graph.reduce %ids {kind = #graph<reduction sum>} : tensor<2x16xi64> -> tensor<2xi64>
  %any = graph.reduce %mask {kind = #graph<reduction any>} : tensor<2x16xi8> -> tensor<2xi8>
  %c = graph.cumsum %mask {dim = 0 : i64} : tensor<2x16xi8> -> tensor<2x16xi64>
  %cf = graph.cumsum %x : tensor<4x10xf32> -> tensor<4x10xf32>
  func.return %p, %v, %a, %s, %any, %c, %cf : tensor<4xf32>, tensor<4xf32>, tensor<4xi64>, tensor<2xi64>, tensor<2xi8>, tensor<2x16xi64>, tensor<4x10xf32>
}
// CHECK-DAG: fork.site @{{reduce_rows_[0-9]+}} "reduce_rows" "rows=4,cols=10,T=f32,op=prod" {
// CHECK-DAG: fork.site @{{reduce_rows_[0-9]+}} "reduce_rows" "rows=4,cols=10,T=f32,op=var,correction=1" {
// CHECK-DAG: fork.site @{{arg_rows_[0-9]+}} "arg_rows" "rows=4,cols=10,T=f32,op=argmax" {
// CHECK-DAG: fork.site @{{reduce_rows_int_[0-9]+}} "reduce_rows_int" "rows=2,cols=16,inner=1,T=i64,Y=i64,op=sum" {
// CHECK-DAG: fork.site @{{reduce_rows_int_[0-9]+}} "reduce_rows_int" "rows=2,cols=16,inner=1,T=i8,Y=i8,op=any" {
// CHECK-DAG: fork.site @{{cumsum_[0-9]+}} "cumsum" "rows=1,cols=2,inner=16,T=i8,Y=i64,acc=i64" {
// CHECK-DAG: fork.site @{{cumsum_[0-9]+}} "cumsum" "rows=4,cols=10,inner=1,T=f32,Y=f32,acc=f32" {

// A float sum over the first dim (a bias's gradient) and a max over a middle dim read the
// tensor in place, as [rows, cols, inner].
func.func @columns(%g : tensor<6x16xf16>, %x : tensor<2x5x3xf32>) -> (tensor<16xf16>, tensor<2x1x3xf32>) {
  %b = graph.reduce %g {kind = #graph<reduction sum>, dim = 0 : i64} : tensor<6x16xf16> -> tensor<16xf16>
  %m = graph.reduce %x {kind = #graph<reduction max>, dim = 1 : i64} : tensor<2x5x3xf32> -> tensor<2x1x3xf32>
  func.return %b, %m : tensor<16xf16>, tensor<2x1x3xf32>
}
// CHECK-DAG: fork.site @[[BIAS:reduce_cols_[0-9]+]] "reduce_cols" "rows=1,cols=6,inner=16,T=f16,op=sum" {
// CHECK-DAG: fork.site @[[MID:reduce_cols_[0-9]+]] "reduce_cols" "rows=2,cols=5,inner=3,T=f32,op=max" {
// CHECK: func.func @columns(%[[G:[^:]*]]: tensor<6x16xf16>, %[[X:[^:]*]]: tensor<2x5x3xf32>)
// CHECK-NEXT: %{{.*}} = kernel.call @[[BIAS]](%[[G]]) : (tensor<6x16xf16>) -> tensor<16xf16>
// CHECK-NEXT: %{{.*}} = kernel.call @[[MID]](%[[X]]) : (tensor<2x5x3xf32>) -> tensor<2x1x3xf32>
