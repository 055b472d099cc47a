// RUN: emmy-opt %s -p lower-graph | filecheck %s

// An attention the vendor library runs (offer-paths' `sdpa` option) becomes a call of a
// host-call site: no kernel, the attention's key.
func.func @library(%q : tensor<2x4x6x16xbf16>, %k : tensor<2x2x6x16xbf16>, %v : tensor<2x2x6x16xbf16>) -> tensor<2x4x6x16xbf16> {
  %o = graph.attention %q, %k, %v {scale = 0.25 : f64, causal, library} : tensor<2x4x6x16xbf16>, tensor<2x2x6x16xbf16>, tensor<2x2x6x16xbf16> -> tensor<2x4x6x16xbf16>
  func.return %o : tensor<2x4x6x16xbf16>
}
// CHECK:      fork.site host_call @vendor_attention_0 "vendor_attention" "bh=8,kv_bh=4,q_len=6,kv_len=6,d=16,T=bf16,causal=yes,scale=0.25" {
// CHECK-NEXT: }
// CHECK:      %o = kernel.call @vendor_attention_0(%q, %k, %v)
// CHECK-NEXT: func.return %o

// An attention's gradients the vendor library runs (offer-paths' `sdpa` option): one
// host call on q, k, v and the output's gradient, giving dq, dk and dv.
func.func @library_gradients(%q : tensor<2x4x6x16xbf16>, %k : tensor<2x2x6x16xbf16>, %v : tensor<2x2x6x16xbf16>, %do : tensor<2x4x6x16xbf16>, %o : tensor<2x4x6x16xbf16>) -> (tensor<2x4x6x16xbf16>, tensor<2x2x6x16xbf16>, tensor<2x2x6x16xbf16>) {
  %dq, %dk, %dv = graph.attention_gradients %q, %k, %v, %do, %o {scale = 0.25 : f64, causal, library} : tensor<2x4x6x16xbf16>, tensor<2x2x6x16xbf16>, tensor<2x2x6x16xbf16>, tensor<2x4x6x16xbf16>, tensor<2x4x6x16xbf16> -> (tensor<2x4x6x16xbf16>, tensor<2x2x6x16xbf16>, tensor<2x2x6x16xbf16>)
  func.return %dq, %dk, %dv : tensor<2x4x6x16xbf16>, tensor<2x2x6x16xbf16>, tensor<2x2x6x16xbf16>
}
// CHECK:      fork.site host_call @vendor_attention_backward_{{[0-9]+}} "vendor_attention_backward" "bh=8,kv_bh=4,q_len=6,kv_len=6,d=16,T=bf16,causal=yes,scale=0.25" {
// CHECK:      %dq, %dk, %dv = kernel.call @vendor_attention_backward_{{[0-9]+}}(%q, %k, %v, %do) : {{.*}} -> (tensor<2x4x6x16xbf16>, tensor<2x2x6x16xbf16>, tensor<2x2x6x16xbf16>)
// CHECK-NEXT: func.return %dq, %dk, %dv
