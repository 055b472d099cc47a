// RUN: not emmy-opt %s -p 'specialize-forks' 2>&1 | filecheck %s

// A host-level choice must name a site of one fork.
func.func @f(%x : tensor<4xf32>) -> tensor<4xf32> {
  %y = fork.alternatives @nowhere ["a", "b"] {
    fork.yield %x : tensor<4xf32>
  } {
    fork.yield %x : tensor<4xf32>
  } : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: emmy-opt: error: fork.alternatives is chosen by @nowhere, which is not a site of one fork
