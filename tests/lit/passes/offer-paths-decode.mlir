// RUN: emmy-opt %s -p lower-graph,offer-paths | filecheck %s
// A second run offers nothing again: the calls of a choice's options stay as they are.
// RUN: emmy-opt %s -p lower-graph,offer-paths,offer-paths | filecheck %s
// RUN: emmy-opt %s -p 'lower-graph,offer-paths,resolve-forks{db=none oracles="pins,default" pin="attention_decode_path.path=split4"},specialize-forks,inline-host-paths' | filecheck %s --check-prefix=SPLIT

// One query of 4 heads over a cache of 1024: the one pass or split-KV, 4 or 16 chunks (64
// would leave chunks under 64 positions); few queries and a long cache: split by default.
// The key is the cache's size, never the length.
func.func @decode(%q : tensor<1x4x1x16xf32>, %k : tensor<1x2x1024x16xf32>, %v : tensor<1x2x1024x16xf32>, %len : tensor<1xi64>) -> tensor<1x4x1x16xf32> {
  %o = graph.cached_attention %q, %k, %v, %len : tensor<1x4x1x16xf32>, tensor<1x2x1024x16xf32>, tensor<1x2x1024x16xf32>, tensor<1xi64> -> tensor<1x4x1x16xf32>
  func.return %o : tensor<1x4x1x16xf32>
}
// CHECK:      fork.site @[[ONE:attention_decode_[0-9]+]] "attention_decode" "batch=1,heads=4,kv_heads=2,new=1,max_len=1024,dim=16,T=f32"
// CHECK:      fork.site @[[PARTS4:attention_decode_[0-9]+]] "attention_decode" "batch=1,heads=4,kv_heads=2,new=1,max_len=1024,dim=16,T=f32,splits=4"
// CHECK:      fork.site @[[COMBINE4:attention_decode_combine_[0-9]+]] "attention_decode_combine" "splits=4,rows=4,dim=16,T=f32"
// CHECK:      fork.site @[[PARTS16:attention_decode_[0-9]+]] "attention_decode" "{{.*}},splits=16"
// CHECK:      fork.site @[[COMBINE16:attention_decode_combine_[0-9]+]] "attention_decode_combine" "splits=16,rows=4,dim=16,T=f32"
// CHECK:      fork.site choice @[[CHOICE:attention_decode_path_[0-9]+]] "attention_decode_path" "batch=1,heads=4,kv_heads=2,new=1,max_len=1024,dim=16,T=f32" {
// CHECK-NEXT:   fork.knob "path" ["one_pass", "split4", "split16"] default "split16"
// CHECK:      func.func @decode(%[[Q:[^:]*]]: tensor<1x4x1x16xf32>, %[[K:[^:]*]]: tensor<1x2x1024x16xf32>, %[[V:[^:]*]]: tensor<1x2x1024x16xf32>, %[[LEN:[^:]*]]: tensor<1xi64>)
// CHECK-NEXT:   %[[O:.*]] = fork.alternatives @[[CHOICE]] ["one_pass", "split4", "split16"] {
// CHECK-NEXT:     %[[A:.*]] = kernel.call @[[ONE]](%[[Q]], %[[K]], %[[V]], %[[LEN]]) : (tensor<1x4x1x16xf32>, tensor<1x2x1024x16xf32>, tensor<1x2x1024x16xf32>, tensor<1xi64>) -> tensor<1x4x1x16xf32>
// CHECK-NEXT:     fork.yield %[[A]] : tensor<1x4x1x16xf32>
// CHECK-NEXT:   } {
// CHECK-NEXT:     %[[P4:.*]], %[[L4:.*]] = kernel.call @[[PARTS4]](%[[Q]], %[[K]], %[[V]], %[[LEN]]) : (tensor<1x4x1x16xf32>, tensor<1x2x1024x16xf32>, tensor<1x2x1024x16xf32>, tensor<1xi64>) -> (tensor<4x1x4x1x16xf32>, tensor<4x1x4x1xf32>)
// CHECK-NEXT:     %[[C4:.*]] = kernel.call @[[COMBINE4]](%[[P4]], %[[L4]]) : (tensor<4x1x4x1x16xf32>, tensor<4x1x4x1xf32>) -> tensor<1x4x1x16xf32>
// CHECK-NEXT:     fork.yield %[[C4]] : tensor<1x4x1x16xf32>
// CHECK-NEXT:   } {
// CHECK-NEXT:     %[[P16:.*]], %[[L16:.*]] = kernel.call @[[PARTS16]](%[[Q]], %[[K]], %[[V]], %[[LEN]])
// CHECK-NEXT:     %[[C16:.*]] = kernel.call @[[COMBINE16]](%[[P16]], %[[L16]])
// CHECK-NEXT:     fork.yield %[[C16]] : tensor<1x4x1x16xf32>
// CHECK-NEXT:   } : tensor<1x4x1x16xf32>
// CHECK-NEXT:   func.return %[[O]] : tensor<1x4x1x16xf32>

// SPLIT:      func.func @decode(
// SPLIT-NEXT:   %[[P:.*]], %[[L:.*]] = kernel.call @attention_decode_{{[0-9]+}}(
// SPLIT-NEXT:   %[[C:.*]] = kernel.call @attention_decode_combine_{{[0-9]+}}(%[[P]], %[[L]])
// SPLIT-NEXT:   func.return %[[C]] : tensor<1x4x1x16xf32>

// A batch with as many queries as multiprocessors: no choice, the one pass alone.
func.func @wide(%q : tensor<2x128x1x16xf32>, %k : tensor<2x128x1024x16xf32>, %len : tensor<1xi64>) -> tensor<2x128x1x16xf32> {
  %o = graph.cached_attention %q, %k, %k, %len : tensor<2x128x1x16xf32>, tensor<2x128x1024x16xf32>, tensor<2x128x1024x16xf32>, tensor<1xi64> -> tensor<2x128x1x16xf32>
  func.return %o : tensor<2x128x1x16xf32>
}
// CHECK:      func.func @wide(
// CHECK-NEXT:   %{{.*}} = kernel.call @attention_decode_{{[0-9]+}}(
// CHECK-NEXT:   func.return
