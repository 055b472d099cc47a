// RUN: emmy-opt %s | emmy-opt | filecheck %s

fork.site @scale_0 "scale" "n=64,T=f32" {
// CHECK: fork.site @scale_0 "scale" "n=64,T=f32" {
  %threads = fork.knob "threads" [64, 128, 256] default 128
  // CHECK: %{{.*}} = fork.knob "threads" [64, 128, 256] default 128
  %vec = fork.knob "vec" [1, 2, 4] default 4 where "n % vec == 0"
  // CHECK-NEXT: fork.knob "vec" [1, 2, 4] default 4 where "n % vec == 0"
  // A constraint is held as its syntax tree: it prints back in the parentheses it needs.
  %rows = fork.knob "rows" [1, 2] default 1 where "((n % (rows)))==0 && (n > 1 || rows == 1)"
  // CHECK-NEXT: fork.knob "rows" [1, 2] default 1 where "n % rows == 0 && (n > 1 || rows == 1)"
  %algo = fork.knob "algo" ["a", "b"] default "a" = "b" by "pin"
  // CHECK-NEXT: fork.knob "algo" ["a", "b"] default "a" = "b" by "pin"
  kernel.func @scale_0(%x : !kernel.ptr<f32> "x") {
    fork.alternatives %algo ["a", "b"] {
      kernel.barrier
    } {
    }
    // CHECK: fork.alternatives %{{.*}} ["a", "b"] {
    // CHECK-NEXT: kernel.barrier
    // CHECK-NEXT: } {
    // CHECK-NEXT: }
    kernel.return
  }
  kernel.launch @scale_0 grid %vec block %threads smem %vec
}


// A host-level choice: its site holds the knob; each region yields what the op stands for.
fork.site choice @attention_path_0 "attention_path" "n=4" {
  %path = fork.knob "path" ["fused", "unfused"] default "fused"
}
// CHECK: fork.site choice @attention_path_0 "attention_path" "n=4" {
// CHECK-NEXT: fork.knob "path" ["fused", "unfused"] default "fused"
func.func @choice(%t : tensor<4xf32>) -> tensor<4xf32> {
  %y = fork.alternatives @attention_path_0 ["fused", "unfused"] {
    %a = graph.exp %t : tensor<4xf32> -> tensor<4xf32>
    fork.yield %a : tensor<4xf32>
  } {
    fork.yield %t : tensor<4xf32>
  } : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK:      %[[Y:.*]] = fork.alternatives @attention_path_0 ["fused", "unfused"] {
// CHECK-NEXT:   %[[A:.*]] = graph.exp %t
// CHECK-NEXT:   fork.yield %[[A]] : tensor<4xf32>
// CHECK-NEXT: } {
// CHECK-NEXT:   fork.yield %t : tensor<4xf32>
// CHECK-NEXT: } : tensor<4xf32>
// CHECK-NEXT: func.return %[[Y]]

// What the passes record on sites: the decision with its evidence and runner-up, the
// config and provenance, and a choice's paths (the calls of each option).
fork.site @softmax_1 "softmax" "n=4" attributes {decision = #fork.decision<oracle = "db", evidence = #evidence.db<rows = [3 : i64, 7 : i64], median_s = 2.5e-06 : f64, origin = "bench", measured = 2 : i64>, runner_up = #evidence.measured_runner_up<config = #fork.config<vec = 2>, median_s = 3.0e-06 : f64, row = 7 : i64>>, config = #fork.config<vec = 4, algo = "online">, provenance = #fork.provenance<vec = "db", algo = "pin">} {
}
// CHECK: fork.site @softmax_1 "softmax" "n=4" attributes {decision = #fork.decision<oracle = "db", evidence = #evidence.db<rows = [3 : i64, 7 : i64], median_s = 2.500000e-06 : f64, origin = "bench", measured = 2 : i64>, runner_up = #evidence.measured_runner_up<config = #fork.config<vec = 2>, median_s = 3.000000e-06 : f64, row = 7 : i64>>, config = #fork.config<vec = 4, algo = "online">, provenance = #fork.provenance<vec = "db", algo = "pin">} {

// Each built-in oracle's evidence is a typed record; an oracle of another package records
// its own as plain values.
fork.site @softmax_2 "softmax" "n=4" attributes {decision = #fork.decision<oracle = "prior", evidence = #evidence.prior<predicted_s = 1.0e-05 : f64, dataset = "ab12", configs_scored = 40 : i64>, runner_up = #evidence.predicted_runner_up<config = #fork.config<vec = 2>, predicted_s = 2.0e-05 : f64>>} {
}
// CHECK: #fork.decision<oracle = "prior", evidence = #evidence.prior<predicted_s = 1.000000e-05 : f64, dataset = "ab12", configs_scored = 40 : i64>, runner_up = #evidence.predicted_runner_up<config = #fork.config<vec = 2>, predicted_s = 2.000000e-05 : f64>>
fork.site @softmax_3 "softmax" "n=4" attributes {decision = #fork.decision<oracle = "golden", evidence = #evidence.golden<file = "emu.json", median_s = none>>} {
}
// CHECK: #fork.decision<oracle = "golden", evidence = #evidence.golden<file = "emu.json", median_s = none>>
fork.site @softmax_4 "softmax" "n=4" attributes {decision = #fork.decision<oracle = "target", evidence = #evidence.target<device_class = "gpu", options = #fork.config<vec = 4>>>} {
}
// CHECK: #fork.decision<oracle = "target", evidence = #evidence.target<device_class = "gpu", options = #fork.config<vec = 4>>>
fork.site @softmax_6 "softmax" "n=4" attributes {decision = #fork.decision<oracle = "pins", evidence = #evidence.pins<pins = #fork.config<vec = 4>>>} {
}
// CHECK: #fork.decision<oracle = "pins", evidence = #evidence.pins<pins = #fork.config<vec = 4>>>
fork.site @softmax_7 "softmax" "n=4" attributes {decision = #fork.decision<oracle = "fixed", evidence = #fork.recorded<record = {why = "handed in"}>>} {
}
// CHECK: #fork.decision<oracle = "fixed", evidence = #fork.recorded<record = {why = "handed in"}>>

// A decision with no runner-up (the declared default) prints none.
fork.site @softmax_5 "softmax" "n=8" attributes {decision = #fork.decision<oracle = "default", evidence = #evidence.default<declared = true, moved_by_constraints = []>>} {
}
// CHECK: fork.site @softmax_5 "softmax" "n=8" attributes {decision = #fork.decision<oracle = "default", evidence = #evidence.default<declared = true, moved_by_constraints = []>>} {

// A host call (the vendor library) has no kernel and no forks.
fork.site host_call @vendor_matmul_2 "vendor_matmul" "m=4" {
}
// CHECK: fork.site host_call @vendor_matmul_2 "vendor_matmul" "m=4" {

fork.site choice @matmul_path_3 "matmul_path" "m=4" attributes {config = #fork.config<matmul = "vendor">, paths = #fork.paths<kernel = [#fork.path_call<"softmax", "n=4", #fork.config<vec = 4, algo = "online">, [tensor<4xf32>], [tensor<4xf32>]>], vendor = [#fork.path_call<"vendor_matmul", "m=4", #fork.config<>, [tensor<4xf32>, tensor<4xf32>], [tensor<4xf32>]>]>} {
}
// CHECK: fork.site choice @matmul_path_3 "matmul_path" "m=4" attributes {config = #fork.config<matmul = "vendor">, paths = #fork.paths<kernel = [#fork.path_call<"softmax", "n=4", #fork.config<vec = 4, algo = "online">, [tensor<4xf32>], [tensor<4xf32>]>], vendor = [#fork.path_call<"vendor_matmul", "m=4", #fork.config<>, [tensor<4xf32>, tensor<4xf32>], [tensor<4xf32>]>]>} {

// The kind and the key are properties: the generic form spells them as attributes, the
// key a typed #fork.key whose text is the key's.
"fork.site"() <{sym_name = "generic_4", kind = #fork<site_kind host_call>, family = "vendor_matmul", key = #fork.key<"m=8,layout=nk,fn=(in0 * 2.0)">}> ({
^bb0:
}) : () -> ()
// CHECK: fork.site host_call @generic_4 "vendor_matmul" "m=8,layout=nk,fn=(in0 * 2.0)" {
