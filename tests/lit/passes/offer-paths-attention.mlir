// RUN: emmy-opt %s -p offer-paths --split-input-file | filecheck %s
// A second run offers nothing again: an attention that is already the fused option stays.
// RUN: emmy-opt %s -p offer-paths,offer-paths --split-input-file | filecheck %s

// A causal grouped-query attention: a site with the `path` knob, and the choice between the
// fused op, matmul → scaled causal softmax → matmul (the query heads of each key/value head
// folded into its rows by reshapes) and the vendor library's attention.
func.func @gqa(%q : tensor<1x4x6x8xf32>, %k : tensor<1x2x6x8xf32>, %v : tensor<1x2x6x8xf32>) -> tensor<1x4x6x8xf32> {
  %o = graph.attention %q, %k, %v {scale = 0.5 : f64, causal} : tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32> -> tensor<1x4x6x8xf32>
  func.return %o : tensor<1x4x6x8xf32>
}
// CHECK:      fork.site choice @attention_path_0 "attention_path" "bh=4,kv_bh=2,q_len=6,kv_len=6,d=8,T=f32,causal=yes,scale=0.5" {
// CHECK-NEXT:   fork.knob "path" ["fused", "unfused", "sdpa"] default "fused"
// CHECK-NEXT: }
// CHECK:      %[[O:.*]] = fork.alternatives @attention_path_0 ["fused", "unfused", "sdpa"] {
// CHECK-NEXT:   %[[A:.*]] = graph.attention %q, %k, %v {scale = 5.000000e-01 : f64, causal}
// CHECK-NEXT:   fork.yield %[[A]] : tensor<1x4x6x8xf32>
// CHECK-NEXT: } {
// CHECK-NEXT:   %[[Q:.*]] = graph.reshape %q : tensor<1x4x6x8xf32> -> tensor<2x12x8xf32>
// CHECK-NEXT:   %[[K:.*]] = graph.reshape %k : tensor<1x2x6x8xf32> -> tensor<2x6x8xf32>
// CHECK-NEXT:   %[[V:.*]] = graph.reshape %v : tensor<1x2x6x8xf32> -> tensor<2x6x8xf32>
// CHECK-NEXT:   %[[S:.*]] = graph.matmul %[[Q]], %[[K]] {transpose_b} : tensor<2x12x8xf32>, tensor<2x6x8xf32> -> tensor<2x12x6xf32>
// CHECK-NEXT:   %[[S4:.*]] = graph.reshape %[[S]] : tensor<2x12x6xf32> -> tensor<1x4x6x6xf32>
// CHECK-NEXT:   %[[C:.*]] = graph.constant 5.000000e-01
// CHECK-NEXT:   %[[T:.*]] = graph.mul %[[S4]], %[[C]]
// CHECK-NEXT:   %[[P:.*]] = graph.softmax %[[T]] {dim = -1 : i64, causal}
// CHECK-NEXT:   %[[P3:.*]] = graph.reshape %[[P]] : tensor<1x4x6x6xf32> -> tensor<2x12x6xf32>
// CHECK-NEXT:   %[[R:.*]] = graph.matmul %[[P3]], %[[V]] : tensor<2x12x6xf32>, tensor<2x6x8xf32> -> tensor<2x12x8xf32>
// CHECK-NEXT:   %[[R4:.*]] = graph.reshape %[[R]] : tensor<2x12x8xf32> -> tensor<1x4x6x8xf32>
// CHECK-NEXT:   fork.yield %[[R4]] : tensor<1x4x6x8xf32>
// CHECK-NEXT: } {
// CHECK-NEXT:   %[[L:.*]] = graph.attention %q, %k, %v {scale = 5.000000e-01 : f64, causal, library}
// CHECK-NEXT:   fork.yield %[[L]] : tensor<1x4x6x8xf32>
// CHECK-NEXT: } : tensor<1x4x6x8xf32>
// CHECK-NEXT: func.return %[[O]]

// -----

// Two attentions with one key (two layers) share one site: one decision for both. A scale
// of 1 needs no multiply.
func.func @layers(%q : tensor<1x2x4x8xf32>, %k : tensor<1x2x4x8xf32>, %v : tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %a = graph.attention %q, %k, %v {scale = 1.0 : f64} : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  %b = graph.attention %a, %k, %v {scale = 1.0 : f64} : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  func.return %b : tensor<1x2x4x8xf32>
}
// CHECK:     fork.site choice @attention_path_0 "attention_path" "bh=2,kv_bh=2,q_len=4,kv_len=4,d=8,T=f32,causal=no,scale=1.0"
// CHECK-NOT: fork.site
// CHECK:     %[[A:.*]] = fork.alternatives @attention_path_0
// CHECK-NOT: graph.mul
// CHECK:     graph.softmax %{{.*}} {dim = -1 : i64} :
// CHECK:     fork.alternatives @attention_path_0
// CHECK-NEXT:  graph.attention %[[A]], %k, %v

// -----

// A padding mask has no unfused path (the unfused softmax has no per-batch broadcast to add
// it): the fused kernel or the vendor library, which takes the mask.
func.func @masked(%q : tensor<2x2x4x8xf32>, %k : tensor<2x2x4x8xf32>, %v : tensor<2x2x4x8xf32>, %m : tensor<2x4xf32>) -> tensor<2x2x4x8xf32> {
  %o = graph.attention %q, %k, %v mask %m {scale = 0.5 : f64} : tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x4xf32> -> tensor<2x2x4x8xf32>
  func.return %o : tensor<2x2x4x8xf32>
}
// CHECK:       fork.knob "path" ["fused", "sdpa"] default "fused"
// CHECK-LABEL: func.func @masked
// CHECK-NEXT:    %[[O:.*]] = fork.alternatives @attention_path_0 ["fused", "sdpa"] {
// CHECK-NEXT:      %[[A:.*]] = graph.attention %q, %k, %v mask %m {scale = 5.000000e-01 : f64}
// CHECK-NEXT:      fork.yield %[[A]]
// CHECK-NEXT:    } {
// CHECK-NEXT:      %[[L:.*]] = graph.attention %q, %k, %v mask %m {scale = 5.000000e-01 : f64, library}
// CHECK-NEXT:      fork.yield %[[L]]
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[O]]

// -----

// An attention's gradients under a padding mask: a site of its own with the `path` knob,
// and the choice between emmy's kernels (the queries' statistics, then dq, dk and dv from
// them) and the vendor library's backward.
func.func @gradients(%q : tensor<2x4x8x16xf32>, %k : tensor<2x2x8x16xf32>, %v : tensor<2x2x8x16xf32>, %do : tensor<2x4x8x16xf32>, %o : tensor<2x4x8x16xf32>, %pad : tensor<2x8xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>) {
  %dq, %dk, %dv = graph.attention_gradients %q, %k, %v, %do, %o mask %pad {scale = 2.500000e-01 : f64} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x8xf32> -> (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>)
  func.return %dq, %dk, %dv : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>
}
// CHECK:      fork.site choice @attention_backward_path_0 "attention_backward_path" "bh=8,kv_bh=4,q_len=8,kv_len=8,d=16,T=f32,causal=no,scale=0.25,masked=yes,batch=2" {
// CHECK-NEXT:   fork.knob "path" ["fused", "sdpa"] default "fused"
// CHECK-NEXT: }
// CHECK:      %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = fork.alternatives @attention_backward_path_0 ["fused", "sdpa"] {
// CHECK-NEXT:   %[[S:.*]] = graph.attention_backward %q, %k, %v, %do, %o mask %pad {gradient = #graph<attention_gradient stats>, scale = 2.500000e-01 : f64} : {{.*}} -> tensor<2x4x8x2xf32>
// CHECK-NEXT:   %[[Q:.*]] = graph.attention_backward %q, %k, %v, %do, %[[S]] mask %pad {gradient = #graph<attention_gradient query>, {{.*}}} : {{.*}} -> tensor<2x4x8x16xf32>
// CHECK-NEXT:   %[[K:.*]] = graph.attention_backward %q, %k, %v, %do, %[[S]] mask %pad {gradient = #graph<attention_gradient key>, {{.*}}} : {{.*}} -> tensor<2x2x8x16xf32>
// CHECK-NEXT:   %[[V:.*]] = graph.attention_backward %q, %k, %v, %do, %[[S]] mask %pad {gradient = #graph<attention_gradient value>, {{.*}}} : {{.*}} -> tensor<2x2x8x16xf32>
// CHECK-NEXT:   fork.yield %[[Q]], %[[K]], %[[V]]
// CHECK-NEXT: } {
// CHECK-NEXT:   %{{.*}}, %{{.*}}, %{{.*}} = graph.attention_gradients %q, %k, %v, %do, %o mask %pad {scale = 2.500000e-01 : f64, library}
// CHECK-NEXT:   fork.yield
// CHECK-NEXT: } : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>
// CHECK-NEXT: func.return %[[DQ]], %[[DK]], %[[DV]]
