// RUN: emmy-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @no_broadcast(%x : tensor<4x8xf32>, %y : tensor<3xf32>) -> tensor<4x8xf32> {
  %a = graph.add %x, %y : tensor<4x8xf32>, tensor<3xf32> -> tensor<4x8xf32>
  func.return %a : tensor<4x8xf32>
}
// CHECK: graph.add shapes [4, 8] and [3] do not broadcast

// -----

func.func @wrong_result(%x : tensor<4x8xf32>, %y : tensor<8xf32>) -> tensor<8xf32> {
  %a = graph.mul %x, %y : tensor<4x8xf32>, tensor<8xf32> -> tensor<8xf32>
  func.return %a : tensor<8xf32>
}
// CHECK: graph.mul result shape [8] should be [4, 8]

// -----

func.func @mixed(%x : tensor<4xf32>, %y : tensor<4xf16>) -> tensor<4xf32> {
  %a = graph.sub %x, %y : tensor<4xf32>, tensor<4xf16> -> tensor<4xf32>
  func.return %a : tensor<4xf32>
}
// CHECK: graph.sub operands and result must share one dtype

// -----

func.func @int_tensor(%x : tensor<4xi32>) -> tensor<4xi32> {
  %a = graph.exp %x : tensor<4xi32> -> tensor<4xi32>
  func.return %a : tensor<4xi32>
}
// CHECK: graph.exp operand must be a tensor of f32, f16 or bf16

// -----

func.func @dim(%x : tensor<4x8xf32>) -> tensor<4x8xf32> {
  %a = graph.softmax %x {dim = 2 : i64} : tensor<4x8xf32> -> tensor<4x8xf32>
  func.return %a : tensor<4x8xf32>
}
// CHECK: graph.softmax dim 2 is out of range for rank 2

// -----

func.func @constant() -> tensor<2xf32> {
  %c = graph.constant 1.000000e+00 : f32 -> tensor<2xf32>
  func.return %c : tensor<2xf32>
}
// CHECK: graph.constant gives a 0-d tensor

// -----

func.func @softmax_shape(%x : tensor<4x8xf32>) -> tensor<8x4xf32> {
  %a = graph.softmax %x {dim = 0 : i64} : tensor<4x8xf32> -> tensor<8x4xf32>
  func.return %a : tensor<8x4xf32>
}
// CHECK: graph.softmax result must have the input's shape

// -----

func.func @softmax_backward_types(%g : tensor<4x8xf16>, %y : tensor<4x8xf32>) -> tensor<4x8xf32> {
  %a = graph.softmax_backward %g, %y : tensor<4x8xf16>, tensor<4x8xf32> -> tensor<4x8xf32>
  func.return %a : tensor<4x8xf32>
}
// CHECK: graph.softmax_backward's gradient, output and result must share one type

// -----

func.func @softmax_backward_rank0(%g : tensor<f32>, %y : tensor<f32>) -> tensor<f32> {
  %a = graph.softmax_backward %g, %y {log} : tensor<f32>, tensor<f32> -> tensor<f32>
  func.return %a : tensor<f32>
}
// CHECK: graph.softmax_backward needs a tensor of rank 1 or more

// -----

func.func @layer_norm_backward_stats(%g : tensor<4x8xf16>, %x : tensor<4x8xf16>, %m : tensor<4xf16>, %w : tensor<8xf16>) -> tensor<4x8xf16> {
  %a = graph.layer_norm_backward %g, %x, %m, %m, %w : tensor<4x8xf16>, tensor<4x8xf16>, tensor<4xf16>, tensor<4xf16>, tensor<8xf16> -> tensor<4x8xf16>
  func.return %a : tensor<4x8xf16>
}
// CHECK: graph.layer_norm_backward's mean and rstd must be tensor<4xf32>, one f32 a row

// -----

func.func @layer_norm_backward_weight(%g : tensor<4x8xf32>, %x : tensor<4x8xf32>, %m : tensor<4xf32>, %w : tensor<4xf32>) -> tensor<4x8xf32> {
  %a = graph.layer_norm_backward %g, %x, %m, %m, %w : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32> -> tensor<4x8xf32>
  func.return %a : tensor<4x8xf32>
}
// CHECK: graph.layer_norm_backward's weight must be one f32 a column

// -----

func.func @unary_shape(%x : tensor<4x8xf32>) -> tensor<8xf32> {
  %a = graph.tanh %x : tensor<4x8xf32> -> tensor<8xf32>
  func.return %a : tensor<8xf32>
}
// CHECK: graph.tanh must keep the shape and dtype of its input

// -----

func.func @rank0(%x : tensor<f32>) -> tensor<f32> {
  %a = graph.softmax %x {dim = 0 : i64} : tensor<f32> -> tensor<f32>
  func.return %a : tensor<f32>
}
// CHECK: graph.softmax needs a tensor of rank 1 or more

// -----

func.func @sigmoid_int(%x : tensor<4xi64>) -> tensor<4xi64> {
  %a = graph.sigmoid %x : tensor<4xi64> -> tensor<4xi64>
  func.return %a : tensor<4xi64>
}
// CHECK: graph.sigmoid operand must be a tensor of f32, f16 or bf16

// -----

func.func @matmul_contraction(%a : tensor<4x8xf32>, %b : tensor<16x8xf32>) -> tensor<4x8xf32> {
  %c = graph.matmul %a, %b : tensor<4x8xf32>, tensor<16x8xf32> -> tensor<4x8xf32>
  func.return %c : tensor<4x8xf32>
}
// CHECK: graph.matmul contracts 8 columns of lhs with 16 rows of rhs

// -----

func.func @matmul_transposed_lhs(%a : tensor<4x8xf32>, %b : tensor<8x16xf32>) -> tensor<8x16xf32> {
  %c = graph.matmul %a, %b {transpose_a} : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<8x16xf32>
  func.return %c : tensor<8x16xf32>
}
// CHECK: graph.matmul contracts 4 columns of lhs with 8 rows of rhs

// -----

func.func @matmul_transposed_contraction(%a : tensor<4x8xf32>, %b : tensor<8x16xf32>) -> tensor<4x8xf32> {
  %c = graph.matmul %a, %b {transpose_b} : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x8xf32>
  func.return %c : tensor<4x8xf32>
}
// CHECK: graph.matmul contracts 8 columns of lhs with 16 rows of rhs

// -----

func.func @matmul_batch(%a : tensor<2x4x8xf32>, %b : tensor<3x8x16xf32>) -> tensor<2x4x16xf32> {
  %c = graph.matmul %a, %b : tensor<2x4x8xf32>, tensor<3x8x16xf32> -> tensor<2x4x16xf32>
  func.return %c : tensor<2x4x16xf32>
}
// CHECK: graph.matmul batch dims [3] of rhs must match lhs's [2]

// -----

func.func @matmul_result(%a : tensor<4x8xf32>, %b : tensor<8x16xf32>) -> tensor<4x8xf32> {
  %c = graph.matmul %a, %b : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x8xf32>
  func.return %c : tensor<4x8xf32>
}
// CHECK: graph.matmul result shape [4, 8] should be [4, 16]

// -----

func.func @layer_norm_weight(%x : tensor<4x8xf32>, %w : tensor<4xf32>, %b : tensor<8xf32>) -> tensor<4x8xf32> {
  %y = graph.layer_norm %x, %w, %b {eps = 1.000000e-05 : f64} : tensor<4x8xf32>, tensor<4xf32>, tensor<8xf32> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
// CHECK: graph.layer_norm parameters must be f32[8], not tensor<4xf32>

// -----

func.func @rms_norm_dtype(%x : tensor<4x8xf32>, %w : tensor<8xf16>) -> tensor<4x8xf32> {
  %y = graph.rms_norm %x, %w {eps = 1.000000e-06 : f64} : tensor<4x8xf32>, tensor<8xf16> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
// CHECK: graph.rms_norm parameters must be f32[8], not tensor<8xf16>

// -----

func.func @reduce_argmax_dtype(%x : tensor<4x8xf32>) -> tensor<4xf32> {
  %y = graph.reduce %x {kind = #graph<reduction argmax>} : tensor<4x8xf32> -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: graph.reduce argmax of f32 gives i64, not f32

// -----

func.func @reduce_integer_sum(%x : tensor<4x8xi32>) -> tensor<4xi32> {
  %y = graph.reduce %x {kind = #graph<reduction sum>} : tensor<4x8xi32> -> tensor<4xi32>
  func.return %y : tensor<4xi32>
}
// CHECK: graph.reduce sum of i32 gives i64, not i32

// -----

func.func @reduce_integer_mean(%x : tensor<4x8xi64>) -> tensor<4xi64> {
  %y = graph.reduce %x {kind = #graph<reduction mean>} : tensor<4x8xi64> -> tensor<4xi64>
  func.return %y : tensor<4xi64>
}
// CHECK: graph.reduce mean input must be a tensor of f32, f16 or bf16, not tensor<4x8xi64>

// -----

func.func @reduce_correction(%x : tensor<4x8xf32>) -> tensor<4xf32> {
  %y = graph.reduce %x {kind = #graph<reduction sum>, correction = 1 : i64} : tensor<4x8xf32> -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: graph.reduce takes a correction with kinds var, std only

// -----

func.func @cumsum_dtype(%x : tensor<4x8xi32>) -> tensor<4x8xi32> {
  %y = graph.cumsum %x : tensor<4x8xi32> -> tensor<4x8xi32>
  func.return %y : tensor<4x8xi32>
}
// CHECK: graph.cumsum of tensor<4x8xi32> gives tensor<4x8xi64>, not tensor<4x8xi32>

// -----

func.func @reduce_shape(%x : tensor<4x8xf32>) -> tensor<8xf32> {
  %y = graph.reduce %x {kind = #graph<reduction sum>} : tensor<4x8xf32> -> tensor<8xf32>
  func.return %y : tensor<8xf32>
}
// CHECK: graph.reduce of [4, 8] over the last dim cannot give [8]

// -----

func.func @embedding_ids(%t : tensor<100x16xf32>, %ids : tensor<4xf32>) -> tensor<4x16xf32> {
  %y = graph.embedding %t, %ids : tensor<100x16xf32>, tensor<4xf32> -> tensor<4x16xf32>
  func.return %y : tensor<4x16xf32>
}
// CHECK: graph.embedding ids must be a tensor of i32 or i64, not tensor<4xf32>

// -----

func.func @embedding_result(%t : tensor<100x16xf32>, %ids : tensor<4xi64>) -> tensor<4x8xf32> {
  %y = graph.embedding %t, %ids : tensor<100x16xf32>, tensor<4xi64> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
// CHECK: graph.embedding result should be tensor<4x16xf32>

// -----

func.func @embedding_backward_ids(%g : tensor<4x16xf32>, %ids : tensor<5xi64>) -> tensor<100x16xf32> {
  %y = graph.embedding_backward %g, %ids : tensor<4x16xf32>, tensor<5xi64> -> tensor<100x16xf32>
  func.return %y : tensor<100x16xf32>
}
// CHECK: graph.embedding_backward's gradient must be the ids' shape + [dim]

// -----

func.func @embedding_backward_result(%g : tensor<4x16xf16>, %ids : tensor<4xi32>) -> tensor<100x16xf32> {
  %y = graph.embedding_backward %g, %ids : tensor<4x16xf16>, tensor<4xi32> -> tensor<100x16xf32>
  func.return %y : tensor<100x16xf32>
}
// CHECK: graph.embedding_backward's result must be [vocab, 16] of the gradient's type

// -----

func.func @attention_heads(%q : tensor<1x4x8x16xf32>, %k : tensor<1x3x8x16xf32>) -> tensor<1x4x8x16xf32> {
  %o = graph.attention %q, %k, %k {scale = 2.500000e-01 : f64} : tensor<1x4x8x16xf32>, tensor<1x3x8x16xf32>, tensor<1x3x8x16xf32> -> tensor<1x4x8x16xf32>
  func.return %o : tensor<1x4x8x16xf32>
}
// CHECK: graph.attention k/v [1, 3, 8, 16] do not fit q [1, 4, 8, 16]

// -----

func.func @attention_rank(%q : tensor<4x8x16xf32>) -> tensor<4x8x16xf32> {
  %o = graph.attention %q, %q, %q {scale = 2.500000e-01 : f64} : tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32> -> tensor<4x8x16xf32>
  func.return %o : tensor<4x8x16xf32>
}
// CHECK: graph.attention takes q, k, v of rank 4 with k and v alike

// -----

func.func @attention_mask(%q : tensor<2x4x8x16xf32>, %m : tensor<2x1x8xf32>) -> tensor<2x4x8x16xf32> {
  %o = graph.attention %q, %q, %q mask %m {scale = 2.500000e-01 : f64} : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x1x8xf32> -> tensor<2x4x8x16xf32>
  func.return %o : tensor<2x4x8x16xf32>
}
// CHECK: graph.attention mask must be f32 of shape [2 or 8, 8] or [2 or 8, 8, 8] ([batch or batch·heads, (q_len,) kv_len]), not tensor<2x1x8xf32>

// -----

func.func @rope_odd(%x : tensor<1x8x2x15xf32>, %c : tensor<8x7xf32>) -> tensor<1x8x2x15xf32> {
  %y = graph.rope %x, %c, %c : tensor<1x8x2x15xf32>, tensor<8x7xf32>, tensor<8x7xf32> -> tensor<1x8x2x15xf32>
  func.return %y : tensor<1x8x2x15xf32>
}
// CHECK: graph.rope x must be [batch, seq, heads, dim] with an even dim

// -----

func.func @rope_table(%x : tensor<1x8x2x16xf32>, %c : tensor<8x16xf32>) -> tensor<1x8x2x16xf32> {
  %y = graph.rope %x, %c, %c : tensor<1x8x2x16xf32>, tensor<8x16xf32>, tensor<8x16xf32> -> tensor<1x8x2x16xf32>
  func.return %y : tensor<1x8x2x16xf32>
}
// CHECK: graph.rope cos and sin must be tensor<8x8xf32>

// -----

func.func @cached_attention_heads(%q : tensor<1x3x1x16xf32>, %k : tensor<1x2x64x16xf32>, %len : tensor<1xi64>) -> tensor<1x3x1x16xf32> {
  %o = graph.cached_attention %q, %k, %k, %len : tensor<1x3x1x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>, tensor<1xi64> -> tensor<1x3x1x16xf32>
  func.return %o : tensor<1x3x1x16xf32>
}
// CHECK: graph.cached_attention caches [1, 2, 64, 16] do not fit q [1, 3, 1, 16]

// -----

func.func @cached_attention_length(%q : tensor<1x4x1x16xf32>, %k : tensor<1x2x64x16xf32>, %len : tensor<1xi32>) -> tensor<1x4x1x16xf32> {
  %o = graph.cached_attention %q, %k, %k, %len : tensor<1x4x1x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>, tensor<1xi32> -> tensor<1x4x1x16xf32>
  func.return %o : tensor<1x4x1x16xf32>
}
// CHECK: graph.cached_attention length must be tensor<1xi64>, not tensor<1xi32>

// -----

func.func @cached_attention_caches(%q : tensor<1x4x1x16xf32>, %k : tensor<1x2x64x16xf32>, %v : tensor<1x2x64x16xf16>, %len : tensor<1xi64>) -> tensor<1x4x1x16xf32> {
  %o = graph.cached_attention %q, %k, %v, %len : tensor<1x4x1x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x16xf16>, tensor<1xi64> -> tensor<1x4x1x16xf32>
  func.return %o : tensor<1x4x1x16xf32>
}
// CHECK: graph.cached_attention takes q and caches of rank 4 with the caches alike

// -----

func.func @reshape_count(%x : tensor<4x8xf32>) -> tensor<30xf32> {
  %y = graph.reshape %x : tensor<4x8xf32> -> tensor<30xf32>
  func.return %y : tensor<30xf32>
}
// CHECK: graph.reshape cannot make tensor<30xf32> of tensor<4x8xf32>

// -----

func.func @as_strided_past_end(%x : tensor<4x8xf32>) -> tensor<8x4xf32> {
  %y = graph.as_strided %x {strides = [1, 8], offset = 1 : i64} : tensor<4x8xf32> -> tensor<8x4xf32>
  func.return %y : tensor<8x4xf32>
}
// CHECK: graph.as_strided reads element 32 of tensor<4x8xf32>

// -----

func.func @as_strided_rank(%x : tensor<4x8xf32>) -> tensor<8x4xf32> {
  %y = graph.as_strided %x {strides = [1], offset = 0 : i64} : tensor<4x8xf32> -> tensor<8x4xf32>
  func.return %y : tensor<8x4xf32>
}
// CHECK: graph.as_strided needs one non-negative stride per result dim

// -----

func.func @softmax_causal(%x : tensor<4x8xf32>) -> tensor<4x8xf32> {
  %a = graph.softmax %x {dim = 0 : i64, causal} : tensor<4x8xf32> -> tensor<4x8xf32>
  func.return %a : tensor<4x8xf32>
}
// CHECK: a causal graph.softmax is over the last dim of a rank 2+ tensor

// -----

func.func @mask_bias_of_floats(%x : tensor<2x16xf32>) -> tensor<2x16xf32> {
  %b = graph.mask_bias %x : tensor<2x16xf32> -> tensor<2x16xf32>
  func.return %b : tensor<2x16xf32>
}
// CHECK: graph.mask_bias operand must be a tensor of i8, not tensor<2x16xf32>

// -----

func.func @mask_bias_shape(%m : tensor<2x16xi8>) -> tensor<32xf32> {
  %b = graph.mask_bias %m : tensor<2x16xi8> -> tensor<32xf32>
  func.return %b : tensor<32xf32>
}
// CHECK: graph.mask_bias result must have its operand's shape

// -----

func.func @fused_yields_another_type(%x : tensor<4xf32>) -> tensor<4xf16> {
  %y = graph.fused(%x) {
  ^bb0(%0: tensor<4xf32>):
    %e = graph.exp %0 : tensor<4xf32> -> tensor<4xf32>
    graph.yield %e : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf16>
  func.return %y : tensor<4xf16>
}
// CHECK: graph.fused results must have the types its body yields

// -----

func.func @where_condition(%c : tensor<4xf32>, %x : tensor<4xf32>) -> tensor<4xf32> {
  %a = graph.where %c, %x, %x : tensor<4xf32>, tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  func.return %a : tensor<4xf32>
}
// CHECK: graph.where conditions must be tensors of i8 (bool)

// -----

func.func @comparison_result(%x : tensor<4xf32>) -> tensor<4xf32> {
  %a = graph.lt %x, %x : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  func.return %a : tensor<4xf32>
}
// CHECK: graph.lt operands and result must share one dtype

// -----

func.func @bits_of_floats(%x : tensor<4xf32>) -> tensor<4xf32> {
  %a = graph.bitwise_xor %x, %x : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  func.return %a : tensor<4xf32>
}
// CHECK: graph.bitwise_xor operand must be a tensor of i8 (bool), i32 or i64

// -----

func.func @arity(%x : tensor<4xf32>) -> tensor<4xf32> {
  %a = graph.lerp %x, %x : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  func.return %a : tensor<4xf32>
}
// CHECK: graph.lerp takes 3 operands

// -----

func.func @three_way_broadcast(%x : tensor<4x8xf32>, %y : tensor<8xf32>, %z : tensor<3xf32>) -> tensor<4x8xf32> {
  %a = graph.clamp %x, %y, %z : tensor<4x8xf32>, tensor<8xf32>, tensor<3xf32> -> tensor<4x8xf32>
  func.return %a : tensor<4x8xf32>
}
// CHECK: graph.clamp shapes [4, 8] and [8] and [3] do not broadcast

// -----

func.func @integer_constant() -> tensor<f32> {
  %c = graph.constant 3 : i64 -> tensor<f32>
  func.return %c : tensor<f32>
}
// CHECK: graph.constant of floats holds a float, of integers an integer

// -----

func.func @attention_backward_stats(%q : tensor<1x2x8x16xf32>, %o : tensor<1x2x8x16xf32>) -> tensor<1x2x8x1xf32> {
  %s = graph.attention_backward %q, %q, %q, %q, %o {gradient = #graph<attention_gradient stats>, scale = 2.500000e-01 : f64} : tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32> -> tensor<1x2x8x1xf32>
  func.return %s : tensor<1x2x8x1xf32>
}
// CHECK: graph.attention_backward stats takes output tensor<1x2x8x16xf32> and gives tensor<1x2x8x2xf32>, not tensor<1x2x8x16xf32> and tensor<1x2x8x1xf32>

// -----

func.func @attention_backward_key(%q : tensor<1x4x8x16xf32>, %k : tensor<1x2x8x16xf32>, %s : tensor<1x4x8x2xf32>) -> tensor<1x4x8x16xf32> {
  %dk = graph.attention_backward %q, %k, %k, %q, %s {gradient = #graph<attention_gradient key>, scale = 2.500000e-01 : f64} : tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x2xf32> -> tensor<1x4x8x16xf32>
  func.return %dk : tensor<1x4x8x16xf32>
}
// CHECK: graph.attention_backward key takes stats tensor<1x4x8x2xf32> and gives tensor<1x2x8x16xf32>, not tensor<1x4x8x2xf32> and tensor<1x4x8x16xf32>

// -----

func.func @attention_backward_gradient(%q : tensor<1x2x8x16xf32>, %g : tensor<1x2x8x16xf16>, %s : tensor<1x2x8x2xf32>) -> tensor<1x2x8x16xf32> {
  %dq = graph.attention_backward %q, %q, %q, %g, %s {gradient = #graph<attention_gradient query>, scale = 2.500000e-01 : f64} : tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf16>, tensor<1x2x8x2xf32> -> tensor<1x2x8x16xf32>
  func.return %dq : tensor<1x2x8x16xf32>
}
// CHECK: graph.attention_backward's output gradient must have q's type

// -----

func.func @attention_gradients_results(%q : tensor<1x2x8x16xf32>, %k : tensor<1x1x8x16xf32>) -> tensor<1x2x8x16xf32> {
  %dq, %dk, %dv = graph.attention_gradients %q, %k, %k, %q, %q {scale = 2.500000e-01 : f64} : tensor<1x2x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32> -> (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x1x8x16xf32>)
  func.return %dq : tensor<1x2x8x16xf32>
}
// CHECK: graph.attention_gradients's results must have the types of q, k and v

// -----

func.func @pool_backward_indices(%dy : tensor<2x3x4x5xf32>, %i : tensor<2x3x4x5xi32>) -> tensor<2x3x8x10xf32> {
  %dx = graph.pool_backward %dy indices %i {kind = #graph<pooling max>, window = [2, 2], stride = [2, 2], padding = [0, 0], dilation = [1, 1]} : tensor<2x3x4x5xf32>, tensor<2x3x4x5xi32> -> tensor<2x3x8x10xf32>
  func.return %dx : tensor<2x3x8x10xf32>
}
// CHECK: graph.pool_backward's indices must be i64 of the gradient's shape

// -----

func.func @pool_backward_kind(%dy : tensor<2x3x4x5xf32>) -> tensor<2x3x8x10xf32> {
  %dx = graph.pool_backward %dy {kind = #graph<pooling max>, window = [2, 2], stride = [2, 2], padding = [0, 0], dilation = [1, 1]} : tensor<2x3x4x5xf32> -> tensor<2x3x8x10xf32>
  func.return %dx : tensor<2x3x8x10xf32>
}
// CHECK: graph.pool_backward is of max pooling (with indices) or avg (without)

// -----

func.func @pool_backward_window(%dy : tensor<2x3x4x5xf32>) -> tensor<2x3x8x10xf32> {
  %dx = graph.pool_backward %dy {kind = #graph<pooling avg>, window = [2, 0], stride = [2, 2], padding = [0, 0], dilation = [1, 1]} : tensor<2x3x4x5xf32> -> tensor<2x3x8x10xf32>
  func.return %dx : tensor<2x3x8x10xf32>
}
// CHECK: graph.pool_backward needs a positive window, stride and dilation

// -----

func.func @pool_backward_adaptive_window(%dy : tensor<2x3x4x5xf32>) -> tensor<2x3x8x10xf32> {
  %dx = graph.pool_backward %dy {kind = #graph<pooling avg>, adaptive, window = [2, 2]} : tensor<2x3x4x5xf32> -> tensor<2x3x8x10xf32>
  func.return %dx : tensor<2x3x8x10xf32>
}
// CHECK: an adaptive graph.pool_backward has no window, stride, padding or count

// -----

func.func @layer_norm_statistics(%x : tensor<4x8xbf16>, %w : tensor<8xbf16>) -> tensor<4x8xbf16> {
  %y, %m, %r = graph.layer_norm %x, %w, %w {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>, tensor<8xbf16> -> tensor<4x8xbf16>, tensor<4xbf16>, tensor<4xbf16>
  func.return %y : tensor<4x8xbf16>
}
// CHECK: graph.layer_norm's statistics must be a mean and an rstd tensor<4xf32>

// -----

func.func @coverage_by_name(%x : tensor<4xf32>) -> tensor<4xf32> attributes {coverage = #graph.coverage<ops = 1, native_ops = 1, folded_ops = 0, flops = 4, native_flops = 4, per_element_ops = {"aten.gelu.default" = "once"}>} {
  func.return %x : tensor<4xf32>
}
// CHECK: #graph.coverage: per_element_ops counts ops by name
