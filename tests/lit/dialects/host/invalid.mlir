// RUN: emmy-opt %s --split-input-file --verify-diagnostics | filecheck %s

builtin.module attributes {buffer = #host.buffer<tensor = "in0", shape = [4], dtype = "f31">} {
}
// CHECK: #host.buffer in0: 'f31' is no storage type

// -----

builtin.module attributes {host_plan = #host.plan<inputs = [], constants = [], outputs = [], temporaries = [], calls = [], fallbacks = {fallback_0 = "copy"}, mutated_inputs = [], arena = {}, arena_bytes = 0>} {
}
// CHECK: #host.plan: fallbacks are #host.fallback records by name

// -----

builtin.module attributes {host_plan = #host.plan<inputs = [], constants = [], outputs = [], temporaries = [], calls = [], fallbacks = {}, mutated_inputs = [], arena = {t0 = "low"}, arena_bytes = 0>} {
}
// CHECK: #host.plan: the arena is an offset by temporary's name
