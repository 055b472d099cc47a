// RUN: emmy-opt %s -p lower-graph | filecheck %s

// An attention the vendor library runs (attention-paths' `sdpa` option) becomes a call of a
// host-call site: no kernel, the attention's key.
func.func @library(%q : tensor<2x4x6x16xbf16>, %k : tensor<2x2x6x16xbf16>, %v : tensor<2x2x6x16xbf16>) -> tensor<2x4x6x16xbf16> {
  %o = graph.attention %q, %k, %v {scale = 0.25 : f64, causal, library} : tensor<2x4x6x16xbf16>, tensor<2x2x6x16xbf16>, tensor<2x2x6x16xbf16> -> tensor<2x4x6x16xbf16>
  func.return %o : tensor<2x4x6x16xbf16>
}
// CHECK:      fork.site host_call @vendor_attention_0 "vendor_attention" "bh=8,kv_bh=4,q_len=6,kv_len=6,d=16,T=bf16,causal=yes,scale=0.25" {
// CHECK-NEXT: }
// CHECK:      %o = kernel.call @vendor_attention_0(%q, %k, %v)
// CHECK-NEXT: func.return %o
