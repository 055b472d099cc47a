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

// -----

kernel.func @k(%x : !kernel.ptr<f32> "x", %y : !kernel.ptr<f32> "y") {
  %c = arith.constant 0 : i32
  %r = "kernel.group_reduce"(%c, %c, %c) <{kind = #kernel<reduction sum>, strategies = [#kernel<reduce_strategy smem>], operandSegmentSizes = array<i32: 1, 1, 1>}> : (i32, i32, i32) -> i32
  kernel.return
}
// CHECK: kernel.group_reduce reduces f32 values

// -----

kernel.func @k(%x : !kernel.ptr<f32> "x") {
  %c = arith.constant 0 : i32
  kernel.for %j = %c to %c step %c width %c {
    kernel.barrier
  }
  kernel.return
}
// CHECK: Operation kernel.barrier terminates block in single-block region but is not a terminator

// -----

"kernel.func"() <{sym_name = "k", arg_names = ["x", "y"]}> ({
^bb0(%x : !kernel.ptr<f32>):
  "kernel.return"() : () -> ()
}) : () -> ()
// CHECK: kernel.func needs one name per parameter

// -----

"kernel.func"() <{sym_name = "k", arg_names = ["n"]}> ({
^bb0(%n : i32):
  "kernel.return"() : () -> ()
}) : () -> ()
// CHECK: kernel.func parameters must be kernel.ptr, got i32

// -----

"kernel.func"() <{sym_name = "k", arg_names = []}> ({
  %c = arith.constant 0 : i32
}) : () -> ()
// CHECK: Operation arith.constant terminates block in single-block region but is not a terminator

// -----

"kernel.func"() <{sym_name = "k", arg_names = []}> ({
  %c = arith.constant 0 : i16
  %f = arith.constant 0.0 : f32
  %r = "kernel.for"(%c, %c, %c, %c, %f) ({
  ^bb0(%j : i16, %a : f32):
    "kernel.yield"(%a) : (f32) -> ()
  }) : (i16, i16, i16, i16, f32) -> f32
  "kernel.return"() : () -> ()
}) : () -> ()
// CHECK: operand 'lower' at position 0 does not verify

// -----

"kernel.func"() <{sym_name = "k", arg_names = []}> ({
  %c = arith.constant 0 : i32
  %w = arith.constant 1 : i32
  %l = arith.constant 0 : i64
  "kernel.for"(%l, %c, %c, %w) ({
  ^bb0(%j : i64):
    "kernel.yield"() : () -> ()
  }) : (i64, i32, i32, i32) -> ()
  "kernel.return"() : () -> ()
}) : () -> ()
// CHECK: kernel.for index, bounds and step must be one integer type

// -----

kernel.func @k(%x : !kernel.ptr<f32> "x") {
  %c = arith.constant 1 : i1
  kernel.if %c {
    kernel.barrier
  }
  kernel.return
}
// CHECK: kernel.barrier inside kernel.if: threads that skip it would deadlock

// -----

kernel.func @k(%x : !kernel.ptr<f32> "x") {
  %c = arith.constant 0 : i32
  %f = kernel.local_array %c : !kernel.ptr<i32>
  kernel.ldmatrix %f[%c], %x[%c] {count = 3 : i32, trans = true} : !kernel.ptr<i32>, !kernel.ptr<f32>
  kernel.return
}
// CHECK: kernel.ldmatrix loads 1, 2 or 4 matrices

// -----

kernel.func @k(%x : !kernel.ptr<f32> "x") {
  %c = arith.constant 0 : i32
  kernel.mma %x[%c], %x[%c], %x[%c] {dtype = #kernel<dtype f32>} : !kernel.ptr<f32>, !kernel.ptr<f32>, !kernel.ptr<f32>
  kernel.return
}
// CHECK: kernel.mma multiplies f16 or bf16, not f32

// -----

// A call names a site the device runs: one that exists, is a site, and is not a choice.
func.func @f(%x : tensor<4xf32>) -> tensor<4xf32> {
  %y = kernel.call @nowhere(%x) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: kernel.call names @nowhere, which is not defined

// -----

kernel.func @k(%x : !kernel.ptr<f32> "x") {
  kernel.return
}
func.func @f(%x : tensor<4xf32>) -> tensor<4xf32> {
  %y = kernel.call @k(%x) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: kernel.call names @k, which is a kernel.func, not a fork.site

// -----

fork.site choice @c "matmul_path" "n=4" {
}
func.func @f(%x : tensor<4xf32>) -> tensor<4xf32> {
  %y = kernel.call @c(%x) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: kernel.call names @c, a choice site, which has nothing to run (a fork.alternatives names it)

// -----

// A launch names the kernel of the site it is in.
fork.site @s "f" "n=4" {
  %c = arith.constant 1 : i32
  kernel.func @s(%x : !kernel.ptr<f32> "x") {
    kernel.return
  }
  kernel.launch @other grid %c block %c smem %c
}
// CHECK: kernel.launch names @other, which is not a kernel.func of its site @s

// -----

func.func @f() {
  %c = arith.constant 1 : i32
  kernel.launch @k grid %c block %c smem %c
  func.return
}
// CHECK: 'kernel.launch' expects parent op 'fork.site'

// -----

kernel.func @k(%x : !kernel.ptr<f32> "x") {
  %c = arith.constant 0 : i32
  %v = kernel.load %x[%c] : !kernel.ptr<f32> -> f32
  %w = kernel.device_call "pw_sign"(%v) : (f32) -> f16
  kernel.return
}
// CHECK: kernel.device_call takes f32 and integers, not f16

// -----

kernel.func @k(%x : !kernel.ptr<f32> "x") {
  %c = arith.constant 0 : i32
  %v = kernel.load %x[%c] : !kernel.ptr<f32> -> f32
  %w = kernel.device_call "pw_frobnicate"(%v) : (f32) -> f32
  kernel.return
}
// CHECK: kernel.device_call callee 'pw_frobnicate' is not a device function of a pointwise op
