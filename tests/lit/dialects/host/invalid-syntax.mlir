// RUN: emmy-opt %s --split-input-file --parsing-diagnostics | filecheck %s

// A record names every field, in order.
builtin.module attributes {call = #host.call<kernel = "softmax_0">} {
}
// CHECK: Expected ','

// -----

builtin.module attributes {call = #host.call<buffers = ["in0"], kernel = "softmax_0">} {
}
// CHECK: Expected 'kernel'
