// RUN: emmy-opt %S/../../../emmy/families/softmax/softmax.emmy -p 'resolve-forks{db=none pin="vec=4,algo=online,reduction=smem"},specialize-forks' -t cuda | filecheck %s

// CHECK: #include "emmy_device.cuh"
// CHECK: EMMY_KERNEL void __launch_bounds__({{[0-9]+}}, 1) softmax(const float* __restrict__ p_in0, float* __restrict__ p_y) {
// The row is read four floats at a time.
// CHECK: emmy::load_vec<4>(p_in0 + {{.*}}, [[VEC:vec[0-9]+]]);
// CHECK-NEXT: #pragma unroll
// CHECK-NEXT: for (int [[K:k[0-9]+]] = 0; [[K]] < 4; ++[[K]]) {
// CHECK: emmy::group_reduce_online<256, emmy::Reduce::smem>({{.*}}, {{.*}}, emmy::smem());
// CHECK: emmy::store_vec<4>(p_y + {{.*}});
// CHECK: EMMY_EMU_ENTRY(softmax)
