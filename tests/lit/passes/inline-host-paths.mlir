// RUN: emmy-opt %s -p inline-host-paths --split-input-file | filecheck %s

// The option the choice site's config names replaces the choice; the site keeps every
// option's calls, and the sites only the options not taken called are dropped.
fork.site @whole_0 "matmul" "m=8" attributes {config = #fork.config<vec = 4>} {
}
fork.site @parts_1 "matmul" "m=8,split=2" attributes {config = #fork.config<vec = 2>} {
}
fork.site @sum_2 "split_sum" "split=2" attributes {config = #fork.config<threads = 64>} {
}
fork.site host_call @vendor_3 "vendor_matmul" "m=8" {
}
fork.site @unused_4 "elementwise" "n=8" {
}
fork.site choice @matmul_path_5 "matmul_path" "m=8" attributes {config = #fork.config<matmul = "split2">} {
}
func.func @f(%x : tensor<8xf32>) -> tensor<8xf32> {
  %y = fork.alternatives @matmul_path_5 ["kernel", "split2", "vendor"] {
    %a = kernel.call @whole_0(%x) : (tensor<8xf32>) -> tensor<8xf32>
    fork.yield %a : tensor<8xf32>
  } {
    %p = kernel.call @parts_1(%x) : (tensor<8xf32>) -> tensor<2x8xf32>
    %s = kernel.call @sum_2(%p) : (tensor<2x8xf32>) -> tensor<8xf32>
    fork.yield %s : tensor<8xf32>
  } {
    %v = kernel.call @vendor_3(%x) : (tensor<8xf32>) -> tensor<8xf32>
    fork.yield %v : tensor<8xf32>
  } : tensor<8xf32>
  func.return %y : tensor<8xf32>
}
// CHECK-NOT:  @whole_0
// CHECK:      fork.site @parts_1 "matmul" "m=8,split=2"
// CHECK-NEXT: }
// CHECK-NEXT: fork.site @sum_2 "split_sum" "split=2"
// CHECK-NEXT: }
// A site no option called is no option's to drop.
// CHECK-NEXT: fork.site @unused_4 "elementwise" "n=8" {
// CHECK-NEXT: }
// CHECK-NEXT: fork.site choice @matmul_path_5 "matmul_path" "m=8" attributes {config = #fork.config<matmul = "split2">, paths = #fork.paths<
// CHECK-SAME:   kernel = [#fork.path_call<"matmul", "m=8", #fork.config<vec = 4>, [tensor<8xf32>], [tensor<8xf32>]>],
// CHECK-SAME:   split2 = [#fork.path_call<"matmul", "m=8,split=2", #fork.config<vec = 2>, [tensor<8xf32>], [tensor<2x8xf32>]>, #fork.path_call<"split_sum", "split=2", #fork.config<threads = 64>, [tensor<2x8xf32>], [tensor<8xf32>]>],
// CHECK-SAME:   vendor = [#fork.path_call<"vendor_matmul", "m=8", #fork.config<>, [tensor<8xf32>], [tensor<8xf32>]>]>} {
// CHECK-NEXT: }
// CHECK-NEXT: func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
// CHECK-NEXT:   %p = kernel.call @parts_1(%x) : (tensor<8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:   %s = kernel.call @sum_2(%p) : (tensor<2x8xf32>) -> tensor<8xf32>
// CHECK-NEXT:   func.return %s : tensor<8xf32>
// CHECK-NEXT: }

// -----

// Two choices of one site (two layers of one key) take the same option; the site's paths
// are recorded once. A kernel-level alternatives is specialize-forks' to take.
fork.site @a_0 "attention" "n=4" attributes {config = #fork.config<lanes = 8>} {
  %c = arith.constant 1 : i32
  kernel.func @a_0() {
    fork.alternatives %c ["x", "y"] {
    } {
    }
    kernel.return
  }
}
fork.site @m_1 "matmul" "n=4" attributes {config = #fork.config<vec = 1>} {
}
fork.site choice @path_2 "attention_path" "n=4" attributes {config = #fork.config<path = "fused">} {
}
func.func @layers(%x : tensor<4xf32>) -> tensor<4xf32> {
  %y = fork.alternatives @path_2 ["fused", "unfused"] {
    %a = kernel.call @a_0(%x) : (tensor<4xf32>) -> tensor<4xf32>
    fork.yield %a : tensor<4xf32>
  } {
    %m = kernel.call @m_1(%x) : (tensor<4xf32>) -> tensor<4xf32>
    fork.yield %m : tensor<4xf32>
  } : tensor<4xf32>
  %z = fork.alternatives @path_2 ["fused", "unfused"] {
    %b = kernel.call @a_0(%y) : (tensor<4xf32>) -> tensor<4xf32>
    fork.yield %b : tensor<4xf32>
  } {
    %n = kernel.call @m_1(%y) : (tensor<4xf32>) -> tensor<4xf32>
    fork.yield %n : tensor<4xf32>
  } : tensor<4xf32>
  func.return %z : tensor<4xf32>
}
// CHECK:      fork.site @a_0 "attention" "n=4"
// CHECK:        fork.alternatives %{{.*}} ["x", "y"]
// CHECK-NOT:  fork.site @m_1
// CHECK:      fork.site choice @path_2 "attention_path" "n=4" attributes {config = #fork.config<path = "fused">, paths = #fork.paths<fused = [#fork.path_call<"attention", {{.*}}>], unfused = [#fork.path_call<"matmul", {{.*}}>]>} {
// CHECK:      func.func @layers(%x: tensor<4xf32>) -> tensor<4xf32> {
// CHECK-NEXT:   %a = kernel.call @a_0(%x)
// CHECK-NEXT:   %b = kernel.call @a_0(%a)
// CHECK-NEXT:   func.return %b : tensor<4xf32>
