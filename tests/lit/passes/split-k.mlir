// RUN: emmy-opt %s -p lower-graph,split-k | filecheck %s
// RUN: emmy-opt %s -p 'lower-graph,split-k,resolve-forks{db=none oracles="pins,default" pin="split_k=4"},specialize-forks' | filecheck %s --check-prefix=PINNED

// Few output tiles and a deep k: the matmul becomes a choice between the one kernel and
// splits of k (slices of 256 or more), each the parts' kernel and a split_sum that adds
// them up and applies the epilogue (the bias).
func.func @deep(%x : tensor<8x1024xf32>, %w : tensor<1024x96xf32>, %b : tensor<96xf32>) -> tensor<8x96xf32> {
  %y = graph.matmul %x, %w : tensor<8x1024xf32>, tensor<1024x96xf32> -> tensor<8x96xf32>
  %z = graph.add %y, %b : tensor<8x96xf32>, tensor<96xf32> -> tensor<8x96xf32>
  func.return %z : tensor<8x96xf32>
}
// CHECK:      fork.site @[[WHOLE:matmul_[0-9]+]] "matmul" "batch=1,m=8,n=96,k=1024,b_batch=1,b_rows=1024,b_cols=96,layout=kn,T=f32,epilogue=(acc + in0),inputs=row"
// CHECK:      fork.site @[[CHOICE:matmul_split_[0-9]+]] "matmul_split" "batch=1,m=8,n=96,k=1024,b_batch=1,b_rows=1024,b_cols=96,layout=kn,T=f32,epilogue=(acc + in0),inputs=row" {
// CHECK-NEXT:   fork.knob "split_k" [1, 2, 4] default 1
// CHECK:      fork.site @[[PARTS2:matmul_[0-9]+]] "matmul" "{{.*}},epilogue=acc,inputs=,split=2"
// CHECK:      fork.site @[[SUM2:split_sum_[0-9]+]] "split_sum" "split=2,size=768,n=96,T=f32,epilogue=(acc + in0),inputs=row"
// CHECK:      fork.site @[[PARTS4:matmul_[0-9]+]] "matmul" "{{.*}},epilogue=acc,inputs=,split=4"
// CHECK:      fork.site @[[SUM4:split_sum_[0-9]+]] "split_sum" "split=4,size=768,n=96,T=f32,epilogue=(acc + in0),inputs=row"
// CHECK:      func.func @deep(%[[X:[^:]*]]: tensor<8x1024xf32>, %[[W:[^:]*]]: tensor<1024x96xf32>, %[[B:[^:]*]]: tensor<96xf32>)
// CHECK-NEXT:   %[[Z:.*]] = fork.alternatives @[[CHOICE]] ["1", "2", "4"] {
// CHECK-NEXT:     %[[C:.*]] = kernel.call @[[WHOLE]](%[[X]], %[[W]], %[[B]])
// CHECK-NEXT:     fork.yield %[[C]] : tensor<8x96xf32>
// CHECK-NEXT:   } {
// CHECK-NEXT:     %[[P2:.*]] = kernel.call @[[PARTS2]](%[[X]], %[[W]]) : (tensor<8x1024xf32>, tensor<1024x96xf32>) -> tensor<2x768xf32>
// CHECK-NEXT:     %[[S2:.*]] = kernel.call @[[SUM2]](%[[P2]], %[[B]]) : (tensor<2x768xf32>, tensor<96xf32>) -> tensor<8x96xf32>
// CHECK-NEXT:     fork.yield %[[S2]] : tensor<8x96xf32>
// CHECK-NEXT:   } {
// CHECK-NEXT:     %[[P4:.*]] = kernel.call @[[PARTS4]](%[[X]], %[[W]])
// CHECK-NEXT:     %[[S4:.*]] = kernel.call @[[SUM4]](%[[P4]], %[[B]])
// CHECK-NEXT:     fork.yield %[[S4]] : tensor<8x96xf32>
// CHECK-NEXT:   } : tensor<8x96xf32>
// CHECK-NEXT:   func.return %[[Z]]

// Pinned to 4: the choice's site keeps every option's calls, its parts and its sum are
// inlined, and the sites of the other options are dropped.
// PINNED:      fork.site @matmul_split_{{[0-9]+}} "matmul_split" {{.*}}config = {split_k = 4 : i64}{{.*}}paths = "{\221\22: [{{.*}}], \222\22: [{{.*}}\22family\22: \22split_sum\22{{.*}}], \224\22: [{{.*}}]}"
// PINNED-NOT:  split=2
// PINNED:      fork.site @[[P:matmul_[0-9]+]] "matmul" "{{.*}},split=4"
// PINNED:      fork.site @[[S:split_sum_[0-9]+]] "split_sum" "split=4,{{.*}}"
// PINNED:      func.func @deep
// PINNED-NEXT:   %[[PARTS:.*]] = kernel.call @[[P]](%x, %w)
// PINNED-NEXT:   %[[SUM:.*]] = kernel.call @[[S]](%[[PARTS]], %b)
// PINNED-NEXT:   func.return %[[SUM]]

// Many output tiles (16 x 16 of 64 x 64) or a shallow k: one kernel, no choice.
func.func @wide(%x : tensor<1024x1024xf32>, %w : tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
  %y = graph.matmul %x, %w : tensor<1024x1024xf32>, tensor<1024x1024xf32> -> tensor<1024x1024xf32>
  func.return %y : tensor<1024x1024xf32>
}
// CHECK-LABEL: func.func @wide
// CHECK-NEXT:    kernel.call @matmul_{{[0-9]+}}
// CHECK-NEXT:    func.return

func.func @shallow(%x : tensor<8x256xf32>, %w : tensor<256x96xf32>) -> tensor<8x96xf32> {
  %y = graph.matmul %x, %w : tensor<8x256xf32>, tensor<256x96xf32> -> tensor<8x96xf32>
  func.return %y : tensor<8x96xf32>
}
// CHECK-LABEL: func.func @shallow
// CHECK-NEXT:    kernel.call @matmul_{{[0-9]+}}
// CHECK-NEXT:    func.return
