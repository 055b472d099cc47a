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


// A host-level choice: its site holds the knob; each region yields what the op stands for.
fork.site @attention_path_0 "attention_path" "n=4" {
  %path = fork.knob "path" ["fused", "unfused"] default "fused"
}
// CHECK: fork.site @attention_path_0 "attention_path" "n=4" {
// CHECK-NEXT: fork.knob "path" ["fused", "unfused"] default "fused"
func.func @choice(%t : tensor<4xf32>) -> tensor<4xf32> {
  %y = fork.alternatives @attention_path_0 ["fused", "unfused"] {
    %a = graph.exp %t : tensor<4xf32> -> tensor<4xf32>
    fork.yield %a : tensor<4xf32>
  } {
    fork.yield %t : tensor<4xf32>
  } : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK:      %[[Y:.*]] = fork.alternatives @attention_path_0 ["fused", "unfused"] {
// CHECK-NEXT:   %[[A:.*]] = graph.exp %t
// CHECK-NEXT:   fork.yield %[[A]] : tensor<4xf32>
// CHECK-NEXT: } {
// CHECK-NEXT:   fork.yield %t : tensor<4xf32>
// CHECK-NEXT: } : tensor<4xf32>
// CHECK-NEXT: func.return %[[Y]]
