// RUN: emmy-opt %s --split-input-file --parsing-diagnostics | filecheck %s

// A coordinate's dimension is x, y or z.
kernel.func @k(%x : !kernel.ptr<f32> "x") {
  %t = kernel.thread_id w
  kernel.return
}
// CHECK: Expected `x`, `y`, or `z`.

// -----

kernel.func @k(%x : !kernel.ptr<f32> "x") {
  %c = arith.constant 0 : i32
  %f = arith.constant 0.0 : f32
  %r = kernel.group_reduce "xor" (%f) group %c strategy %c ["shuffle"]
  kernel.return
}
// CHECK: Expected `sum`, `max`, `min`, `prod`, or `online_softmax`.

// -----

// A dtype is one of emmy's storage types.
kernel.func @k(%x : !kernel.ptr<f32> "x") {
  %c = arith.constant 0 : i32
  kernel.mma %x[%c], %x[%c], %x[%c] {dtype = #kernel<dtype f8>} : !kernel.ptr<f32>, !kernel.ptr<f32>, !kernel.ptr<f32>
  kernel.return
}
// CHECK: Expected `f32`, `f16`, `bf16`, `i8`, `i32`, `i64`, `c64`, or `c128`.

// -----

// A reduction's strategies are a closed set.
kernel.func @k(%x : !kernel.ptr<f32> "x") {
  %c = arith.constant 0 : i32
  %f = arith.constant 0.0 : f32
  %r = kernel.group_reduce "sum" (%f) group %c strategy %c ["shuffle", "atomics"]
  kernel.return
}
// CHECK: unknown reduction strategy 'atomics' (one of shuffle, smem)
