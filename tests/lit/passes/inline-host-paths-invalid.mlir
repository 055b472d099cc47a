// RUN: not emmy-opt %s -p 'inline-host-paths' 2>&1 | filecheck %s

// The choice is taken by its site's config, which specialize-forks records.
fork.site choice @c "attention_path" "n=4" {
  %path = fork.knob "path" ["a", "b"] default "a"
}
func.func @f(%x : tensor<4xf32>) -> tensor<4xf32> {
  %y = fork.alternatives @c ["a", "b"] {
    fork.yield %x : tensor<4xf32>
  } {
    fork.yield %x : tensor<4xf32>
  } : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: emmy-opt: error: the fork of choice site @c is unresolved: run resolve-forks and specialize-forks first
