// RUN: emmy-opt %s -p 'resolve-forks{db=none},specialize-forks' | filecheck %s

fork.site @s "f" "n=8" {
  %vec = fork.knob "vec" [1, 2, 4] default 2
  %algo = fork.knob "algo" ["a", "b"] default "b"
  kernel.func @s(%x : !kernel.ptr<f32> "x") {
    fork.alternatives %algo ["a", "b"] {
      %ca = arith.constant 1.0 : f32
      %i = arith.constant 0 : i32
      kernel.store %ca, %x[%i] : f32, !kernel.ptr<f32>
    } {
      %cb = arith.constant 2.0 : f32
      kernel.store %cb, %x[%vec] : f32, !kernel.ptr<f32>
    }
    kernel.return
  }
  kernel.launch @s grid %vec block %vec smem %vec
}
// Knobs become constants (a symbol by its index), the chosen region is inlined, and the
// site keeps its config and the provenance of each choice.
// CHECK: fork.site @s "f" "n=8" attributes {decision = #fork.decision<oracle = "default", evidence = #evidence.default<declared = true, moved_by_constraints = []>>, config = #fork.config<vec = 2, algo = "b">, provenance = #fork.provenance<vec = "default", algo = "default">} {
// CHECK-NEXT: %[[VEC:.*]] = arith.constant 2 : i32
// CHECK-NEXT: kernel.func @s(%[[X:.*]] : !kernel.ptr<f32> "x") {
// CHECK-NEXT: %[[CB:.*]] = arith.constant 2.000000e+00 : f32
// CHECK-NEXT: kernel.store %[[CB]], %[[X]][%[[VEC]]] : f32, !kernel.ptr<f32>
// CHECK-NEXT: kernel.return

// A host-level choice is inline-host-paths' to take: only its site's config is recorded.
fork.site choice @c "attention_path" "n=4" {
  %path = fork.knob "path" ["x", "y"] default "x"
}
func.func @f(%t : tensor<4xf32>) -> tensor<4xf32> {
  %y = fork.alternatives @c ["x", "y"] {
    fork.yield %t : tensor<4xf32>
  } {
    fork.yield %t : tensor<4xf32>
  } : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: fork.site choice @c "attention_path" "n=4" attributes {decision = #fork.decision<oracle = "default", evidence = #evidence.default<declared = true, moved_by_constraints = []>>, config = #fork.config<path = "x">, provenance = #fork.provenance<path = "default">} {
// CHECK: fork.alternatives @c ["x", "y"] {
