// RUN: emmy-opt %s --split-input-file --parsing-diagnostics | filecheck %s

// A site's kind is one of kernel, choice and host_call.
fork.site bogus @s "f" "n=1" {
}
// CHECK: unknown site kind 'bogus' (kinds: kernel, choice, host_call)

// -----

"fork.site"() <{sym_name = "s", kind = #fork<site_kind bogus>, family = "f", key = #fork.key<"n=1">}> ({
^bb0:
}) : () -> ()
// CHECK: Expected `kernel`, `choice`, or `host_call`

// -----

// A record's values are parsed as their types: a config holds integers and symbols, a
// decision names its fields, a fork's source is a string.
fork.site @k "softmax" "n=4" attributes {config = #fork.config<vec = 4.0>} {
}
// CHECK: Expected integer literal

// -----

fork.site @k "softmax" "n=4" attributes {decision = #fork.decision<evidence = #fork.recorded<record = {}>>} {
}
// CHECK: Expected 'oracle'

// -----

fork.site @k "f" "n=1" {
  %a = fork.knob "algo" ["a", "b"] default "a" = "b" by {oracle = "pin"}
}
// CHECK: string literal expected

// -----

// A site's problem key is names and values, each name once.
fork.site @s "f" "n=1,oops" {
}
// CHECK: malformed problem key 'n=1,oops': 'oops' is not name=value

// -----

"fork.site"() <{sym_name = "s", family = "f", key = #fork.key<"n=1,T=f32,n=2">}> ({
^bb0:
}) : () -> ()
// CHECK: problem key n=1,T=f32,n=2: n given more than once

// -----

// A knob's constraint is an expression of the kernel language, parsed with the IR.
fork.site @s "f" "n=4" {
  %vec = fork.knob "vec" [1, 2] default 1 where "n % % vec"
}
// CHECK: <fork constraint>:1:5: unexpected '%'; expected one of:

// -----

"fork.site"() <{sym_name = "s", family = "f", key = #fork.key<"n=4">}> ({
^bb0:
  %vec = "fork.knob"() <{name = "vec", options = [1, 2], default = 1, constraint = #fork.constraint<"n ==">}> : () -> i32
}) : () -> ()
// CHECK: <fork constraint>:1:3: unexpected end of file
