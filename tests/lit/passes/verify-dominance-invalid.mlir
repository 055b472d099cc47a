// RUN: not emmy-opt %s -p fuse-graph 2>&1 | filecheck %s

// emmy-opt verifies dominance between passes, as a compile does after each pass: a value
// used before it is defined (the parser accepts a forward reference) is one line.
func.func @main(%x : tensor<4x8xf32>) -> tensor<4x8xf32> {
  %y = graph.exp %z : tensor<4x8xf32> -> tensor<4x8xf32>
  %z = graph.exp %x : tensor<4x8xf32> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
// CHECK: emmy-opt: error: the IR is invalid as parsed: value %z is used by graph.exp before it is defined (as result 0 of graph.exp)
