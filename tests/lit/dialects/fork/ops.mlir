// RUN: emmy-opt %s | emmy-opt | filecheck %s

fork.site @scale_0 "scale" "n=64,T=f32" {
// CHECK: fork.site @scale_0 "scale" "n=64,T=f32" {
  %threads = fork.knob "threads" [64, 128, 256] default 128
  // CHECK: %{{.*}} = fork.knob "threads" [64, 128, 256] default 128
  %vec = fork.knob "vec" [1, 2, 4] default 4 where "n % vec == 0"
  // CHECK-NEXT: fork.knob "vec" [1, 2, 4] default 4 where "n % vec == 0"
  %algo = fork.knob "algo" ["a", "b"] default "a" = "b" by {oracle = "pin"}
  // CHECK-NEXT: fork.knob "algo" ["a", "b"] default "a" = "b" by {oracle = "pin"}
  kernel.func @scale_0(%x : !kernel.ptr<f32> "x") {
    fork.alternatives %algo ["a", "b"] {
      kernel.barrier
    } {
    }
    // CHECK: fork.alternatives %{{.*}} ["a", "b"] {
    // CHECK-NEXT: kernel.barrier
    // CHECK-NEXT: } {
    // CHECK-NEXT: }
    kernel.return
  }
  kernel.launch @scale_0 grid %vec block %threads smem %vec
}

