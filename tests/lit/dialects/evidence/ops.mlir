// RUN: emmy-opt %s | emmy-opt | filecheck %s

// Each built-in oracle's record, and the runner-ups the database and the prior weigh.
builtin.module attributes {
  pins = #evidence.pins<pins = #fork.config<vec = 4, algo = "online">>,
  golden = #evidence.golden<file = "recipes/gpt2/golden/emu.json", median_s = 2.5e-06 : f64>,
  unmeasured = #evidence.golden<file = "emu.json", median_s = none>,
  db = #evidence.db<rows = [3, 7], median_s = 2.5e-06 : f64, origin = "bench", measured = 2>,
  target = #evidence.target<device_class = "gpu", options = #fork.config<matmul = "vendor">>,
  declared = #evidence.default<declared = true, moved_by_constraints = []>,
  moved = #evidence.default<declared = false, moved_by_constraints = ["vec"]>,
  prior = #evidence.prior<predicted_s = 1.0e-05 : f64, dataset = "ab12", configs_scored = 40>,
  second_row = #evidence.measured_runner_up<config = #fork.config<vec = 2>, median_s = 3.0e-06 : f64, row = 7>,
  second_guess = #evidence.predicted_runner_up<config = #fork.config<vec = 2>, predicted_s = 2.0e-05 : f64>
} {
}
// CHECK: pins = #evidence.pins<pins = #fork.config<vec = 4, algo = "online">>
// CHECK-SAME: golden = #evidence.golden<file = "recipes/gpt2/golden/emu.json", median_s = 2.500000e-06 : f64>
// CHECK-SAME: unmeasured = #evidence.golden<file = "emu.json", median_s = none>
// CHECK-SAME: db = #evidence.db<rows = [3 : i64, 7 : i64], median_s = 2.500000e-06 : f64, origin = "bench", measured = 2 : i64>
// CHECK-SAME: target = #evidence.target<device_class = "gpu", options = #fork.config<matmul = "vendor">>
// CHECK-SAME: declared = #evidence.default<declared = true, moved_by_constraints = []>
// CHECK-SAME: moved = #evidence.default<declared = false, moved_by_constraints = ["vec"]>
// CHECK-SAME: prior = #evidence.prior<predicted_s = 1.000000e-05 : f64, dataset = "ab12", configs_scored = 40 : i64>
// CHECK-SAME: second_row = #evidence.measured_runner_up<config = #fork.config<vec = 2>, median_s = 3.000000e-06 : f64, row = 7 : i64>
// CHECK-SAME: second_guess = #evidence.predicted_runner_up<config = #fork.config<vec = 2>, predicted_s = 2.000000e-05 : f64>
