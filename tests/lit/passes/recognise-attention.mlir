// RUN: emmy-opt %s -p recognise-attention --split-input-file | filecheck %s

// q · kᵀ, scaled, softmax over the keys, · v: one fused attention.
func.func @scaled(%q : tensor<2x3x10x16xf32>, %k : tensor<2x3x12x16xf32>, %v : tensor<2x3x12x16xf32>) -> tensor<2x3x10x16xf32> {
  %s = graph.matmul %q, %k {transpose_b} : tensor<2x3x10x16xf32>, tensor<2x3x12x16xf32> -> tensor<2x3x10x12xf32>
  %c = graph.constant 4.000000e+00 : f32 -> tensor<f32>
  %t = graph.div %s, %c : tensor<2x3x10x12xf32>, tensor<f32> -> tensor<2x3x10x12xf32>
  %p = graph.softmax %t {dim = -1 : i64} : tensor<2x3x10x12xf32> -> tensor<2x3x10x12xf32>
  %o = graph.matmul %p, %v : tensor<2x3x10x12xf32>, tensor<2x3x12x16xf32> -> tensor<2x3x10x16xf32>
  func.return %o : tensor<2x3x10x16xf32>
}
// CHECK-LABEL: func.func @scaled
// CHECK-NEXT: %{{.*}} = graph.constant
// CHECK-NEXT: %[[O:.*]] = graph.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 2.500000e-01 : f64} :
// CHECK-NEXT: func.return %[[O]]

// -----

// The probabilities are returned too: the pattern stays as written.
func.func @shared(%q : tensor<1x2x4x8xf32>, %k : tensor<1x2x4x8xf32>, %v : tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x4xf32>) {
  %s = graph.matmul %q, %k {transpose_b} : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x4xf32>
  %p = graph.softmax %s {dim = -1 : i64} : tensor<1x2x4x4xf32> -> tensor<1x2x4x4xf32>
  %o = graph.matmul %p, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  func.return %o, %p : tensor<1x2x4x8xf32>, tensor<1x2x4x4xf32>
}
// CHECK-LABEL: func.func @shared
// CHECK-NOT: graph.attention
// CHECK: graph.softmax

// -----

// A causal softmax (query i sees keys j <= i) is a causal attention: graph.softmax and the
// attention kernels both hide key j from query i where j > i, with or without q_len = kv_len.
func.func @causal(%q : tensor<1x2x6x8xf32>, %k : tensor<1x2x9x8xf32>, %v : tensor<1x2x9x8xf32>) -> tensor<1x2x6x8xf32> {
  %s = graph.matmul %q, %k {transpose_b} : tensor<1x2x6x8xf32>, tensor<1x2x9x8xf32> -> tensor<1x2x6x9xf32>
  %c = graph.constant 5.000000e-01 : f32 -> tensor<f32>
  %t = graph.mul %s, %c : tensor<1x2x6x9xf32>, tensor<f32> -> tensor<1x2x6x9xf32>
  %p = graph.softmax %t {dim = -1 : i64, causal} : tensor<1x2x6x9xf32> -> tensor<1x2x6x9xf32>
  %o = graph.matmul %p, %v : tensor<1x2x6x9xf32>, tensor<1x2x9x8xf32> -> tensor<1x2x6x8xf32>
  func.return %o : tensor<1x2x6x8xf32>
}
// CHECK-LABEL: func.func @causal
// CHECK-NEXT: %{{.*}} = graph.constant
// CHECK-NEXT: %[[O:.*]] = graph.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 5.000000e-01 : f64, causal} :
// CHECK-NEXT: func.return %[[O]]
