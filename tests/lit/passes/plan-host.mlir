// RUN: emmy-opt %s -p 'lower-graph,resolve-forks{db="none"},specialize-forks,inline-host-paths,plan-host{constants="w"}' | filecheck %s

// The launch plan of @main: its input, the constant named by the option, the softmax
// site's one call (its prologue and epilogue fused), its result an output of its own.
func.func @main(%x : tensor<4x8xf32>, %w : tensor<8xf32>) -> tensor<4x8xf32> {
  %e = graph.exp %x : tensor<4x8xf32> -> tensor<4x8xf32>
  %n = graph.softmax %e {dim = 1 : i64} : tensor<4x8xf32> -> tensor<4x8xf32>
  %y = graph.mul %n, %w : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
// CHECK: builtin.module attributes {golden_imports = [], host_plan = #host.plan<inputs = [#host.buffer<tensor = "in0", shape = [4 : i64, 8 : i64], dtype = "f32">], constants = [#host.buffer<tensor = "w", shape = [8 : i64], dtype = "f32">], outputs = [#host.buffer<tensor = "t0", shape = [4 : i64, 8 : i64], dtype = "f32">], temporaries = [], calls = [#host.call<kernel = "softmax_0", buffers = ["in0", "w", "t0"]>], fallbacks = {}, mutated_inputs = [], arena = {}, arena_bytes = 0 : i64>} {
