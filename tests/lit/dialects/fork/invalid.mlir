// RUN: emmy-opt %s --split-input-file --verify-diagnostics | filecheck %s

fork.site @s "f" "n=1" {
  %a = fork.knob "vec" [1, 2] default 4
}
// CHECK: default 4 of fork 'vec' is not one of its options [1, 2]

// -----

fork.site @s "f" "n=1" {
  %a = fork.knob "vec" [1, 2, 2] default 1
}
// CHECK: fork 'vec' lists an option twice

// -----

fork.site @s "f" "n=1" {
  %a = fork.knob "vec" [1, "a"] default 1
}
// CHECK: fork 'vec' mixes integer and symbol options

// -----

fork.site @s "f" "n=1" {
  %a = fork.knob "vec" [1, 2] default 1 = 8
}
// CHECK: value 8 of fork 'vec' is not one of its options [1, 2]

// -----

fork.site @s "f" "n=1" {
  %a = fork.knob "vec" [1, 2] default 1
  %b = fork.knob "vec" [1, 2] default 2
}
// CHECK: fork.site has two forks named 'vec'

// -----

fork.site @s "f" "n=1" {
  %a = fork.knob "algo" ["x", "y"] default "x"
  kernel.func @k() {
    fork.alternatives %a ["x"] {
    } {
    }
    kernel.return
  }
}
// CHECK: fork.alternatives names 1 options but has 2 regions

// -----

fork.site @s "f" "n=1" {
  %a = fork.knob "algo" ["x", "y"] default "x"
  kernel.func @k() {
    fork.alternatives %a ["y", "x"] {
    } {
    }
    kernel.return
  }
}
// CHECK: fork.alternatives options ['y', 'x'] differ from fork 'algo' options ['x', 'y']

// -----

fork.site @s "f" "n=1" {
  %a = fork.knob "vec" [] default 1
}
// CHECK: fork 'vec' has no options

// -----

fork.site choice @p "attention_path" "n=4" {
  %path = fork.knob "path" ["a", "b"] default "a"
}
func.func @f(%x : tensor<4xf32>) -> tensor<4xf32> {
  %y = fork.alternatives @p ["a", "b"] {
    fork.yield %x : tensor<4xf32>
  } {
  } : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: fork.alternatives option 'b' yields 0 value(s) of types []; the op has results of types [TensorType(

// -----

func.func @f(%x : tensor<4xf32>) {
  fork.yield %x : tensor<4xf32>
}
// CHECK: 'fork.yield' expects parent op 'fork.alternatives'

// -----

// A host-level choice names a site that must exist, be a site, be a choice, and offer its
// options.
func.func @f(%x : tensor<4xf32>) -> tensor<4xf32> {
  %y = fork.alternatives @nowhere ["a", "b"] {
    fork.yield %x : tensor<4xf32>
  } {
    fork.yield %x : tensor<4xf32>
  } : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: fork.alternatives names @nowhere, which is not defined

// -----

func.func @g() {
  func.return
}
func.func @f(%x : tensor<4xf32>) -> tensor<4xf32> {
  %y = fork.alternatives @g ["a", "b"] {
    fork.yield %x : tensor<4xf32>
  } {
    fork.yield %x : tensor<4xf32>
  } : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: fork.alternatives names @g, which is a func.func, not a fork.site

// -----

fork.site @k "softmax" "n=4" {
  %path = fork.knob "path" ["a", "b"] default "a"
}
func.func @f(%x : tensor<4xf32>) -> tensor<4xf32> {
  %y = fork.alternatives @k ["a", "b"] {
    fork.yield %x : tensor<4xf32>
  } {
    fork.yield %x : tensor<4xf32>
  } : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: fork.alternatives names @k, a kernel site, not a choice site

// -----

fork.site choice @p "attention_path" "n=4" {
  %path = fork.knob "path" ["fused", "unfused"] default "fused"
}
func.func @f(%x : tensor<4xf32>) -> tensor<4xf32> {
  %y = fork.alternatives @p ["unfused", "fused"] {
    fork.yield %x : tensor<4xf32>
  } {
    fork.yield %x : tensor<4xf32>
  } : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: fork.alternatives options ['unfused', 'fused'] differ from fork 'path' options ['fused', 'unfused'] of @p

// -----

// What a site may hold follows from its kind.
fork.site choice @c "attention_path" "n=4" {
  kernel.func @c() {
    kernel.return
  }
}
// CHECK: fork.site @c is a choice site, which holds no kernel, but it holds kernel.func

// -----

fork.site choice @c "matmul_path" "n=4" {
  %a = fork.knob "a" [1, 2] default 1
  %b = fork.knob "b" [1, 2] default 1
}
// CHECK: fork.site @c is a choice site, of one fork, but it has ['a', 'b']

// -----

fork.site host_call @v "vendor_matmul" "n=4" {
  %a = fork.knob "a" [1, 2] default 1
}
// CHECK: fork.site @v is a host_call site, which has no forks: ['a']

// -----

fork.site @k "softmax" "n=4" attributes {paths = #fork.paths<a = []>} {
}
// CHECK: fork.site @k has paths, but only a choice site has options

// -----

// What the passes record are typed attributes, each checked as it is built.
fork.site @k "softmax" "n=4" attributes {config = {vec = 4 : i64}} {
}
// CHECK: {vec = 4 : i64} should be of base attribute fork.config

// -----

fork.site @k "softmax" "n=4" attributes {config = #fork.config<vec = 4, vec = 2>} {
}
// CHECK: #fork.config names fork 'vec' twice

// -----

fork.site @k "softmax" "n=4" attributes {provenance = #fork.provenance<vec = "db", vec = "pin">} {
}
// CHECK: #fork.provenance names fork 'vec' twice

// -----

fork.site @k "softmax" "n=4" attributes {decision = #fork.decision<oracle = "", evidence = #fork.recorded<record = {}>>} {
}
// CHECK: #fork.decision names no oracle

// -----

fork.site @k "softmax" "n=4" attributes {decision = #fork.decision<oracle = "db", evidence = "{\22rows\22: [3]}">} {
}
// CHECK: parameter 'evidence' does not verify:

// -----

fork.site @k "softmax" "n=4" attributes {decision = #fork.decision<oracle = "db", evidence = {rows = [3 : i64]}>} {
}
// CHECK: parameter 'evidence' does not verify:

// -----

fork.site @k "softmax" "n=4" attributes {decision = #fork.decision<oracle = "x", evidence = #fork.recorded<record = {rows = [3 : i32]}>>} {
}
// CHECK: #fork.recorded holds 3 : i32, which is not a recorded value (none, a bool, an i64, an f64, a string, a list or a dict of them)

// -----

fork.site @k "softmax" "n=4" attributes {decision = #fork.decision<oracle = "x", evidence = #fork.recorded<record = {}>, runner_up = #fork.recorded<record = {config = @k}>>} {
}
// CHECK: #fork.recorded holds @k, which is not a recorded value

// -----

fork.site choice @c "matmul_path" "n=4" attributes {paths = #fork.paths<kernel = [], kernel = []>} {
}
// CHECK: #fork.paths names option 'kernel' twice

// -----

fork.site choice @c "matmul_path" "n=4" attributes {paths = #fork.paths<kernel = ["softmax"]>} {
}
// CHECK: parameter 'calls' does not verify:

// -----

// The records of a site agree with one another.
fork.site @k "softmax" "n=4" attributes {config = #fork.config<vec = 4>, provenance = #fork.provenance<threads = "db">} {
}
// CHECK: provenance of fork.site @k names forks ['threads'], its config ['vec']

// -----

fork.site choice @c "matmul_path" "n=4" attributes {config = #fork.config<matmul = "split2">, paths = #fork.paths<kernel = [], vendor = []>} {
}
// CHECK: config of fork.site @c picks matmul = 'split2', which is not one of its paths ['kernel', 'vendor']
