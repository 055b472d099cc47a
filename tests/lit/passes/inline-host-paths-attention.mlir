// RUN: emmy-opt %s -p 'offer-paths,lower-graph,resolve-forks{db=none oracles="pins,default" pin="path=unfused"},specialize-forks,inline-host-paths' | filecheck %s
// RUN: emmy-opt %s -p 'offer-paths,lower-graph,resolve-forks{db=none oracles="pins,default"},specialize-forks,inline-host-paths' | filecheck %s --check-prefix=FUSED

// The pinned path's calls are inlined where the choice was; the choice's site keeps every
// option's calls (for a bench) and the kernel sites of the option not taken are dropped.
func.func @causal(%q : tensor<1x2x6x8xf32>, %k : tensor<1x2x6x8xf32>, %v : tensor<1x2x6x8xf32>) -> tensor<1x2x6x8xf32> {
  %o = graph.attention %q, %k, %v {scale = 0.5 : f64, causal} : tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32> -> tensor<1x2x6x8xf32>
  func.return %o : tensor<1x2x6x8xf32>
}
// CHECK:     fork.site choice @attention_path_0 "attention_path" "{{.*}}" attributes {{{.*}}config = #fork.config<path = "unfused">, provenance = #fork.provenance<path = "pin">, paths = #fork.paths<fused = [#fork.path_call<"attention", {{.*}}>], unfused = [#fork.path_call<"matmul", {{.*}}>, #fork.path_call<"softmax", "rows=12,cols=6,T=f32,fn=(in0 * 0.5),causal=6", #fork.config<threads = 256, {{.*}}>, [tensor<1x2x6x6xf32>], [tensor<1x2x6x6xf32>]>, #fork.path_call<"matmul", {{.*}}>]>} {
// CHECK-NEXT: }
// CHECK-NOT: "attention"
// CHECK:     fork.site @softmax_{{.*}} "softmax" "rows=12,cols=6,T=f32,fn=(in0 * 0.5),causal=6"
// CHECK:     func.func @causal
// CHECK-NEXT:  graph.reshape %q
// CHECK-NEXT:  graph.reshape %k
// CHECK-NEXT:  graph.reshape %v
// CHECK-NEXT:  kernel.call @matmul_
// CHECK-NEXT:  graph.reshape
// CHECK-NEXT:  kernel.call @softmax_
// CHECK-NEXT:  graph.reshape
// CHECK-NEXT:  kernel.call @matmul_
// CHECK-NEXT:  %[[O:.*]] = graph.reshape
// CHECK-NEXT:  func.return %[[O]]

// FUSED:     config = #fork.config<path = "fused">
// FUSED-NOT: fork.site @matmul
// FUSED-NOT: fork.site @softmax
// FUSED:     fork.site @attention_{{[0-9]+}} "attention"
// FUSED:     func.func @causal
// FUSED-NEXT:  %[[O:.*]] = kernel.call @attention_
// FUSED-NEXT:  func.return %[[O]]
