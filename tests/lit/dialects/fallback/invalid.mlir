// RUN: emmy-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @operand(%x : tensor<4xf32>) -> tensor<4xf32> {
  %y = fallback.call "aten.sin.default"(%x) {arguments = [#fallback.tensor<1, [4], [1], 0, "float32">], kwargs = {}, reason = "r", source = ""} : (tensor<4xf32>) -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: fallback.call aten.sin.default reads operand 1 of 1

// -----

func.func @target(%x : tensor<4xf32>) -> tensor<4xf32> {
  %y = fallback.call "sin"(%x) {arguments = [], kwargs = {}, reason = "r", source = ""} : (tensor<4xf32>) -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: fallback.call sin: the target must be namespace.op.overload, as torch.ops names it

// -----

func.func @strides(%x : tensor<4xf32>) -> tensor<4xf32> {
  %y = fallback.call "aten.sin.default"(%x) {arguments = [#fallback.tensor<0, [4], [1, 1], 0, "float32">], kwargs = {}, reason = "r", source = ""} : (tensor<4xf32>) -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: fallback.call aten.sin.default: #fallback.tensor needs one stride per dim

// -----

func.func @enum(%x : tensor<4xf32>) -> tensor<4xf32> {
  %y = fallback.call "aten.sin.default"(%x) {arguments = [#fallback.enum<"colour", "red">], kwargs = {}, reason = "r", source = ""} : (tensor<4xf32>) -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: fallback.call aten.sin.default: #fallback.enum kind must be one of dtype, layout, memory_format, device, not 'colour'

// -----

func.func @extent(%x : tensor<4xf32>) -> tensor<4xf32> {
  %y = fallback.call "aten.sin.default"(%x) {arguments = [#fallback.tensor<0, [4], [2], 0, "float32">], kwargs = {}, reason = "r", source = ""} : (tensor<4xf32>) -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: fallback.call aten.sin.default reads element 6 of operand 0
