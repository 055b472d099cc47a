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
// CHECK: fork.site @s "f" "n=8" attributes {decision = {oracle = "default", evidence = "{\22declared\22: true}", runner_up = "null"}, config = {vec = 2 : i64, algo = "b"}, provenance = {vec = {oracle = "default"}, algo = {oracle = "default"}}} {
// CHECK-NEXT: %[[VEC:.*]] = arith.constant 2 : i32
// CHECK-NEXT: kernel.func @s(%[[X:.*]] : !kernel.ptr<f32> "x") {
// CHECK-NEXT: %[[CB:.*]] = arith.constant 2.000000e+00 : f32
// CHECK-NEXT: kernel.store %[[CB]], %[[X]][%[[VEC]]] : f32, !kernel.ptr<f32>
// CHECK-NEXT: kernel.return
