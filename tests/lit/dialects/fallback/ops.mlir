// RUN: emmy-opt %s | emmy-opt | filecheck %s

func.func @conv(%x : tensor<2x3x8x8xf32>, %w : tensor<4x3x3x3xf32>) -> tensor<2x4x6x6xf32> {
  %y = fallback.call "aten.convolution.default"(%x, %w) {arguments = [#fallback.tensor<0, [2, 3, 8, 8], [192, 64, 8, 1], 0, "float32">, #fallback.tensor<1, [4, 3, 3, 3], [27, 9, 3, 1], 0, "float32">, #fallback.none, [1, 1], [0, 0], [1, 1], false, [0, 0], 1], kwargs = {}, reason = "unsupported op aten.convolution.default", source = "model.py:12"} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x6x6xf32>
  func.return %y : tensor<2x4x6x6xf32>
}
// CHECK:      %y = fallback.call "aten.convolution.default"(%x, %w) {arguments = [#fallback.tensor<0, [2, 3, 8, 8], [192, 64, 8, 1], 0, "float32">, #fallback.tensor<1, [4, 3, 3, 3], [27, 9, 3, 1], 0, "float32">, #fallback.none, [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64], kwargs = {}, reason = "unsupported op aten.convolution.default", source = "model.py:12"} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x6x6xf32>

func.func @cast(%x : tensor<2x8xi64>) -> tensor<2x8xf16> {
  %y = fallback.call "aten._to_copy.default"(%x) {arguments = [#fallback.tensor<0, [8, 2], [1, 8], 0, "int64">], kwargs = {dtype = #fallback.enum<"dtype", "float16">}, reason = "r", source = ""} : (tensor<2x8xi64>) -> tensor<2x8xf16>
  func.return %y : tensor<2x8xf16>
}
// CHECK: kwargs = {dtype = #fallback.enum<"dtype", "float16">}
