// RUN: emmy-opt %s -p lower-graph,offer-paths | filecheck %s
// A second run offers nothing again: the calls of a choice's options stay as they are.
// RUN: emmy-opt %s -p lower-graph,offer-paths,offer-paths | filecheck %s
// RUN: emmy-opt %s -p 'lower-graph,offer-paths,resolve-forks{db=none oracles="pins,default" pin="matmul_path.matmul=split4"},specialize-forks,inline-host-paths' | filecheck %s --check-prefix=SPLIT
// RUN: emmy-opt %s -p 'lower-graph,offer-paths,resolve-forks{db=none oracles="pins,default" pin="matmul_path.matmul=vendor"},specialize-forks,inline-host-paths' | filecheck %s --check-prefix=VENDOR

// Few output tiles and a deep k: the matmul is a choice between its kernel, splits of k
// (slices of 256 or more: the parts' kernel, then split_sum adding them up under the
// epilogue) and the vendor library (a site with no kernel, then the epilogue as an
// elementwise chain over the product and the bias).
func.func @deep(%x : tensor<8x1024xf32>, %w : tensor<1024x96xf32>, %b : tensor<96xf32>) -> tensor<8x96xf32> {
  %y = graph.matmul %x, %w : tensor<8x1024xf32>, tensor<1024x96xf32> -> tensor<8x96xf32>
  %z = graph.add %y, %b : tensor<8x96xf32>, tensor<96xf32> -> tensor<8x96xf32>
  func.return %z : tensor<8x96xf32>
}
// CHECK:      fork.site @[[WHOLE:matmul_[0-9]+]] "matmul" "batch=1,m=8,n=96,k=1024,b_batch=1,b_rows=1024,b_cols=96,layout=kn,T=f32,epilogue=(acc + in0),inputs=row"
// CHECK:      fork.site @[[PARTS2:matmul_[0-9]+]] "matmul" "{{.*}},epilogue=acc,inputs=,split=2"
// CHECK:      fork.site @[[SUM2:split_sum_[0-9]+]] "split_sum" "split=2,size=768,n=96,T=f32,epilogue=(acc + in0),inputs=row"
// CHECK:      fork.site @[[PARTS4:matmul_[0-9]+]] "matmul" "{{.*}},epilogue=acc,inputs=,split=4"
// CHECK:      fork.site @[[SUM4:split_sum_[0-9]+]] "split_sum" "split=4,size=768,n=96,T=f32,epilogue=(acc + in0),inputs=row"
// CHECK:      fork.site host_call @[[PRODUCT_SITE:vendor_matmul_[0-9]+]] "vendor_matmul" "batch=1,m=8,n=96,k=1024,b_batch=1,layout=kn,T=f32" {
// CHECK-NEXT: }
// CHECK:      fork.site @[[EPILOGUE:elementwise_[0-9]+]] "elementwise" "n=768,cols=96,T=f32,inputs=full/row,fn=(in0 + in1)"
// CHECK:      fork.site choice @[[CHOICE:matmul_path_[0-9]+]] "matmul_path" "batch=1,m=8,n=96,k=1024,b_batch=1,b_rows=1024,b_cols=96,layout=kn,T=f32,epilogue=(acc + in0),inputs=row" {
// CHECK-NEXT:   fork.knob "matmul" ["kernel", "split2", "split4", "vendor"] default "kernel"
// CHECK:      func.func @deep(%[[X:[^:]*]]: tensor<8x1024xf32>, %[[W:[^:]*]]: tensor<1024x96xf32>, %[[B:[^:]*]]: tensor<96xf32>)
// CHECK-NEXT:   %[[Z:.*]] = fork.alternatives @[[CHOICE]] ["kernel", "split2", "split4", "vendor"] {
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
// CHECK-NEXT:   } {
// CHECK-NEXT:     %[[V:.*]] = kernel.call @[[PRODUCT_SITE]](%[[X]], %[[W]]) : (tensor<8x1024xf32>, tensor<1024x96xf32>) -> tensor<8x96xf32>
// CHECK-NEXT:     %[[E:.*]] = kernel.call @[[EPILOGUE]](%[[V]], %[[B]])
// CHECK-NEXT:     fork.yield %[[E]] : tensor<8x96xf32>
// CHECK-NEXT:   } : tensor<8x96xf32>
// CHECK-NEXT:   func.return %[[Z]]

// Pinned: the choice's site keeps every option's calls; the chosen option's calls are
// inlined, and the sites only the other options called are dropped.
// SPLIT-NOT:  split=2
// SPLIT:      fork.site @[[P:matmul_[0-9]+]] "matmul" "{{.*}},split=4"
// SPLIT:      fork.site @[[S:split_sum_[0-9]+]] "split_sum" "split=4,{{.*}}"
// SPLIT-NOT:  fork.site host_call
// SPLIT:      fork.site choice @matmul_path_{{[0-9]+}} "matmul_path" {{.*}}config = #fork.config<matmul = "split4">{{.*}}paths = #fork.paths<kernel = [{{.*}}], split2 = [{{.*}}#fork.path_call<"split_sum", "split=2,{{.*}}", #fork.config<threads = 256, per_thread = 1>, [tensor<2x768xf32>, tensor<96xf32>], [tensor<8x96xf32>]>], split4 = [{{.*}}], vendor = [#fork.path_call<"vendor_matmul", "{{.*}}", #fork.config<>, {{.*}}]>}
// SPLIT:      func.func @deep
// SPLIT-NEXT:   %[[PARTS:.*]] = kernel.call @[[P]](%x, %w)
// SPLIT-NEXT:   %[[SUM:.*]] = kernel.call @[[S]](%[[PARTS]], %b)
// SPLIT-NEXT:   func.return %[[SUM]]

// VENDOR:      fork.site host_call @[[V:vendor_matmul_[0-9]+]] "vendor_matmul"
// VENDOR:      fork.site @[[E:elementwise_[0-9]+]] "elementwise"
// VENDOR:      func.func @deep
// VENDOR-NEXT:   %[[PRODUCT:.*]] = kernel.call @[[V]](%x, %w)
// VENDOR-NEXT:   %[[OUT:.*]] = kernel.call @[[E]](%[[PRODUCT]], %b)
// VENDOR-NEXT:   func.return %[[OUT]]

// Many output tiles (16 x 16 of 64 x 64) or a shallow k: no split, the kernel or the
// vendor library (whose product is the result: no epilogue).
func.func @wide(%x : tensor<1024x1024xf32>, %w : tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
  %y = graph.matmul %x, %w : tensor<1024x1024xf32>, tensor<1024x1024xf32> -> tensor<1024x1024xf32>
  func.return %y : tensor<1024x1024xf32>
}
// CHECK-LABEL: func.func @wide
// CHECK-NEXT:    fork.alternatives @matmul_path_{{[0-9]+}} ["kernel", "vendor"] {
// CHECK-NEXT:      kernel.call @matmul_
// CHECK-NEXT:      fork.yield
// CHECK-NEXT:    } {
// CHECK-NEXT:      kernel.call @vendor_matmul_
// CHECK-NEXT:      fork.yield

func.func @shallow(%x : tensor<8x256xf32>, %w : tensor<256x96xf32>) -> tensor<8x96xf32> {
  %y = graph.matmul %x, %w : tensor<8x256xf32>, tensor<256x96xf32> -> tensor<8x96xf32>
  func.return %y : tensor<8x96xf32>
}
// CHECK-LABEL: func.func @shallow
// CHECK-NEXT:    fork.alternatives @matmul_path_{{[0-9]+}} ["kernel", "vendor"] {
