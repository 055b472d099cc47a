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
  %g = graph.gelu %t {approximate = "tanh"} : tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK-NEXT: graph.gelu %{{.*}} {approximate = "tanh"}
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
  func.return %y : tensor<4x8xf32>
}
