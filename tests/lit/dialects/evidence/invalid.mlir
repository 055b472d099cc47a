// RUN: emmy-opt %s --split-input-file --verify-diagnostics | filecheck %s

builtin.module attributes {db = #evidence.db<rows = [3], median_s = "fast", origin = "bench", measured = 1>} {
}
// CHECK: parameter 'median_s' does not verify:

// -----

builtin.module attributes {pins = #evidence.pins<pins = {vec = 4}>} {
}
// CHECK: parameter 'pins' does not verify:
