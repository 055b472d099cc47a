// RUN: emmy-opt %s | emmy-opt | filecheck %s

func.func @ops(%x : tensor<4x8xf32>, %row : tensor<8xf32>) -> tensor<4x8xf32> {
  %c = graph.constant 5.000000e-01 : f32 -> tensor<f32>
  // CHECK: %{{.*}} = graph.constant 5.000000e-01 : f32 -> tensor<f32>
  %a = graph.add %x, %row : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  // CHECK-NEXT: graph.add %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %s = graph.sub %a, %c : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  // CHECK-NEXT: graph.sub
  %m = graph.mul %s, %x : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK-NEXT: graph.mul
  %d = graph.div %m, %c : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  // CHECK-NEXT: graph.div
  %e = graph.exp %d : tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK-NEXT: graph.exp
  %t = graph.tanh %e : tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK-NEXT: graph.tanh
  %g = graph.gelu %t {approximate = #graph<approximation tanh>} : tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK-NEXT: graph.gelu %{{.*}} {approximate = #graph<approximation tanh>}
  %g2 = graph.gelu %g : tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK-NEXT: graph.gelu %{{.*}} : tensor<4x8xf32>
  %si = graph.silu %g2 : tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK-NEXT: graph.silu
  %r = graph.relu %si : tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK-NEXT: graph.relu
  %n = graph.neg %r : tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK-NEXT: graph.neg
  %y = graph.softmax %n {dim = -1 : i64} : tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK-NEXT: graph.softmax %{{.*}} {dim = -1 : i64} : tensor<4x8xf32> -> tensor<4x8xf32>
  %yc = graph.softmax %n {dim = -1 : i64, causal} : tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK-NEXT: graph.softmax %{{.*}} {dim = -1 : i64, causal} : tensor<4x8xf32> -> tensor<4x8xf32>
  %dx = graph.softmax_backward %x, %y : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK-NEXT: graph.softmax_backward %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %dl = graph.softmax_backward %x, %y {log} : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK-NEXT: graph.softmax_backward %{{.*}}, %{{.*}} {log} : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %mean = graph.reduce %x {kind = #graph<reduction mean>} : tensor<4x8xf32> -> tensor<4xf32>
  %lnb = graph.layer_norm_backward %dx, %x, %mean, %mean, %row : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<8xf32> -> tensor<4x8xf32>
  // CHECK: graph.layer_norm_backward %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<8xf32> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

func.func @model_ops(%x : tensor<2x8x64xf32>, %w : tensor<96x64xf32>, %wkn : tensor<64x96xf32>,
                     %g : tensor<64xf32>, %b : tensor<64xf32>, %table : tensor<100x64xf32>,
                     %ids : tensor<2x8xi64>, %ids32 : tensor<5xi32>, %q : tensor<2x4x8x16xf32>,
                     %k : tensor<2x2x8x16xf32>, %v : tensor<2x2x8x16xf32>, %pad : tensor<2x8xf32>, %per_query : tensor<2x8x8xf32>,
                     %xr : tensor<2x8x4x16xf32>, %cos : tensor<8x8xf32>, %sin : tensor<8x8xf32>) -> tensor<16x64xf32> {
  %s = graph.sigmoid %x : tensor<2x8x64xf32> -> tensor<2x8x64xf32>
  // CHECK: graph.sigmoid %{{.*}} : tensor<2x8x64xf32> -> tensor<2x8x64xf32>
  %mt = graph.matmul %s, %w {transpose_b} : tensor<2x8x64xf32>, tensor<96x64xf32> -> tensor<2x8x96xf32>
  // CHECK-NEXT: graph.matmul %{{.*}}, %{{.*}} {transpose_b} : tensor<2x8x64xf32>, tensor<96x64xf32> -> tensor<2x8x96xf32>
  %mk = graph.matmul %s, %wkn : tensor<2x8x64xf32>, tensor<64x96xf32> -> tensor<2x8x96xf32>
  // CHECK-NEXT: graph.matmul %{{.*}}, %{{.*}} : tensor<2x8x64xf32>, tensor<64x96xf32> -> tensor<2x8x96xf32>
  %ma = graph.matmul %s, %mk {transpose_a} : tensor<2x8x64xf32>, tensor<2x8x96xf32> -> tensor<2x64x96xf32>
  // CHECK-NEXT: graph.matmul %{{.*}}, %{{.*}} {transpose_a} : tensor<2x8x64xf32>, tensor<2x8x96xf32> -> tensor<2x64x96xf32>
  %ln = graph.layer_norm %x, %g, %b {eps = 1.000000e-05 : f64} : tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32> -> tensor<2x8x64xf32>
  // CHECK-NEXT: graph.layer_norm %{{.*}}, %{{.*}}, %{{.*}} {eps = 1.000000e-05 : f64} : tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32> -> tensor<2x8x64xf32>
  %lns, %mean, %rstd = graph.layer_norm %x, %g, %b {eps = 1.000000e-05 : f64} : tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32> -> tensor<2x8x64xf32>, tensor<2x8xf32>, tensor<2x8xf32>
  // CHECK-NEXT: %{{.*}}, %{{.*}}, %{{.*}} = graph.layer_norm %{{.*}}, %{{.*}}, %{{.*}} {eps = 1.000000e-05 : f64} : tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32> -> tensor<2x8x64xf32>, tensor<2x8xf32>, tensor<2x8xf32>
  %rn = graph.rms_norm %ln, %g {eps = 1.000000e-06 : f64} : tensor<2x8x64xf32>, tensor<64xf32> -> tensor<2x8x64xf32>
  // CHECK-NEXT: graph.rms_norm %{{.*}}, %{{.*}} {eps = 1.000000e-06 : f64} : tensor<2x8x64xf32>, tensor<64xf32> -> tensor<2x8x64xf32>
  %rk = graph.reduce %rn {kind = #graph<reduction sum>} : tensor<2x8x64xf32> -> tensor<2x8x1xf32>
  // CHECK-NEXT: graph.reduce %{{.*}} {kind = #graph<reduction sum>} : tensor<2x8x64xf32> -> tensor<2x8x1xf32>
  %rd = graph.reduce %rn {kind = #graph<reduction max>} : tensor<2x8x64xf32> -> tensor<2x8xf32>
  // CHECK-NEXT: graph.reduce %{{.*}} {kind = #graph<reduction max>} : tensor<2x8x64xf32> -> tensor<2x8xf32>
  %ra = graph.reduce %rn {kind = #graph<reduction argmax>} : tensor<2x8x64xf32> -> tensor<2x8xi64>
  // CHECK-NEXT: graph.reduce %{{.*}} {kind = #graph<reduction argmax>} : tensor<2x8x64xf32> -> tensor<2x8xi64>
  %rv = graph.reduce %rn {kind = #graph<reduction var>, correction = 1 : i64} : tensor<2x8x64xf32> -> tensor<2x8xf32>
  // CHECK-NEXT: graph.reduce %{{.*}} {kind = #graph<reduction var>, correction = 1 : i64} : tensor<2x8x64xf32> -> tensor<2x8xf32>
  %ri = graph.reduce %ids {kind = #graph<reduction sum>} : tensor<2x8xi64> -> tensor<2xi64>
  // CHECK-NEXT: graph.reduce %{{.*}} {kind = #graph<reduction sum>} : tensor<2x8xi64> -> tensor<2xi64>
  %cs = graph.cumsum %ids : tensor<2x8xi64> -> tensor<2x8xi64>
  // CHECK-NEXT: graph.cumsum %{{.*}} : tensor<2x8xi64> -> tensor<2x8xi64>
  %e = graph.embedding %table, %ids : tensor<100x64xf32>, tensor<2x8xi64> -> tensor<2x8x64xf32>
  // CHECK-NEXT: graph.embedding %{{.*}}, %{{.*}} : tensor<100x64xf32>, tensor<2x8xi64> -> tensor<2x8x64xf32>
  %e32 = graph.embedding %table, %ids32 : tensor<100x64xf32>, tensor<5xi32> -> tensor<5x64xf32>
  // CHECK-NEXT: graph.embedding %{{.*}}, %{{.*}} : tensor<100x64xf32>, tensor<5xi32> -> tensor<5x64xf32>
  %de = graph.embedding_backward %e, %ids : tensor<2x8x64xf32>, tensor<2x8xi64> -> tensor<100x64xf32>
  // CHECK-NEXT: graph.embedding_backward %{{.*}}, %{{.*}} : tensor<2x8x64xf32>, tensor<2x8xi64> -> tensor<100x64xf32>
  %df = graph.embedding_backward %e, %ids {scale_by_frequency} : tensor<2x8x64xf32>, tensor<2x8xi64> -> tensor<100x64xf32>
  // CHECK-NEXT: graph.embedding_backward %{{.*}}, %{{.*}} {scale_by_frequency} : tensor<2x8x64xf32>, tensor<2x8xi64> -> tensor<100x64xf32>
  %o = graph.attention %q, %k, %v {scale = 2.500000e-01 : f64, causal} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32> -> tensor<2x4x8x16xf32>
  // CHECK-NEXT: graph.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 2.500000e-01 : f64, causal} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32> -> tensor<2x4x8x16xf32>
  %o2 = graph.attention %q, %q, %q {scale = 1.000000e+00 : f64} : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32> -> tensor<2x4x8x16xf32>
  // CHECK-NEXT: graph.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.000000e+00 : f64} : tensor<2x4x8x16xf32>
  %om = graph.attention %q, %k, %v mask %pad {scale = 2.500000e-01 : f64} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x8xf32> -> tensor<2x4x8x16xf32>
  // CHECK-NEXT: graph.attention %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} {scale = 2.500000e-01 : f64} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x8xf32> -> tensor<2x4x8x16xf32>
  %oq = graph.attention %q, %k, %v mask %per_query {scale = 2.500000e-01 : f64} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x8x8xf32> -> tensor<2x4x8x16xf32>
  // CHECK-NEXT: graph.attention %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} {scale = 2.500000e-01 : f64} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x8x8xf32> -> tensor<2x4x8x16xf32>
  %rp = graph.rope %xr, %cos, %sin : tensor<2x8x4x16xf32>, tensor<8x8xf32>, tensor<8x8xf32> -> tensor<2x8x4x16xf32>
  // CHECK-NEXT: graph.rope %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x8x4x16xf32>, tensor<8x8xf32>, tensor<8x8xf32> -> tensor<2x8x4x16xf32>
  %t = graph.as_strided %o {strides = [512, 16, 128, 1], offset = 0 : i64} : tensor<2x4x8x16xf32> -> tensor<2x8x4x16xf32>
  // CHECK-NEXT: graph.as_strided %{{.*}} {strides = [512 : i64, 16 : i64, 128 : i64, 1 : i64], offset = 0 : i64} : tensor<2x4x8x16xf32> -> tensor<2x8x4x16xf32>
  %y = graph.reshape %x : tensor<2x8x64xf32> -> tensor<16x64xf32>
  // CHECK-NEXT: graph.reshape %{{.*}} : tensor<2x8x64xf32> -> tensor<16x64xf32>
  func.return %y : tensor<16x64xf32>
}

func.func @mask_bias(%keep : tensor<2x16xi8>) -> tensor<2x16xbf16> {
  %bias = graph.mask_bias %keep : tensor<2x16xi8> -> tensor<2x16xbf16>
  // CHECK: graph.mask_bias %{{.*}} : tensor<2x16xi8> -> tensor<2x16xbf16>
  func.return %bias : tensor<2x16xbf16>
}

// the ops of the pointwise table: any arity, mixed dtypes where their roles say so
func.func @pointwise(%x : tensor<2x3x4x8xf32>, %row : tensor<8xf32>, %s : tensor<f32>,
                     %ids : tensor<4x8xi64>, %mask : tensor<4x8xi8>) -> tensor<2x3x4x8xf32> {
  %beta = graph.constant 1.000000e+00 : f32 -> tensor<f32>
  // CHECK: %{{.*}} = graph.constant 1.000000e+00 : f32 -> tensor<f32>
  %three = graph.constant 3 : i64 -> tensor<i64>
  // CHECK-NEXT: %{{.*}} = graph.constant 3 : i64 -> tensor<i64>
  %sp = graph.softplus %x, %beta, %s : tensor<2x3x4x8xf32>, tensor<f32>, tensor<f32> -> tensor<2x3x4x8xf32>
  // CHECK-NEXT: graph.softplus %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x3x4x8xf32>, tensor<f32>, tensor<f32> -> tensor<2x3x4x8xf32>
  %gt = graph.gt %x, %row : tensor<2x3x4x8xf32>, tensor<8xf32> -> tensor<2x3x4x8xi8>
  // CHECK-NEXT: graph.gt %{{.*}}, %{{.*}} : tensor<2x3x4x8xf32>, tensor<8xf32> -> tensor<2x3x4x8xi8>
  %w = graph.where %gt, %sp, %s : tensor<2x3x4x8xi8>, tensor<2x3x4x8xf32>, tensor<f32> -> tensor<2x3x4x8xf32>
  // CHECK-NEXT: graph.where %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x3x4x8xi8>, tensor<2x3x4x8xf32>, tensor<f32> -> tensor<2x3x4x8xf32>
  %b = graph.bitwise_and %ids, %three : tensor<4x8xi64>, tensor<i64> -> tensor<4x8xi64>
  // CHECK-NEXT: graph.bitwise_and %{{.*}}, %{{.*}} : tensor<4x8xi64>, tensor<i64> -> tensor<4x8xi64>
  %f = graph.convert %b : tensor<4x8xi64> -> tensor<4x8xf32>
  // CHECK-NEXT: graph.convert %{{.*}} : tensor<4x8xi64> -> tensor<4x8xf32>
  %n = graph.logical_not %mask : tensor<4x8xi8> -> tensor<4x8xi8>
  // CHECK-NEXT: graph.logical_not %{{.*}} : tensor<4x8xi8> -> tensor<4x8xi8>
  %y = graph.add %w, %f : tensor<2x3x4x8xf32>, tensor<4x8xf32> -> tensor<2x3x4x8xf32>
  // CHECK-NEXT: graph.add
  func.return %y : tensor<2x3x4x8xf32>
}

func.func @cached_attention(%q : tensor<1x4x1x16xbf16>, %k : tensor<1x2x64x16xbf16>, %v : tensor<1x2x64x16xbf16>, %len : tensor<1xi64>) -> tensor<1x4x1x16xbf16> {
  %o = graph.cached_attention %q, %k, %v, %len : tensor<1x4x1x16xbf16>, tensor<1x2x64x16xbf16>, tensor<1x2x64x16xbf16>, tensor<1xi64> -> tensor<1x4x1x16xbf16>
  // CHECK: graph.cached_attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : tensor<1x4x1x16xbf16>, tensor<1x2x64x16xbf16>, tensor<1x2x64x16xbf16>, tensor<1xi64> -> tensor<1x4x1x16xbf16>
  func.return %o : tensor<1x4x1x16xbf16>
}

// An attention's backward: the queries' statistics, then each gradient from them.
func.func @attention_backward(%q : tensor<2x4x8x16xf32>, %k : tensor<2x2x8x16xf32>, %v : tensor<2x2x8x16xf32>, %do : tensor<2x4x8x16xf32>, %o : tensor<2x4x8x16xf32>, %pad : tensor<2x8xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>) {
  %s = graph.attention_backward %q, %k, %v, %do, %o {gradient = #graph<attention_gradient stats>, scale = 2.500000e-01 : f64, causal} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32> -> tensor<2x4x8x2xf32>
  // CHECK: %[[S:.*]] = graph.attention_backward %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {gradient = #graph<attention_gradient stats>, scale = 2.500000e-01 : f64, causal} : {{.*}} -> tensor<2x4x8x2xf32>
  %dq = graph.attention_backward %q, %k, %v, %do, %s {gradient = #graph<attention_gradient query>, scale = 2.500000e-01 : f64, causal} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x2xf32> -> tensor<2x4x8x16xf32>
  // CHECK-NEXT: graph.attention_backward %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[S]] {gradient = #graph<attention_gradient query>, {{.*}}} : {{.*}} -> tensor<2x4x8x16xf32>
  %dk = graph.attention_backward %q, %k, %v, %do, %s mask %pad {gradient = #graph<attention_gradient key>, scale = 2.500000e-01 : f64} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x2xf32>, tensor<2x8xf32> -> tensor<2x2x8x16xf32>
  // CHECK-NEXT: graph.attention_backward %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[S]] mask %{{.*}} {gradient = #graph<attention_gradient key>, scale = 2.500000e-01 : f64} : {{.*}}, tensor<2x8xf32> -> tensor<2x2x8x16xf32>
  %dv = graph.attention_backward %q, %k, %v, %do, %s {gradient = #graph<attention_gradient value>, scale = 2.500000e-01 : f64, causal} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x2xf32> -> tensor<2x2x8x16xf32>
  // CHECK-NEXT: graph.attention_backward %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[S]] {gradient = #graph<attention_gradient value>, {{.*}}} : {{.*}} -> tensor<2x2x8x16xf32>
  func.return %dq, %dk, %dv : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>
}

// The three gradients at once, by the vendor library here.
func.func @attention_gradients(%q : tensor<2x4x8x16xf32>, %k : tensor<2x2x8x16xf32>, %v : tensor<2x2x8x16xf32>, %do : tensor<2x4x8x16xf32>, %o : tensor<2x4x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>) {
  %dq, %dk, %dv = graph.attention_gradients %q, %k, %v, %do, %o {scale = 2.500000e-01 : f64, causal, library} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32> -> (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>)
  // CHECK: %{{.*}}, %{{.*}}, %{{.*}} = graph.attention_gradients %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {scale = 2.500000e-01 : f64, causal, library} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32> -> (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>)
  func.return %dq, %dk, %dv : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>
}

// Pooling's input gradients: max pooling's by its indices, average pooling's by its counts.
func.func @pool_backward(%dy : tensor<2x3x4x5xf32>, %i : tensor<2x3x4x5xi64>) -> (tensor<2x3x8x10xf32>, tensor<2x3x8x10xf32>) {
  %dm = graph.pool_backward %dy indices %i {kind = #graph<pooling max>, window = [2, 2], stride = [2, 2], padding = [0, 0], dilation = [1, 1]} : tensor<2x3x4x5xf32>, tensor<2x3x4x5xi64> -> tensor<2x3x8x10xf32>
  // CHECK: graph.pool_backward %{{.*}} indices %{{.*}} {kind = #graph<pooling max>, window = [2 : i64, 2 : i64], stride = [2 : i64, 2 : i64], padding = [0 : i64, 0 : i64], dilation = [1 : i64, 1 : i64]} : tensor<2x3x4x5xf32>, tensor<2x3x4x5xi64> -> tensor<2x3x8x10xf32>
  %da = graph.pool_backward %dy {kind = #graph<pooling avg>, window = [2, 2], stride = [2, 2], padding = [0, 0], dilation = [1, 1], count_pad, divisor = 3 : i64} : tensor<2x3x4x5xf32> -> tensor<2x3x8x10xf32>
  // CHECK-NEXT: graph.pool_backward %{{.*}} {kind = #graph<pooling avg>, {{.*}}, count_pad, divisor = 3 : i64} : tensor<2x3x4x5xf32> -> tensor<2x3x8x10xf32>
  func.return %dm, %da : tensor<2x3x8x10xf32>, tensor<2x3x8x10xf32>
}

// Adaptive pooling's input gradients: its windows are graph.pool's adaptive ones.
func.func @adaptive_pool_backward(%dy : tensor<2x3x4x5xf32>, %i : tensor<2x3x4x5xi64>) -> (tensor<2x3x9x7xf32>, tensor<2x3x9x7xf32>) {
  %dm = graph.pool_backward %dy indices %i {kind = #graph<pooling max>, adaptive} : tensor<2x3x4x5xf32>, tensor<2x3x4x5xi64> -> tensor<2x3x9x7xf32>
  // CHECK: graph.pool_backward %{{.*}} indices %{{.*}} {kind = #graph<pooling max>, adaptive} : tensor<2x3x4x5xf32>, tensor<2x3x4x5xi64> -> tensor<2x3x9x7xf32>
  %da = graph.pool_backward %dy {kind = #graph<pooling avg>, adaptive} : tensor<2x3x4x5xf32> -> tensor<2x3x9x7xf32>
  // CHECK-NEXT: graph.pool_backward %{{.*}} {kind = #graph<pooling avg>, adaptive} : tensor<2x3x4x5xf32> -> tensor<2x3x9x7xf32>
  func.return %dm, %da : tensor<2x3x9x7xf32>, tensor<2x3x9x7xf32>
}

// The frontend records where the graph's ops run on the function: a typed record.
func.func @covered(%x : tensor<4xf32>) -> tensor<4xf32> attributes {coverage = #graph.coverage<ops = 1, native_ops = 1, folded_ops = 0, flops = 4, native_flops = 4, per_element_ops = {"aten.gelu.default" = 1 : i64}>} {
  // CHECK: func.func @covered(%{{.*}}: tensor<4xf32>) -> tensor<4xf32> attributes {coverage = #graph.coverage<ops = 1 : i64, native_ops = 1 : i64, folded_ops = 0 : i64, flops = 4 : i64, native_flops = 4 : i64, per_element_ops = {aten.gelu.default = 1 : i64}>} {
  %y = graph.gelu %x : tensor<4xf32> -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
