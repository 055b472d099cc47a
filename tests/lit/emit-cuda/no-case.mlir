// RUN: not emmy-opt %s -t cuda 2>&1 | filecheck %s

// An op the CUDA printer has no case for is one line naming it.
fork.site @s "f" "n=8" {
  %block = arith.constant 32 : i32
  %one = arith.constant 1 : i32
  %none = arith.constant 0 : i32
  kernel.func @k(%x : !kernel.ptr<f32> "x") {
    %i = kernel.thread_id x
    %v = kernel.load %x[%i] : !kernel.ptr<f32> -> f32
    %c = math.cos %v : f32
    kernel.store %c, %x[%i] : f32, !kernel.ptr<f32>
    kernel.return
  }
  kernel.launch @k grid %one block %block smem %none
}
// CHECK: emmy-opt: error: emit-cuda has no case for math.cos
