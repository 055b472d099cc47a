// RUN: emmy-opt %s --split-input-file --verify-diagnostics | filecheck %s

kernel.func @k(%x : !kernel.ptr<f16> "x") {
  %c = arith.constant 0 : i32
  %v = kernel.load %x[%c] : !kernel.ptr<f16> -> f16
  kernel.return
}
// CHECK: kernel.load from !kernel.ptr<f16> gives f32, not f16

// -----

kernel.func @k(%x : !kernel.ptr<f16> "x") {
  %c = arith.constant 0 : i32
  %v = arith.constant 1 : i32
  kernel.store %v, %x[%c] : i32, !kernel.ptr<f16>
  kernel.return
}
// CHECK: kernel.store to !kernel.ptr<f16> takes f32, not i32

// -----

kernel.func @k(%x : !kernel.ptr<f32> "x", %y : !kernel.ptr<f32> "x2") {
  %t = kernel.thread_id "w"
  kernel.return
}
// CHECK: kernel.thread_id dimension must be x, y or z, got 'w'

// -----

kernel.func @k(%x : !kernel.ptr<f32> "x") {
  %c = arith.constant 0 : i32
  %f = arith.constant 0.0 : f32
  %r = kernel.group_reduce "prod" (%f) group %c strategy %c ["shuffle"]
  kernel.return
}
// CHECK: unknown reduction kind 'prod'

// -----

kernel.func @k(%x : !kernel.ptr<f32> "x") {
  %c = arith.constant 0 : i32
  %f = arith.constant 0.0 : f32
  %r = kernel.group_reduce "sum" (%f) group %c strategy %c ["atomics"]
  kernel.return
}
// CHECK: unknown reduction strategy 'atomics'

// -----

kernel.func @k(%x : !kernel.ptr<f32> "x") {
  %c = arith.constant 0 : i32
  %f = arith.constant 0.0 : f32
  %r, %s = kernel.group_reduce "max" (%f, %f) group %c strategy %c ["smem"]
  kernel.return
}
// CHECK: reduction 'max' takes 1 value(s)

// -----

kernel.func @k(%x : !kernel.ptr<f32> "x") {
  %c = arith.constant 0 : i32
  %f = arith.constant 0.0 : f32
  %r = kernel.for %j = %c to %c step %c width %c iter_args(%a = %f) -> (f32) {
    kernel.yield
  }
  kernel.return
}
// CHECK: kernel.yield must carry the loop's iter_args types

// -----

kernel.func @k(%x : !kernel.ptr<i1> "x") {
  kernel.return
}
// CHECK: kernel.ptr cannot point to i1
