// RUN: emmy-opt %s | emmy-opt | filecheck %s

func.func @gather(%x : tensor<100x64xf32>, %ids : tensor<7xi64>, %b : tensor<3x1xi32>) -> tensor<7x64xf32> {
  %y = graph.gather %x[%ids] {strides = [0, 1], offset = 0 : i64, index_strides = [[1, 0]], index_sizes = [100], index_steps = [64]} : tensor<100x64xf32>, tensor<7xi64> -> tensor<7x64xf32>
  // CHECK: graph.gather %{{.*}}[%{{.*}}] {strides = [0 : i64, 1 : i64], offset = 0 : i64, index_strides = {{\[}}[1 : i64, 0 : i64]], index_sizes = [100 : i64], index_steps = [64 : i64]} : tensor<100x64xf32>, tensor<7xi64> -> tensor<7x64xf32>
  %two = graph.gather %x[%ids, %b] {strides = [0, 0], offset = 0 : i64, index_strides = [[0, 1], [1, 0]], index_sizes = [100, 64], index_steps = [64, 1]} : tensor<100x64xf32>, tensor<7xi64>, tensor<3x1xi32> -> tensor<3x7xf32>
  // CHECK-NEXT: graph.gather %{{.*}}[%{{.*}}, %{{.*}}] {{.*}} : tensor<100x64xf32>, tensor<7xi64>, tensor<3x1xi32> -> tensor<3x7xf32>
  %flip = graph.gather %x[] {strides = [-64, 1], offset = 6336 : i64, index_strides = [], index_sizes = [], index_steps = []} : tensor<100x64xf32> -> tensor<100x64xf32>
  // CHECK-NEXT: graph.gather %{{.*}}[] {strides = [-64 : i64, 1 : i64], offset = 6336 : i64, {{.*}}} : tensor<100x64xf32> -> tensor<100x64xf32>
  func.return %y : tensor<7x64xf32>
}

func.func @triangle(%m : tensor<2x8x8xf32>) -> tensor<2x8x8xf32> {
  %u = graph.triangle %m {part = #graph<triangle upper>, diagonal = 1 : i64} : tensor<2x8x8xf32> -> tensor<2x8x8xf32>
  // CHECK: graph.triangle %{{.*}} {part = #graph<triangle upper>, diagonal = 1 : i64} : tensor<2x8x8xf32> -> tensor<2x8x8xf32>
  %l = graph.triangle %u {part = #graph<triangle lower>, diagonal = -2 : i64} : tensor<2x8x8xf32> -> tensor<2x8x8xf32>
  // CHECK-NEXT: graph.triangle %{{.*}} {part = #graph<triangle lower>, diagonal = -2 : i64}
  func.return %l : tensor<2x8x8xf32>
}

func.func @cat(%a : tensor<2x3xi64>, %b : tensor<2x5xi64>) -> tensor<2x11xi64> {
  %c = graph.cat %a, %b, %a {dim = 1 : i64} : tensor<2x3xi64>, tensor<2x5xi64>, tensor<2x3xi64> -> tensor<2x11xi64>
  // CHECK: graph.cat %{{.*}}, %{{.*}}, %{{.*}} {dim = 1 : i64} : tensor<2x3xi64>, tensor<2x5xi64>, tensor<2x3xi64> -> tensor<2x11xi64>
  func.return %c : tensor<2x11xi64>
}
