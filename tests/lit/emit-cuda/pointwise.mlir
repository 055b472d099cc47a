// RUN: emmy-opt %s -p 'lower-graph,resolve-forks{db=none pin="vec=1,threads=64,per_thread=1"},specialize-forks' -t cuda | filecheck %s

// A chain of the pointwise table's ops over inputs of three dtypes: one kernel, each input
// read at its own storage type, the bool as a condition, i64 math in 64 bits, each op
// calling its device function.
func.func @main(%mask : tensor<4x8xi8>, %ids : tensor<8xi64>, %x : tensor<4x8xf32>) -> tensor<4x8xi64> {
  %three = graph.constant 3 : i64 -> tensor<i64>
  %big = graph.constant 1099511627776 : i64 -> tensor<i64>
  %gt = graph.gt %ids, %three : tensor<8xi64>, tensor<i64> -> tensor<8xi8>
  %xi = graph.convert %x : tensor<4x8xf32> -> tensor<4x8xi64>
  %m = graph.mul %xi, %big : tensor<4x8xi64>, tensor<i64> -> tensor<4x8xi64>
  %w = graph.where %mask, %m, %ids : tensor<4x8xi8>, tensor<4x8xi64>, tensor<8xi64> -> tensor<4x8xi64>
  %c = graph.convert %gt : tensor<8xi8> -> tensor<8xi64>
  %y = graph.bitwise_xor %w, %c : tensor<4x8xi64>, tensor<8xi64> -> tensor<4x8xi64>
  func.return %y : tensor<4x8xi64>
}
// CHECK: EMMY_KERNEL void __launch_bounds__({{[0-9]+}}, 1) elementwise_0(const signed char* __restrict__ p_in0, const float* __restrict__ p_in1, const long long* __restrict__ p_in2, long long* __restrict__ p_out) {
// CHECK: const bool [[MASK:v[0-9]+]] = {{.*}} != 0;
// CHECK: emmy::pw_to_i64(
// CHECK: * 1099511627776LL;
// CHECK: emmy::pw_where([[MASK]],
// CHECK: emmy::pw_gt({{.*}}, 3LL);
// CHECK: emmy::pw_bitwise_xor(
// CHECK: *(p_out + {{.*}}) = {{.*}};
