// RUN: emmy-opt %s -p lower-graph | filecheck %s

// A Linear: matmul + bias + gelu. The bias add and the gelu read only the product, so the
// chain becomes the matmul's epilogue and the bias its one extra input, read per row.
func.func @linear_gelu(%x : tensor<2x8x64xf32>, %w : tensor<64x96xf32>, %b : tensor<96xf32>) -> tensor<2x8x96xf32> {
  %mm = graph.matmul %x, %w : tensor<2x8x64xf32>, tensor<64x96xf32> -> tensor<2x8x96xf32>
  %a = graph.add %mm, %b : tensor<2x8x96xf32>, tensor<96xf32> -> tensor<2x8x96xf32>
  %g = graph.gelu %a : tensor<2x8x96xf32> -> tensor<2x8x96xf32>
  func.return %g : tensor<2x8x96xf32>
}
// CHECK: fork.site @[[MM:matmul_[0-9]+]] "matmul" "batch=1,m=16,n=96,k=64,b_batch=1,b_rows=64,b_cols=96,layout=kn,T=f32,epilogue=gelu((acc + in0)),inputs=row" {
// CHECK-NOT: fork.site
// CHECK: func.func @linear_gelu(%[[X:.*]]: tensor<2x8x64xf32>, %[[W:.*]]: tensor<64x96xf32>, %[[B:.*]]: tensor<96xf32>) -> tensor<2x8x96xf32> {
// CHECK-NEXT: %[[G:.*]] = kernel.call @[[MM]](%[[X]], %[[W]], %[[B]]) : (tensor<2x8x64xf32>, tensor<64x96xf32>, tensor<96xf32>) -> tensor<2x8x96xf32>
// CHECK-NEXT: func.return %[[G]] : tensor<2x8x96xf32>

// bf16 with B stored [k, n]: the tensor-core family; stored [n, k] (transpose_b) too, layout
// nk. The sum reads both products; it fuses into the first as a full-size input.
func.func @tensor_cores(%x : tensor<16x64xbf16>, %w : tensor<64x32xbf16>, %wt : tensor<32x64xbf16>) -> tensor<16x32xbf16> {
  %m = graph.matmul %x, %w : tensor<16x64xbf16>, tensor<64x32xbf16> -> tensor<16x32xbf16>
  %n = graph.matmul %x, %wt {transpose_b} : tensor<16x64xbf16>, tensor<32x64xbf16> -> tensor<16x32xbf16>
  %s = graph.add %m, %n : tensor<16x32xbf16>, tensor<16x32xbf16> -> tensor<16x32xbf16>
  func.return %s : tensor<16x32xbf16>
}
// CHECK-DAG: fork.site @[[TC:matmul_tc_[0-9]+]] "matmul_tc" "batch=1,m=16,n=32,k=64,b_batch=1,T=bf16,epilogue=(acc + in0),inputs=full" {
// CHECK-DAG: fork.site @[[NK:matmul_tc_[0-9]+]] "matmul_tc" "batch=1,m=16,n=32,k=64,b_batch=1,layout=nk,T=bf16,epilogue=acc,inputs=" {
// CHECK: func.func @tensor_cores(
// CHECK-NEXT: %[[N:.*]] = kernel.call @[[NK]](%{{.*}}, %{{.*}}) : (tensor<16x64xbf16>, tensor<32x64xbf16>) -> tensor<16x32xbf16>
// CHECK-NEXT: %[[S:.*]] = kernel.call @[[TC]](%{{.*}}, %{{.*}}, %[[N]]) : (tensor<16x64xbf16>, tensor<64x32xbf16>, tensor<16x32xbf16>) -> tensor<16x32xbf16>
// CHECK-NEXT: func.return %[[S]]

// A stored [k, m] (transpose_a, a weight's gradient xᵀ · dy): read in place, a_layout km,
// by the SIMT family and on tensor cores.
func.func @weight_gradients(%x : tensor<16x64xf32>, %dy : tensor<16x32xf32>, %xh : tensor<16x64xbf16>, %dyh : tensor<16x32xbf16>) -> (tensor<64x32xf32>, tensor<64x32xbf16>) {
  %g = graph.matmul %x, %dy {transpose_a} : tensor<16x64xf32>, tensor<16x32xf32> -> tensor<64x32xf32>
  %h = graph.matmul %xh, %dyh {transpose_a} : tensor<16x64xbf16>, tensor<16x32xbf16> -> tensor<64x32xbf16>
  func.return %g, %h : tensor<64x32xf32>, tensor<64x32xbf16>
}
// CHECK-DAG: fork.site @[[GA:matmul_[0-9]+]] "matmul" "batch=1,m=64,n=32,k=16,b_batch=1,b_rows=16,b_cols=32,layout=kn,T=f32,epilogue=acc,inputs=,a_layout=km" {
// CHECK-DAG: fork.site @[[HA:matmul_tc_[0-9]+]] "matmul_tc" "batch=1,m=64,n=32,k=16,b_batch=1,T=bf16,epilogue=acc,inputs=,a_layout=km" {
// CHECK: func.func @weight_gradients(%[[X:[^:]*]]: tensor<16x64xf32>, %[[DY:[^:]*]]: tensor<16x32xf32>, %[[XH:[^:]*]]: tensor<16x64xbf16>, %[[DYH:[^:]*]]: tensor<16x32xbf16>)
// CHECK-NEXT: %{{.*}} = kernel.call @[[GA]](%[[X]], %[[DY]]) : (tensor<16x64xf32>, tensor<16x32xf32>) -> tensor<64x32xf32>
// CHECK-NEXT: %{{.*}} = kernel.call @[[HA]](%[[XH]], %[[DYH]]) : (tensor<16x64xbf16>, tensor<16x32xbf16>) -> tensor<64x32xbf16>

// k not a multiple of 8: bf16 still on tensor cores (the tiles filled by element loads).
func.func @ragged(%x : tensor<16x60xbf16>, %w : tensor<60x32xbf16>) -> tensor<16x32xbf16> {
  %m = graph.matmul %x, %w : tensor<16x60xbf16>, tensor<60x32xbf16> -> tensor<16x32xbf16>
  func.return %m : tensor<16x32xbf16>
}
// CHECK: fork.site @{{matmul_tc_[0-9]+}} "matmul_tc" "batch=1,m=16,n=32,k=60,b_batch=1,T=bf16,epilogue=acc,inputs=" {
// CHECK: func.func @ragged(

// A batched matmul of two activations: q · kᵀ, k read in place.
func.func @scores(%q : tensor<2x4x8x16xf32>, %k : tensor<2x4x8x16xf32>) -> tensor<2x4x8x8xf32> {
  %s = graph.matmul %q, %k {transpose_b} : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32> -> tensor<2x4x8x8xf32>
  func.return %s : tensor<2x4x8x8xf32>
}
// CHECK: fork.site @{{matmul_[0-9]+}} "matmul" "batch=8,m=8,n=8,k=16,b_batch=8,b_rows=8,b_cols=16,layout=nk,T=f32,epilogue=acc,inputs=" {
// CHECK: func.func @scores(

// An attention block: layer_norm over rows; q [b, s, h, d] permuted to [b, h, s, d] by a
// strided copy; grouped-query attention (4 query heads over 2 kv heads); the output
// permuted back, then reshaped, which moves no data and stays.
func.func @block(%x : tensor<2x8x64xf32>, %g : tensor<64xf32>, %bb : tensor<64xf32>, %q : tensor<2x8x4x16xf32>, %k : tensor<2x2x8x16xf32>, %v : tensor<2x2x8x16xf32>) -> (tensor<2x8x64xf32>, tensor<16x64xf32>) {
  %ln = graph.layer_norm %x, %g, %bb {eps = 1.000000e-05 : f64} : tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32> -> tensor<2x8x64xf32>
  %qt = graph.as_strided %q {strides = [512, 16, 64, 1], offset = 0 : i64} : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  %o = graph.attention %qt, %k, %v {scale = 2.500000e-01 : f64, causal} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32> -> tensor<2x4x8x16xf32>
  %ot = graph.as_strided %o {strides = [512, 16, 128, 1], offset = 0 : i64} : tensor<2x4x8x16xf32> -> tensor<2x8x4x16xf32>
  %y = graph.reshape %ot : tensor<2x8x4x16xf32> -> tensor<16x64xf32>
  func.return %ln, %y : tensor<2x8x64xf32>, tensor<16x64xf32>
}
// CHECK-DAG: fork.site @[[LN:layer_norm_[0-9]+]] "layer_norm" "rows=16,cols=64,T=f32,eps=1e-05" {
// CHECK-DAG: fork.site @[[QT:permute_[0-9]+]] "permute" "size=1024,d0=2,d1=4,d2=8,d3=16,s0=512,s1=16,s2=64,s3=1,offset=0,T=f32" {
// CHECK-DAG: fork.site @[[ATT:attention_[0-9]+]] "attention" "bh=8,kv_bh=4,q_len=8,kv_len=8,d=16,T=f32,causal=yes,scale=0.25" {
// CHECK-DAG: fork.site @[[OT:permute_[0-9]+]] "permute" "size=1024,d0=2,d1=8,d2=4,d3=16,s0=512,s1=16,s2=128,s3=1,offset=0,T=f32" {
// CHECK: func.func @block(%[[X:[^:]*]]: tensor<2x8x64xf32>, %[[G:[^:]*]]: tensor<64xf32>, %[[BB:[^:]*]]: tensor<64xf32>, %[[Q:[^:]*]]: tensor<2x8x4x16xf32>, %[[K:[^:]*]]: tensor<2x2x8x16xf32>, %[[V:[^:]*]]: tensor<2x2x8x16xf32>)
// CHECK-NEXT: %[[LNV:.*]] = kernel.call @[[LN]](%[[X]], %[[G]], %[[BB]])
// CHECK-NEXT: %[[QTV:.*]] = kernel.call @[[QT]](%[[Q]]) : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
// CHECK-NEXT: %[[O:.*]] = kernel.call @[[ATT]](%[[QTV]], %[[K]], %[[V]])
// CHECK-NEXT: %[[OTV:.*]] = kernel.call @[[OT]](%[[O]]) : (tensor<2x4x8x16xf32>) -> tensor<2x8x4x16xf32>
// CHECK-NEXT: %[[Y:.*]] = graph.reshape %[[OTV]] : tensor<2x8x4x16xf32> -> tensor<16x64xf32>
// CHECK-NEXT: func.return %[[LNV]], %[[Y]] : tensor<2x8x64xf32>, tensor<16x64xf32>

// Strided copies: dims of size 1 drop, and a dim that continues the one before merges
// with it ([4, 5] of strides [5, 1] reads as [20] of stride 1); fewer than 4 dims are
// padded in front with size 1, stride 0. A slice reads from an offset (here rows 2..3 of
// each 4x5 matrix: 10 elements in a row, so two dims).
func.func @strided(%x : tensor<2x3x4x5xf32>, %y : tensor<1x6x4xf32>) -> (tensor<3x2x4x5xf32>, tensor<1x4x1x6xf32>, tensor<2x3x2x5xf32>) {
  %a = graph.as_strided %x {strides = [20, 60, 5, 1], offset = 0 : i64} : tensor<2x3x4x5xf32> -> tensor<3x2x4x5xf32>
  %b = graph.as_strided %y {strides = [24, 1, 7, 4], offset = 0 : i64} : tensor<1x6x4xf32> -> tensor<1x4x1x6xf32>
  %c = graph.as_strided %x {strides = [60, 20, 5, 1], offset = 10 : i64} : tensor<2x3x4x5xf32> -> tensor<2x3x2x5xf32>
  func.return %a, %b, %c : tensor<3x2x4x5xf32>, tensor<1x4x1x6xf32>, tensor<2x3x2x5xf32>
}
// CHECK-DAG: "permute" "size=120,d0=1,d1=3,d2=2,d3=20,s0=0,s1=20,s2=60,s3=1,offset=0,T=f32"
// CHECK-DAG: "permute" "size=24,d0=1,d1=1,d2=4,d3=6,s0=0,s1=0,s2=1,s3=4,offset=0,T=f32"
// CHECK-DAG: "permute" "size=120,d0=1,d1=1,d2=6,d3=10,s0=0,s1=0,s2=20,s3=1,offset=10,T=f32"
// CHECK: func.func @strided(

// The other row families: rms_norm, reductions (keepdim or not), embedding, rope.
func.func @rows(%x : tensor<2x8x64xf16>, %w : tensor<64xf16>, %t : tensor<100x64xf16>, %ids : tensor<2x8xi32>, %r : tensor<2x8x4x16xf16>, %cos : tensor<8x8xf16>, %sin : tensor<8x8xf16>) -> (tensor<2x8x64xf16>, tensor<2x8x1xf16>, tensor<2x8xf16>, tensor<2x8x64xf16>, tensor<2x8x4x16xf16>) {
  %n = graph.rms_norm %x, %w {eps = 1.000000e-06 : f64} : tensor<2x8x64xf16>, tensor<64xf16> -> tensor<2x8x64xf16>
  %s = graph.reduce %x {kind = #graph<reduction mean>} : tensor<2x8x64xf16> -> tensor<2x8x1xf16>
  %m = graph.reduce %x {kind = #graph<reduction max>} : tensor<2x8x64xf16> -> tensor<2x8xf16>
  %e = graph.embedding %t, %ids : tensor<100x64xf16>, tensor<2x8xi32> -> tensor<2x8x64xf16>
  %p = graph.rope %r, %cos, %sin : tensor<2x8x4x16xf16>, tensor<8x8xf16>, tensor<8x8xf16> -> tensor<2x8x4x16xf16>
  func.return %n, %s, %m, %e, %p : tensor<2x8x64xf16>, tensor<2x8x1xf16>, tensor<2x8xf16>, tensor<2x8x64xf16>, tensor<2x8x4x16xf16>
}
// CHECK-DAG: fork.site @{{rms_norm_[0-9]+}} "rms_norm" "rows=16,cols=64,T=f16,eps=1e-06" {
// CHECK-DAG: fork.site @{{reduce_rows_[0-9]+}} "reduce_rows" "rows=16,cols=64,T=f16,op=mean" {
// CHECK-DAG: fork.site @{{reduce_rows_[0-9]+}} "reduce_rows" "rows=16,cols=64,T=f16,op=max" {
// CHECK-DAG: fork.site @[[EMB:embedding_[0-9]+]] "embedding" "tokens=16,vocab=100,dim=64,T=f16,I=i32" {
// CHECK-DAG: fork.site @{{rope_[0-9]+}} "rope" "tokens=16,seq=8,heads=4,dim=16,half=8,T=f16" {
// CHECK: func.func @rows(%{{[^:]*}}: tensor<2x8x64xf16>, %{{[^:]*}}: tensor<64xf16>, %[[T:[^:]*]]: tensor<100x64xf16>, %[[IDS:[^:]*]]: tensor<2x8xi32>
// The embedding takes the ids first, then the table.
// CHECK: kernel.call @[[EMB]](%[[IDS]], %[[T]]) : (tensor<2x8xi32>, tensor<100x64xf16>) -> tensor<2x8x64xf16>
// CHECK-NOT: graph.

// An embedding's weight gradient: one kernel over the ids and the gradient's rows.
func.func @embedding_backward(%g : tensor<2x8x64xf16>, %ids : tensor<2x8xi32>) -> tensor<100x64xf16> {
  %d = graph.embedding_backward %g, %ids : tensor<2x8x64xf16>, tensor<2x8xi32> -> tensor<100x64xf16>
  func.return %d : tensor<100x64xf16>
}
// CHECK: fork.site @[[EMBB:embedding_backward_[0-9]+]] "embedding_backward" "tokens=16,vocab=100,dim=64,T=f16,I=i32" {
// CHECK: func.func @embedding_backward(%[[G:[^:]*]]: tensor<2x8x64xf16>, %[[IDS:[^:]*]]: tensor<2x8xi32>)
// CHECK-NEXT: %{{.*}} = kernel.call @[[EMBB]](%[[IDS]], %[[G]]) : (tensor<2x8xi32>, tensor<2x8x64xf16>) -> tensor<100x64xf16>
// CHECK-NEXT: func.return

// scale_grad_by_freq: the same family, scale=freq in its key.
func.func @embedding_backward_by_frequency(%g : tensor<2x8x64xf16>, %ids : tensor<2x8xi32>) -> tensor<100x64xf16> {
  %d = graph.embedding_backward %g, %ids {scale_by_frequency} : tensor<2x8x64xf16>, tensor<2x8xi32> -> tensor<100x64xf16>
  func.return %d : tensor<100x64xf16>
}
// CHECK: fork.site @[[EMBF:embedding_backward_[0-9]+]] "embedding_backward" "tokens=16,vocab=100,dim=64,T=f16,I=i32,scale=freq" {
// CHECK: func.func @embedding_backward_by_frequency
// CHECK-NEXT: %{{.*}} = kernel.call @[[EMBF]](

// An attention's backward under a padding mask: the queries' statistics, then the query,
// key and value gradients from them, each a kernel reading the operands its part needs
// (the value gradient reads no v).
func.func @attention_backward(%q : tensor<2x4x8x16xf32>, %k : tensor<2x2x8x16xf32>, %v : tensor<2x2x8x16xf32>, %do : tensor<2x4x8x16xf32>, %o : tensor<2x4x8x16xf32>, %pad : tensor<2x8xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>) {
  %s = graph.attention_backward %q, %k, %v, %do, %o mask %pad {gradient = #graph<attention_gradient stats>, scale = 2.500000e-01 : f64} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x8xf32> -> tensor<2x4x8x2xf32>
  %dq = graph.attention_backward %q, %k, %v, %do, %s mask %pad {gradient = #graph<attention_gradient query>, scale = 2.500000e-01 : f64} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x2xf32>, tensor<2x8xf32> -> tensor<2x4x8x16xf32>
  %dk = graph.attention_backward %q, %k, %v, %do, %s mask %pad {gradient = #graph<attention_gradient key>, scale = 2.500000e-01 : f64} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x2xf32>, tensor<2x8xf32> -> tensor<2x2x8x16xf32>
  %dv = graph.attention_backward %q, %k, %v, %do, %s mask %pad {gradient = #graph<attention_gradient value>, scale = 2.500000e-01 : f64} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x2xf32>, tensor<2x8xf32> -> tensor<2x2x8x16xf32>
  func.return %dq, %dk, %dv : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>
}
// CHECK: fork.site @[[DV:attention_dkv_[0-9]+]] "attention_dkv" "bh=8,kv_bh=4,q_len=8,kv_len=8,d=16,T=f32,causal=no,scale=0.25,part=dv,masked=yes,batch=2" {
// CHECK: fork.site @[[DK:attention_dkv_[0-9]+]] "attention_dkv" "{{.*}},part=dk,masked=yes,batch=2" {
// CHECK: fork.site @[[DQ:attention_dq_[0-9]+]] "attention_dq" "bh=8,kv_bh=4,q_len=8,kv_len=8,d=16,T=f32,causal=no,scale=0.25,masked=yes,batch=2" {
// CHECK: fork.site @[[ST:attention_stats_[0-9]+]] "attention_stats" "bh=8,{{.*}}" {
// CHECK: func.func @attention_backward(%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[DO:[^:]*]]: {{.*}}, %[[O:[^:]*]]: {{.*}}, %[[PAD:[^:]*]]: tensor<2x8xf32>)
// CHECK-NEXT: %[[S:.*]] = kernel.call @[[ST]](%[[Q]], %[[K]], %[[O]], %[[DO]], %[[PAD]]) : {{.*}} -> tensor<2x4x8x2xf32>
// CHECK-NEXT: kernel.call @[[DQ]](%[[Q]], %[[K]], %[[V]], %[[DO]], %[[S]], %[[PAD]]) : {{.*}} -> tensor<2x4x8x16xf32>
// CHECK-NEXT: kernel.call @[[DK]](%[[Q]], %[[K]], %[[V]], %[[DO]], %[[S]], %[[PAD]]) : {{.*}} -> tensor<2x2x8x16xf32>
// CHECK-NEXT: kernel.call @[[DV]](%[[Q]], %[[K]], %[[DO]], %[[S]], %[[PAD]]) : {{.*}} -> tensor<2x2x8x16xf32>
// CHECK-NEXT: func.return

// Pooling's input gradients: max pooling's one kernel over the gradient and the indices,
// average pooling's over the gradient alone.
func.func @pool_backward(%dy : tensor<2x3x4x5xf16>, %i : tensor<2x3x4x5xi64>) -> (tensor<2x3x9x11xf16>, tensor<2x3x9x11xf16>) {
  %dm = graph.pool_backward %dy indices %i {kind = #graph<pooling max>, window = [3, 3], stride = [2, 2], padding = [1, 1], dilation = [1, 1]} : tensor<2x3x4x5xf16>, tensor<2x3x4x5xi64> -> tensor<2x3x9x11xf16>
  %da = graph.pool_backward %dy {kind = #graph<pooling avg>, window = [3, 3], stride = [2, 2], padding = [1, 1], dilation = [1, 1], count_pad} : tensor<2x3x4x5xf16> -> tensor<2x3x9x11xf16>
  func.return %dm, %da : tensor<2x3x9x11xf16>, tensor<2x3x9x11xf16>
}
// CHECK-DAG: fork.site @[[AVG:pool2d_backward_[0-9]+]] "pool2d_backward" "rows=6,h=9,w=11,oh=4,ow=5,T=f16,kind=avg,kh=3,kw=3,sh=2,sw=2,ph=1,pw=1" {
// CHECK-DAG: fork.site @[[MAX:pool2d_backward_[0-9]+]] "pool2d_backward" "rows=6,h=9,w=11,oh=4,ow=5,T=f16,kh=3,kw=3,sh=2,sw=2,ph=1,pw=1" {
// CHECK: func.func @pool_backward(%[[DY:[^:]*]]: tensor<2x3x4x5xf16>, %[[I:[^:]*]]: tensor<2x3x4x5xi64>)
// CHECK-NEXT: kernel.call @[[MAX]](%[[DY]], %[[I]]) : (tensor<2x3x4x5xf16>, tensor<2x3x4x5xi64>) -> tensor<2x3x9x11xf16>
// CHECK-NEXT: kernel.call @[[AVG]](%[[DY]]) : (tensor<2x3x4x5xf16>) -> tensor<2x3x9x11xf16>
// CHECK-NEXT: func.return

// Adaptive average pooling's input gradient: the same family, adaptive in its key.
func.func @adaptive_pool_backward(%dy : tensor<2x3x4x3xf32>) -> tensor<2x3x9x7xf32> {
  %da = graph.pool_backward %dy {kind = #graph<pooling avg>, adaptive} : tensor<2x3x4x3xf32> -> tensor<2x3x9x7xf32>
  func.return %da : tensor<2x3x9x7xf32>
}
// CHECK: fork.site @[[ADAPTIVE:pool2d_backward_[0-9]+]] "pool2d_backward" "rows=6,h=9,w=7,oh=4,ow=3,T=f32,kind=avg,adaptive=yes" {
// CHECK: func.func @adaptive_pool_backward(%[[DY:[^:]*]]: tensor<2x3x4x3xf32>)
// CHECK-NEXT: kernel.call @[[ADAPTIVE]](%[[DY]]) : (tensor<2x3x4x3xf32>) -> tensor<2x3x9x7xf32>
// CHECK-NEXT: func.return

// An upsampling's input gradient: one gather kernel keyed as its forward.
func.func @resize_backward(%dy : tensor<2x3x10x14xf32>) -> tensor<2x3x5x7xf32> {
  %dx = graph.resize_backward %dy {mode = #graph<resize bilinear>, scales = [0.5 : f64, 0.5 : f64], align_corners} : tensor<2x3x10x14xf32> -> tensor<2x3x5x7xf32>
  func.return %dx : tensor<2x3x5x7xf32>
}
// CHECK: fork.site @[[RB:resize2d_backward_[0-9]+]] "resize2d_backward" "rows=6,h=5,w=7,oh=10,ow=14,T=f32,mode=bilinear,corners=yes,sy=0.4444444444444444,sx=0.46153846153846156" {
// CHECK: func.func @resize_backward(%[[DY:[^:]*]]: tensor<2x3x10x14xf32>)
// CHECK-NEXT: kernel.call @[[RB]](%[[DY]]) : (tensor<2x3x10x14xf32>) -> tensor<2x3x5x7xf32>
// CHECK-NEXT: func.return

// A padding mask [batch, kv_len]: the attention site reads it as a fourth input.
func.func @padded(%q : tensor<2x4x8x16xf32>, %k : tensor<2x2x8x16xf32>, %v : tensor<2x2x8x16xf32>, %m : tensor<2x8xf32>) -> tensor<2x4x8x16xf32> {
  %o = graph.attention %q, %k, %v mask %m {scale = 2.500000e-01 : f64} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x8xf32> -> tensor<2x4x8x16xf32>
  func.return %o : tensor<2x4x8x16xf32>
}
// CHECK: fork.site @[[ATT:attention_[0-9]+]] "attention" "bh=8,kv_bh=4,q_len=8,kv_len=8,d=16,T=f32,causal=no,scale=0.25,masked=yes,batch=2" {
// CHECK: func.func @padded(%[[Q:[^:]*]]: tensor<2x4x8x16xf32>, %[[K:[^:]*]]: tensor<2x2x8x16xf32>, %[[V:[^:]*]]: tensor<2x2x8x16xf32>, %[[M:[^:]*]]: tensor<2x8xf32>)
// CHECK: kernel.call @[[ATT]](%{{.*}}, %{{.*}}, %{{.*}}, %[[M]])

// A mask per query [batch, q_len, kv_len]: the key says how many rows it has.
func.func @per_query(%q : tensor<2x4x8x16xf32>, %k : tensor<2x2x8x16xf32>, %v : tensor<2x2x8x16xf32>, %m : tensor<2x8x8xf32>) -> tensor<2x4x8x16xf32> {
  %o = graph.attention %q, %k, %v mask %m {scale = 2.500000e-01 : f64, causal} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x8x8xf32> -> tensor<2x4x8x16xf32>
  func.return %o : tensor<2x4x8x16xf32>
}
// CHECK: fork.site @[[ATQ:attention_[0-9]+]] "attention" "bh=8,kv_bh=4,q_len=8,kv_len=8,d=16,T=f32,causal=yes,scale=0.25,masked=yes,batch=2,mask_rows=8" {
// CHECK: func.func @per_query(%{{[^:]*}}: tensor<2x4x8x16xf32>, %{{[^:]*}}: tensor<2x2x8x16xf32>, %{{[^:]*}}: tensor<2x2x8x16xf32>, %[[MQ:[^:]*]]: tensor<2x8x8xf32>)
// CHECK: kernel.call @[[ATQ]](%{{.*}}, %{{.*}}, %{{.*}}, %[[MQ]])

// A transposed convolution (ConvTranspose2d's; a strided convolution's input gradient): the
// SIMT convolution family, `transposed` in its key, f16 too, its epilogue fused.
func.func @conv_transpose(%x : tensor<2x8x5x5xf16>, %w : tensor<8x3x3x3xf16>, %b : tensor<3xf16>) -> tensor<2x3x10x10xf16> {
  %y = graph.conv_transpose %x, %w bias %b {stride = [2, 2], padding = [1, 1], dilation = [1, 1], groups = 1 : i64} : tensor<2x8x5x5xf16>, tensor<8x3x3x3xf16>, tensor<3xf16> -> tensor<2x3x10x10xf16>
  %r = graph.relu %y : tensor<2x3x10x10xf16> -> tensor<2x3x10x10xf16>
  func.return %r : tensor<2x3x10x10xf16>
}
// CHECK: fork.site @[[CT:conv_[0-9]+]] "conv" "batch=2,cin=8,h=5,w=5,cout=3,oh=10,ow=10,kh=3,kw=3,sh=2,sw=2,ph=1,pw=1,cpg=8,kdim=72,spatial=100,has_bias=1,T=f16,epilogue=relu(acc),transposed=1" {
// CHECK: func.func @conv_transpose(%[[X:[^:]*]]: tensor<2x8x5x5xf16>, %[[W:[^:]*]]: tensor<8x3x3x3xf16>, %[[B:[^:]*]]: tensor<3xf16>)
// CHECK-NEXT: %{{.*}} = kernel.call @[[CT]](%[[X]], %[[W]], %[[B]]) : (tensor<2x8x5x5xf16>, tensor<8x3x3x3xf16>, tensor<3xf16>) -> tensor<2x3x10x10xf16>
// CHECK-NEXT: func.return

// A convolution's weight gradient: one conv_weight kernel over dy and x as they are.
func.func @conv_weight_gradient(%dy : tensor<2x8x5x5xbf16>, %x : tensor<2x6x9x9xbf16>) -> tensor<8x3x3x3xbf16> {
  %dw = graph.conv_weight_gradient %dy, %x {stride = [2, 2], padding = [1, 1], dilation = [1, 1], groups = 2 : i64} : tensor<2x8x5x5xbf16>, tensor<2x6x9x9xbf16> -> tensor<8x3x3x3xbf16>
  func.return %dw : tensor<8x3x3x3xbf16>
}
// CHECK: fork.site @[[CW:conv_weight_[0-9]+]] "conv_weight" "batch=2,cin=6,h=9,w=9,cout=8,oh=5,ow=5,kh=3,kw=3,sh=2,sw=2,ph=1,pw=1,groups=2,cpg=3,kdim=27,spatial=25,T=bf16" {
// CHECK: func.func @conv_weight_gradient(%[[DY:[^:]*]]: tensor<2x8x5x5xbf16>, %[[X:[^:]*]]: tensor<2x6x9x9xbf16>)
// CHECK-NEXT: %{{.*}} = kernel.call @[[CW]](%[[DY]], %[[X]]) : (tensor<2x8x5x5xbf16>, tensor<2x6x9x9xbf16>) -> tensor<8x3x3x3xbf16>
// CHECK-NEXT: func.return

// A training BatchNorm's statistics, forward and backward: one batch_norm_stats kernel
// each, the backward's reading dy, x and the mean.
func.func @batch_norm_stats(%x : tensor<2x8x16xf32>, %dy : tensor<2x8x16xf32>, %m : tensor<8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %s = graph.batch_norm_stats %x : tensor<2x8x16xf32> -> tensor<2x8xf32>
  %g = graph.batch_norm_stats %x grad %dy mean %m : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<8xf32> -> tensor<2x8xf32>
  func.return %s, %g : tensor<2x8xf32>, tensor<2x8xf32>
}
// CHECK-DAG: fork.site @[[FORWARD:batch_norm_stats_[0-9]+]] "batch_norm_stats" "batch=2,channels=8,spatial=16,T=f32" {
// CHECK-DAG: fork.site @[[BACKWARD:batch_norm_stats_[0-9]+]] "batch_norm_stats" "batch=2,channels=8,spatial=16,T=f32,kind=backward" {
// CHECK: func.func @batch_norm_stats(%[[X:[^:]*]]: tensor<2x8x16xf32>, %[[DY:[^:]*]]: tensor<2x8x16xf32>, %[[M:[^:]*]]: tensor<8xf32>)
// CHECK-NEXT: kernel.call @[[FORWARD]](%[[X]]) : (tensor<2x8x16xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: kernel.call @[[BACKWARD]](%[[X]], %[[DY]], %[[M]]) : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: func.return

// A value per channel (a BatchNorm's scale) read in place by the elementwise kernel, not
// fused into the convolution before it (no convolution epilogue reads by channel).
func.func @per_channel(%x : tensor<2x3x5x5xf32>, %w : tensor<4x3x3x3xf32>, %s : tensor<1x4x1x1xf32>) -> tensor<2x4x3x3xf32> {
  %y = graph.conv %x, %w {stride = [1, 1], padding = [0, 0], dilation = [1, 1], groups = 1 : i64} : tensor<2x3x5x5xf32>, tensor<4x3x3x3xf32> -> tensor<2x4x3x3xf32>
  %z = graph.mul %y, %s : tensor<2x4x3x3xf32>, tensor<1x4x1x1xf32> -> tensor<2x4x3x3xf32>
  func.return %z : tensor<2x4x3x3xf32>
}
// CHECK: fork.site @[[SCALE:elementwise_[0-9]+]] "elementwise" "n=72,cols=3,T=f32,inputs=full/mid,fn=(in0 * in1),inner=9,mid=4" {
// CHECK: func.func @per_channel
// CHECK-NEXT: %[[C:.*]] = kernel.call @conv_{{[0-9]+}}
// CHECK-NEXT: kernel.call @[[SCALE]](%[[C]], %{{.*}})
