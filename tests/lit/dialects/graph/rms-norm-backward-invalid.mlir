// RUN: emmy-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @gradient(%g : tensor<4x8xf16>, %x : tensor<4x8xf32>, %w : tensor<8xf32>) -> tensor<4x8xf32> {
  %dx, %rstd = graph.rms_norm_backward %g, %x, %w {eps = 1.0e-06 : f64} : tensor<4x8xf16>, tensor<4x8xf32>, tensor<8xf32> -> (tensor<4x8xf32>, tensor<4xf32>)
  func.return %dx : tensor<4x8xf32>
}
// CHECK: graph.rms_norm_backward's gradient, input and result must share one type

// -----

func.func @weight(%g : tensor<4x8xf32>, %x : tensor<4x8xf32>, %w : tensor<4xf32>) -> tensor<4x8xf32> {
  %dx, %rstd = graph.rms_norm_backward %g, %x, %w {eps = 1.0e-06 : f64} : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32> -> (tensor<4x8xf32>, tensor<4xf32>)
  func.return %dx : tensor<4x8xf32>
}
// CHECK: graph.rms_norm_backward's weight must be one f32 a column

// -----

func.func @rstd(%g : tensor<4x8xbf16>, %x : tensor<4x8xbf16>, %w : tensor<8xbf16>) -> tensor<4x8xbf16> {
  %dx, %rstd = graph.rms_norm_backward %g, %x, %w {eps = 1.0e-06 : f64} : tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<8xbf16> -> (tensor<4x8xbf16>, tensor<4xbf16>)
  func.return %dx : tensor<4x8xbf16>
}
// CHECK: graph.rms_norm_backward's rstd must be tensor<4xf32>, one f32 a row
