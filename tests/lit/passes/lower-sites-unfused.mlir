// RUN: not emmy-opt %s -p lower-sites 2>&1 | filecheck %s

// lower-sites reads elementwise chains from graph.fused ops only (fuse-graph makes them;
// lower-graph runs both).
func.func @main(%x : tensor<4x8xf32>) -> tensor<4x8xf32> {
  %y = graph.exp %x : tensor<4x8xf32> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
// CHECK: emmy-opt: error: lower-sites: graph.exp is not in a graph.fused: run fuse-graph first
