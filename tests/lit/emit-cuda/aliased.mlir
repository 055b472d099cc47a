// RUN: emmy-opt %s | filecheck %s --check-prefix=IR
// RUN: emmy-opt %s -t cuda | filecheck %s

// A kernel whose launch binds one buffer to x and y (an update written over its input) has
// the two marked `aliased`: they lose `__restrict__`, its other parameter keeps it. The
// same kernel with nothing marked keeps `__restrict__` on every parameter.
fork.site @in_place "f" "n=32" {
  %block = arith.constant 32 : i32
  %one = arith.constant 1 : i32
  %none = arith.constant 0 : i32
  kernel.func @in_place(%x : !kernel.ptr<f32> "x" aliased, %s : !kernel.ptr<f32> "s", %y : !kernel.ptr<f32> "y" aliased) {
    %i = kernel.thread_id x
    %v = kernel.load %x[%i] : !kernel.ptr<f32> -> f32
    %w = kernel.load %s[%i] : !kernel.ptr<f32> -> f32
    %sum = arith.addf %v, %w : f32
    kernel.store %sum, %y[%i] : f32, !kernel.ptr<f32>
    kernel.return
  }
  kernel.launch @in_place grid %one block %block smem %none
}
fork.site @distinct "f" "n=32" {
  %block = arith.constant 32 : i32
  %one = arith.constant 1 : i32
  %none = arith.constant 0 : i32
  kernel.func @distinct(%x : !kernel.ptr<f32> "x", %s : !kernel.ptr<f32> "s", %y : !kernel.ptr<f32> "y") {
    %i = kernel.thread_id x
    %v = kernel.load %x[%i] : !kernel.ptr<f32> -> f32
    %w = kernel.load %s[%i] : !kernel.ptr<f32> -> f32
    %sum = arith.addf %v, %w : f32
    kernel.store %sum, %y[%i] : f32, !kernel.ptr<f32>
    kernel.return
  }
  kernel.launch @distinct grid %one block %block smem %none
}

// IR: kernel.func @in_place(%{{.*}} : !kernel.ptr<f32> "x" aliased, %{{.*}} : !kernel.ptr<f32> "s", %{{.*}} : !kernel.ptr<f32> "y" aliased) {
// IR: kernel.func @distinct(%{{.*}} : !kernel.ptr<f32> "x", %{{.*}} : !kernel.ptr<f32> "s", %{{.*}} : !kernel.ptr<f32> "y") {

// CHECK: EMMY_KERNEL void __launch_bounds__(32, 1) in_place(const float* p_x, const float* __restrict__ p_s, float* p_y) {
// CHECK: EMMY_KERNEL void __launch_bounds__(32, 1) distinct(const float* __restrict__ p_x, const float* __restrict__ p_s, float* __restrict__ p_y) {
