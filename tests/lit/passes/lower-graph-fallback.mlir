// RUN: emmy-opt %s -p lower-graph | filecheck %s

// An op emmy has no kernel for stays a fallback.call between the kernels, reading their
// results and feeding the next.
func.func @main(%x : tensor<4x8xf32>) -> tensor<4x8xf32> {
  %e = graph.exp %x : tensor<4x8xf32> -> tensor<4x8xf32>
  %c = fallback.call "aten.cumsum.default"(%e) {arguments = [#fallback.tensor<0, [4, 8], [8, 1], 0, "float32">, 1 : i64], kwargs = {}, reason = "unsupported op aten.cumsum.default", source = ""} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = graph.tanh %c : tensor<4x8xf32> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
// CHECK:      %{{.*}} = kernel.call @elementwise_{{[0-9]+}}(%x)
// CHECK-NEXT: %c = fallback.call "aten.cumsum.default"(%{{.*}})
// CHECK-NEXT: %{{.*}} = kernel.call @elementwise_{{[0-9]+}}(%c)
