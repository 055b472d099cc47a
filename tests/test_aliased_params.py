"""`__restrict__` only where no launch aliases the pointers: a kernel whose call site binds
one buffer's bytes to two parameters, one of them written (a KV cache updated in place), is
emitted without `__restrict__` on those two; every other parameter, and every kernel whose
launches bind distinct bytes, keeps it."""

from __future__ import annotations

import re

import pytest
from xdsl.dialects.builtin import ArrayAttr, StringAttr, f32
from xdsl.utils.exceptions import VerifyException

from emmy.base.compile_options import CompileOptions, parse_golden
from emmy.compiler import compile_graph
from emmy.dialects import kernel
from emmy.frontend.cache import parse_graph
from emmy.frontend.recipes import decode_case, decode_graph_text, recipe_dir
from emmy.passes.plan_host import Span, overlapping_params
from emmy.program import ARENA, Call, Program

# a cache's update at one position, written over the cache when the graph says it mutates
# it, and a `cat` of a tensor with itself: one buffer bound to two read-only parameters
GRAPH = """
func.func @main(%k : tensor<2x2x9x16xf32>, %pos : tensor<1xi64>, %new : tensor<2x2x1x16xf32>, %y : tensor<4x8xf32>) -> (tensor<2x2x9x16xf32>, tensor<4x16xf32>) {attributes} {
  %a = graph.index_copy %k[%pos], %new {dim = 2 : i64} : tensor<2x2x9x16xf32>, tensor<1xi64>, tensor<2x2x1x16xf32> -> tensor<2x2x9x16xf32>
  %c = graph.cat %y, %y {dim = 1 : i64} : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x16xf32>
  func.return %a, %c : tensor<2x2x9x16xf32>, tensor<4x16xf32>
}
"""


def signatures(program: Program) -> dict[str, dict[str, bool]]:
    """Per kernel of the source: each parameter's name -> whether it is `__restrict__`."""
    kernels = {}
    for name, params in re.findall(
        r"EMMY_KERNEL void __launch_bounds__\(.*?\) (\w+)\((.*)\)", program.source
    ):
        kernels[name] = {param.split()[-1]: "__restrict__" in param for param in params.split(", ")}
    assert set(kernels) == set(program.kernels)
    return kernels


def compiled(text: str, constants: list[str] | None = None, golden: str = "") -> Program:
    module = parse_graph(text, "<test>")
    options = CompileOptions(db=None, golden=parse_golden(golden))
    return compile_graph(module, options, constants=constants or [], compile_kernels=False)


def families(program: Program) -> dict[str, str]:
    return {name: info.site.family for name, info in program.kernels.items()}


def test_a_kernel_writing_over_its_input_drops_restrict_on_that_pair_only() -> None:
    program = compiled(GRAPH.replace("{attributes}", "attributes {mutated_inputs = [0 : i64]}"))
    by_family = {families(program)[name]: params for name, params in signatures(program).items()}
    assert by_family["index_copy"] == {"p_x": False, "p_index": True, "p_src": True, "p_y": False}
    # the cat's two inputs are one buffer, but neither is written through
    assert all(by_family["cat"].values())
    assert ' "x" aliased' in program.ir and ' "y" aliased' in program.ir


def test_kernels_on_distinct_buffers_keep_restrict() -> None:
    program = compiled(GRAPH.replace("{attributes}", ""))
    assert all(all(params.values()) for params in signatures(program).values())
    assert " aliased" not in program.ir


@pytest.mark.parametrize("recipe", ["gpt2", "llama"])
def test_a_decode_step_updates_its_caches_without_restrict(recipe: str) -> None:
    case = decode_case(recipe, "tiny", "f32", 1)
    text, constants = decode_graph_text(case)
    program = compiled(text, constants, str(recipe_dir(recipe)))
    kernel_families = families(program)
    for name, params in signatures(program).items():
        if kernel_families[name] != "index_copy":
            assert all(params.values()), f"{name} ({kernel_families[name]}): {params}"
            continue
        # the cache is the kernel's input and its output: x and y name one buffer
        assert params == {"p_x": False, "p_index": True, "p_src": True, "p_y": False}
    updates = [c for c in program.calls if kernel_families.get(c.kernel) == "index_copy"]
    assert updates and all(c.buffers[0] == c.buffers[-1] in program.mutated_inputs for c in updates)


def test_temporaries_alias_where_their_bytes_in_the_arena_overlap() -> None:
    spans = {
        "a": Span(ARENA, 0, 256),
        "b": Span(ARENA, 256, 512),  # right after a: no byte shared
        "c": Span(ARENA, 128, 384),  # over the end of a and the start of b
        "in0": Span("in0", 0, 256),  # a buffer of its own, at offset 0 too
    }
    calls = [Call("k", ("a", "b", "in0")), Call("k", ("c", "b", "a")), Call("m", ("in0", "in0"))]
    assert overlapping_params(calls, spans) == {"k": {(0, 1), (0, 2)}, "m": {(0, 1)}}


def test_an_aliased_name_must_be_a_parameter() -> None:
    func = kernel.FuncOp("k", ["x", "y"], [kernel.PtrType(f32)] * 2)
    func.body.block.add_op(kernel.ReturnOp())
    func.set_aliased(["y", "z"])
    assert func.aliased_names() == {"y"}
    func.aliased = ArrayAttr([StringAttr("z")])
    with pytest.raises(VerifyException, match="marks 'z' aliased, not a parameter"):
        func.verify()
