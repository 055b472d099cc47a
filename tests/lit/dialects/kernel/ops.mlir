// RUN: emmy-opt %s | emmy-opt | filecheck %s

fork.site @k "k" "n=8" {
  %c1 = arith.constant 1 : i32
  %c4 = arith.constant 4 : i32
  %c64 = arith.constant 64 : i32
  %strategy = arith.constant 0 : i32
  kernel.func @k(%x : !kernel.ptr<bf16> "x", %y : !kernel.ptr<f32> "y") {
    // CHECK: kernel.func @k(%{{.*}} : !kernel.ptr<bf16> "x", %{{.*}} : !kernel.ptr<f32> "y") {
    %t = kernel.thread_id x
    // CHECK-NEXT: kernel.thread_id x
    %b = kernel.block_id y
    // CHECK-NEXT: kernel.block_id y
    %bd = kernel.block_dim z
    // CHECK-NEXT: kernel.block_dim z
    %gd = kernel.grid_dim x
    // CHECK-NEXT: kernel.grid_dim x
    %v = kernel.load %x[%t] : !kernel.ptr<bf16> -> f32
    // CHECK-NEXT: kernel.load %{{.*}}[%{{.*}}] : !kernel.ptr<bf16> -> f32
    %sp = kernel.device_call "pw_softplus"(%v, %v, %v) : (f32, f32, f32) -> f32
    // CHECK-NEXT: kernel.device_call "pw_softplus"(%{{.*}}, %{{.*}}, %{{.*}}) : (f32, f32, f32) -> f32
    %zero = arith.constant 0.000000e+00 : f32
    %s = kernel.for %j = %t to %c64 step %c4 width %c4 iter_args(%acc = %zero) -> (f32) {
      %e = kernel.load %x[%j] : !kernel.ptr<bf16> -> f32
      %n = arith.addf %acc, %e : f32
      kernel.yield %n : f32
    }
    // CHECK: kernel.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} width %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (f32) {
    // CHECK: kernel.yield %{{.*}} : f32
    kernel.for %j = %t to %c64 step %c4 width %c1 {
      kernel.yield
    }
    // CHECK: kernel.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} width %{{.*}} {
    %w0 = arith.constant 0 : i64
    %w64 = arith.constant 64 : i64
    kernel.for %j = %w0 to %w64 step %w64 width %c1 {
      %e = kernel.load %x[%j : i64] : !kernel.ptr<bf16> -> f32
      kernel.store %e, %y[%j : i64] : f32, !kernel.ptr<f32>
      kernel.yield
    }
    // a 64-bit kernel's loop and accesses (a site with `index=i64`)
    // CHECK: kernel.load %{{.*}}[%{{.*}} : i64] : !kernel.ptr<bf16> -> f32
    // CHECK-NEXT: kernel.store %{{.*}}, %{{.*}}[%{{.*}} : i64] : f32, !kernel.ptr<f32>
    %r = kernel.group_reduce "sum" (%s) group %c64 strategy %strategy ["shuffle", "smem"]
    // CHECK: kernel.group_reduce "sum" (%{{.*}}) group %{{.*}} strategy %{{.*}} ["shuffle", "smem"]
    %m, %l = kernel.group_reduce "online_softmax" (%v, %r) group %c64 strategy %strategy ["smem"]
    // CHECK-NEXT: kernel.group_reduce "online_softmax" (%{{.*}}, %{{.*}}) group
    kernel.barrier
    // CHECK-NEXT: kernel.barrier
    %tile = kernel.shared_array %c1, %c64 : !kernel.ptr<f32>
    // CHECK-NEXT: kernel.shared_array %{{.*}}, %{{.*}} : !kernel.ptr<f32>
    %acc = kernel.local_array %c4 : !kernel.ptr<f32>
    // CHECK-NEXT: kernel.local_array %{{.*}} : !kernel.ptr<f32>
    %inside = arith.cmpi slt, %t, %c64 : i32
    kernel.if %inside {
      kernel.store %m, %tile[%t] : f32, !kernel.ptr<f32>
    }
    // CHECK: kernel.if %{{.*}} {
    // CHECK-NEXT: kernel.store
    %frag = kernel.local_array %c4 : !kernel.ptr<i32>
    %ht = kernel.shared_array %c1, %c64 : !kernel.ptr<bf16>
    kernel.ldmatrix %frag[%c1], %ht[%t] {count = 4 : i32, trans = false} : !kernel.ptr<i32>, !kernel.ptr<bf16>
    // CHECK: kernel.ldmatrix %{{.*}}[%{{.*}}], %{{.*}}[%{{.*}}] {count = 4 : i32, trans = false} : !kernel.ptr<i32>, !kernel.ptr<bf16>
    kernel.mma %acc[%c1], %frag[%c1], %frag[%c1] {dtype = #kernel<dtype bf16>} : !kernel.ptr<f32>, !kernel.ptr<i32>, !kernel.ptr<i32>
    // CHECK-NEXT: kernel.mma %{{.*}}[%{{.*}}], %{{.*}}[%{{.*}}], %{{.*}}[%{{.*}}] {dtype = #kernel<dtype bf16>}
    kernel.pack_half2 %frag[%c1], %m, %m {dtype = #kernel<dtype f16>} : !kernel.ptr<i32>
    // CHECK-NEXT: kernel.pack_half2 %{{.*}}[%{{.*}}], %{{.*}}, %{{.*}} {dtype = #kernel<dtype f16>} : !kernel.ptr<i32>
    kernel.cp_async %ht[%t], %x[%t], %c4 : !kernel.ptr<bf16>, !kernel.ptr<bf16>
    // CHECK-NEXT: kernel.cp_async %{{.*}}[%{{.*}}], %{{.*}}[%{{.*}}], %{{.*}} : !kernel.ptr<bf16>, !kernel.ptr<bf16>
    kernel.cp_async_wait %c1
    // CHECK-NEXT: kernel.cp_async_wait %{{.*}}
    kernel.store %m, %y[%t] : f32, !kernel.ptr<f32>
    // CHECK: kernel.store %{{.*}}, %{{.*}}[%{{.*}}] : f32, !kernel.ptr<f32>
    kernel.return
    // CHECK-NEXT: kernel.return
  }
  kernel.launch @k grid %c1 block %c64 smem %c64
  // CHECK: kernel.launch @k grid %{{.*}} block %{{.*}} smem %{{.*}}
}

func.func @host(%a : tensor<8xbf16>) -> tensor<8xf32> {
  %o = kernel.call @k(%a) : (tensor<8xbf16>) -> tensor<8xf32>
  // CHECK: kernel.call @k(%{{.*}}) : (tensor<8xbf16>) -> tensor<8xf32>
  func.return %o : tensor<8xf32>
}
