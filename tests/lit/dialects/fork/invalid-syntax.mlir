// RUN: emmy-opt %s --split-input-file --parsing-diagnostics | filecheck %s

// A site's kind is one of kernel, choice and host_call.
fork.site bogus @s "f" "n=1" {
}
// CHECK: unknown site kind 'bogus' (kinds: kernel, choice, host_call)

// -----

"fork.site"() <{sym_name = "s", kind = #fork<site_kind bogus>, family = "f", key = "n=1"}> ({
^bb0:
}) : () -> ()
// CHECK: Expected `kernel`, `choice`, or `host_call`
