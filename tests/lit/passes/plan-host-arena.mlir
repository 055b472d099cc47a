// RUN: emmy-opt %s -p 'lower-graph,resolve-forks{db="none"},specialize-forks,inline-host-paths,plan-host' | filecheck %s

// Temporaries share the arena where their lifetimes do not overlap; a reshape is another
// name for its input's buffer.
func.func @chain(%x : tensor<4x8xf32>) -> tensor<32xf32> {
  %a = graph.softmax %x {dim = 1 : i64} : tensor<4x8xf32> -> tensor<4x8xf32>
  %b = graph.softmax %a {dim = 1 : i64} : tensor<4x8xf32> -> tensor<4x8xf32>
  %c = graph.softmax %b {dim = 1 : i64} : tensor<4x8xf32> -> tensor<4x8xf32>
  %r = graph.reshape %c : tensor<4x8xf32> -> tensor<32xf32>
  func.return %r : tensor<32xf32>
}
// CHECK: host_plan = #host.plan<inputs = [#host.buffer<tensor = "in0", shape = [4 : i64, 8 : i64], dtype = "f32">], constants = [], outputs = [#host.buffer<tensor = "t2", shape = [32 : i64], dtype = "f32">], temporaries = [#host.buffer<tensor = "t0", shape = [4 : i64, 8 : i64], dtype = "f32">, #host.buffer<tensor = "t1", shape = [4 : i64, 8 : i64], dtype = "f32">], calls = [#host.call<kernel = "softmax_0", buffers = ["in0", "t0"]>, #host.call<kernel = "softmax_0", buffers = ["t0", "t1"]>, #host.call<kernel = "softmax_0", buffers = ["t1", "t2"]>], fallbacks = {}, mutated_inputs = [], arena = {t0 = 0 : i64, t1 = 256 : i64}, arena_bytes = 512 : i64>
