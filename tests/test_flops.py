"""FLOPs as coverage counts them (emmy.frontend.torch_fallback): torch's flop counter where it has
a formula, emmy's formulas for the ops it misses (einsum, grouped matmuls, transformers'
grouped matmul op, attention and convolutions as torch.export keeps them, reductions), one
per output element for elementwise ops, each of those recorded and shown by --explain."""

from __future__ import annotations

import torch
from torch import fx, nn

import emmy
from emmy.cli import explain_lines
from emmy.frontend import packages
from emmy.frontend.torch_fallback import Coverage, elementwise, flops
from emmy.runtime.emu import EmuDevice

aten = torch.ops.aten


def meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(*shape, device="meta", dtype=dtype)


def node(target: torch._ops.OpOverload, *args: object) -> fx.Node:
    """A graph node calling `target` on `args`, its tensors placeholders holding them as
    their values (as torch.export's nodes do), its own value computed on meta tensors."""
    graph = fx.Graph()

    def lift(arg: object) -> object:
        if isinstance(arg, torch.Tensor):
            placeholder = graph.placeholder(f"x{len(graph.nodes)}")
            placeholder.meta["val"] = arg
            return placeholder
        if isinstance(arg, (list, tuple)):
            return type(arg)(lift(item) for item in arg)
        return arg

    call = graph.call_function(target, tuple(lift(arg) for arg in args))
    call.meta["val"] = target(*args)
    return call


def counted(call: fx.Node) -> Coverage:
    coverage = Coverage()
    coverage.count(call, "fallback")
    return coverage


def test_einsum_contracts_every_index_of_its_equation():
    scores = node(aten.einsum.default, "bhqd,bhkd->bhqk", [meta(2, 4, 8, 16), meta(2, 4, 6, 16)])
    assert flops(scores) == 2 * (2 * 4 * 8 * 6 * 16)
    # broadcast `...` dims count once each, at their broadcast size
    batched = node(aten.einsum.default, "...ij,...jk->...ik", [meta(3, 2, 5), meta(1, 5, 7)])
    assert flops(batched) == 2 * (3 * 2 * 5 * 7)
    # one operand: one per term (a sum over j)
    assert flops(node(aten.einsum.default, "ij->i", [meta(4, 9)])) == 4 * 9
    assert not counted(scores).per_element


def test_grouped_matmuls_count_each_row_against_one_group():
    offsets = torch.tensor([4, 8, 12, 16], dtype=torch.int32, device="meta")
    tokens, experts = meta(16, 32, dtype=torch.bfloat16), meta(4, 32, 64, dtype=torch.bfloat16)
    assert flops(node(aten._grouped_mm.default, tokens, experts, offsets)) == 2 * 16 * 32 * 64
    # two 2-D operands split k into groups: [16, 32] · [32, 64] → [4, 16, 64]
    split_k = node(aten._grouped_mm.default, tokens, meta(32, 64, dtype=torch.bfloat16), offsets)
    assert flops(split_k) == 2 * 16 * 32 * 64


def test_transformers_grouped_mm_fallback_counts_its_matmuls():
    packages.transformers()
    from transformers.integrations import moe  # noqa: F401 - defines the op

    offsets = torch.tensor([3, 3, 7, 10], device="meta")
    call = node(
        torch.ops.transformers.grouped_mm_fallback.default, meta(10, 16), meta(4, 16, 8), offsets
    )
    assert flops(call) == 2 * 10 * 16 * 8
    assert not counted(call).per_element


def test_convolutions_count_each_output_against_one_filter():
    image, weight = meta(2, 3, 8, 8), meta(8, 3, 3, 3)
    expected = 2 * (2 * 8 * 8 * 8) * (3 * 3 * 3)
    padded = ([1, 1], [1, 1], [1, 1])
    assert flops(node(aten.conv2d.default, image, weight, None, *padded, 1)) == expected
    aten_conv = node(aten.convolution.default, image, weight, None, *padded, False, [0, 0], 1)
    assert flops(aten_conv) == expected  # torch's own formula
    grouped = node(aten.conv2d.default, meta(2, 8, 8, 8), meta(8, 2, 3, 3), None, *padded, 4)
    assert flops(grouped) == 2 * (2 * 8 * 8 * 8) * (2 * 3 * 3)


def test_attention_counts_both_products():
    query, key, value = meta(2, 4, 8, 16), meta(2, 4, 6, 16), meta(2, 4, 6, 32)
    expected = 2 * (2 * 4 * 8 * 6) * (16 + 32)
    assert flops(node(aten.scaled_dot_product_attention.default, query, key, value)) == expected
    cpu = node(
        aten._scaled_dot_product_flash_attention_for_cpu.default, query, key, value[..., :16]
    )
    assert flops(cpu) == 4 * (2 * 4 * 8 * 6) * 16


def test_a_reduction_or_a_pooling_counts_the_elements_it_reads():
    assert flops(node(aten.sum.dim_IntList, meta(4, 32), [1])) == 4 * 32
    assert flops(node(aten._softmax.default, meta(4, 32), -1, False)) == 4 * 32
    assert flops(node(aten.max_pool2d.default, meta(2, 3, 8, 8), [2, 2])) == 2 * 3 * 8 * 8


def test_elementwise_ops_count_one_per_element_and_are_listed():
    call = node(aten.add.Tensor, meta(2, 3), meta(3))
    coverage = counted(call)
    assert coverage.flops == 6 and coverage.per_element == ["aten.add.Tensor"]
    assert elementwise("aten.add.Tensor") and not elementwise("aten.topk.default")
    # an op with no formula that is not elementwise is listed too
    topk = counted(node(aten.topk.default, meta(4, 8), 2))
    assert topk.per_element == ["aten.topk.default"] and topk.flops == 2 * 4 * 2


def test_views_copies_and_gathers_compute_nothing():
    table, ids = meta(16, 8), torch.zeros(2, 3, dtype=torch.long, device="meta")
    for call in (
        node(aten.transpose.int, meta(4, 8), 0, 1),
        node(aten.cat.default, [meta(2, 8), meta(3, 8)]),
        node(aten.embedding.default, table, ids),
        node(aten._to_copy.default, meta(4, 8)),
        node(aten.dropout.default, meta(4, 8), 0.1, False),
    ):
        coverage = counted(call)
        assert coverage.flops == 0 and not coverage.per_element, call.target


class Scaled(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.einsum("ij,jk->ik", x, y) * 2.0


def test_explain_lists_the_ops_counted_per_element():
    x, y = torch.randn(4, 8), torch.randn(8, 4)
    compiled = emmy.compile(Scaled(), x, y, device=EmuDevice())
    coverage = compiled.program.coverage
    assert coverage["per_element_ops"] == {"aten.mul.Tensor": 1}
    assert coverage["flops"] == 2 * 4 * 8 * 4 + 4 * 4
    lines = explain_lines(compiled.program)
    assert "FLOPs one per output element (no formula): aten.mul.Tensor x1" in lines
