"""Data movement and indexing against torch eager on the emulator: index_select, gather,
advanced indexing, flip, roll, triu/tril (the gather family), cat, stack and pad (the cat
family), index_copy (its own family), repeat and strided copies of every dtype (permute),
returned views of inputs and weights (no kernel), and a crashing kernel reported by its
site. Each program groups many cases, so that each dtype costs one g++ run."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import emmy
import emmy.api
from emmy.base.errors import KernelLaunchError
from emmy.frontend.converter import supports
from emmy.frontend.export import export_program
from emmy.runtime.emu import EmuDevice


def run(module: nn.Module, *inputs: torch.Tensor):
    """The compiled module's outputs and eager's, on the example inputs."""
    compiled = emmy.compile(module.eval(), *inputs, device=EmuDevice())
    with torch.no_grad():
        return compiled, compiled(*inputs), module(*inputs)


class Floats(nn.Module):
    def forward(self, x, ids, neg, gidx, m):
        # x [4, 6, 8]; ids [5] in [0, 6); neg [5] in [-4, 4); gidx [4, 6, 3] in [0, 8)
        return (
            torch.index_select(x, 1, ids),
            torch.index_select(x.transpose(0, 2), 0, ids),  # of a non-contiguous input
            torch.gather(x, 2, gidx),
            torch.gather(x, -1, gidx[:, :4]),  # a smaller index than x
            x[neg],
            x[:, neg],
            x[neg[:4], :, ids[:4]],  # indices apart: their dims go first
            x[neg[:3, None], ids[None, :]],  # indices broadcast together
            torch.flip(x, [0, -1]),
            torch.roll(x, 2, 1),
            torch.roll(x, (1, -2), (0, 2)),
            torch.roll(x, 3),
            torch.triu(m, 1),
            torch.tril(m.transpose(-2, -1), -1),
            x.repeat(2, 1, 1, 2),
            torch.cat([x, x * 2, x.transpose(0, 1).reshape(4, 6, 8), x + 1, x - 1], dim=-1),
            torch.cat([x[:, :2], x], dim=1),
            torch.stack([x, x * 3], 1),
            F.pad(x, (1, 2, 0, -1), value=3.0),
            x[:, [1, 3]],  # by a constant index
            torch.slice_scatter(x, x[:, :2] * 2, 1, 2, 4),
            torch.select_scatter(x, x[:, 0] * 2, 1, -1),
            x.index_copy(1, ids[:3], x[:, :3] * 2),  # a KV cache's update at positions
            torch.scatter(x, 2, gidx[:, :, :1], 0.5),  # one per row: nll_loss's gradient
            x.scatter(1, gidx[:, :1, :1].expand(4, 1, 8) % 6, x[:, :1] * 3),  # of a source
        )


def test_indexing_ops_of_floats_match_eager() -> None:
    torch.manual_seed(0)
    x, m = torch.randn(4, 6, 8), torch.randn(2, 5, 7)
    ids, neg = torch.tensor([5, 0, 2, 2, 3]), torch.tensor([-1, 0, 3, -4, 2])
    gidx = torch.randint(0, 8, (4, 6, 3))
    compiled, got, want = run(Floats(), x, ids, neg, gidx, m)
    for i, (actual, expected) in enumerate(zip(got, want, strict=True)):
        assert torch.equal(actual, expected), f"output {i}"
    kernels = {k.site.family for k in compiled.program.kernels.values()}
    assert {"gather", "cat", "permute", "index_copy"} <= kernels


class Integers(nn.Module):
    def forward(self, t, mask, ids, h, pos):
        # t [3, 5] int64 past 32 bits; mask [3, 5] bool; ids [4]; h [3, 8] bf16; pos [4]
        return (
            t.t().reshape(-1),  # a strided copy of int64
            torch.cat([t, t.flip(0)], 0),
            t[ids],
            torch.roll(t, 1, 1),
            t.repeat(1, 2),
            F.pad(t, (1, 1), value=7),
            mask.transpose(0, 1).reshape(-1),  # a strided copy of bool
            torch.cat([mask, mask[:, :2]], 1),
            torch.stack([mask, mask.flip(1)]),
            torch.index_select(h, 0, pos),
            torch.cat([h, h.flip(-1)], -1),
            h.t().reshape(-1),
            F.embedding(pos, t, padding_idx=0),  # rows of an int64 table
            F.embedding(pos, h, padding_idx=1),
            F.embedding(pos.reshape(2, 2)[:, 1:], h),  # by sliced ids: a strided copy first
            t.index_copy(0, pos[:2], t[1:] * 3),
            h.index_copy(1, pos[1:2], h[:, 5:6]),
        )


def test_indexing_ops_of_integers_masks_and_bf16_match_eager() -> None:
    torch.manual_seed(0)
    t = torch.randint(-(2**40), 2**40, (3, 5))
    mask = torch.rand(3, 5) > 0.5
    ids, pos = torch.tensor([2, -1, 0, 1]), torch.tensor([2, 0, 0, 1])
    h = torch.randn(3, 8, dtype=torch.bfloat16)
    _, got, want = run(Integers(), t, mask, ids, h, pos)
    for i, (actual, expected) in enumerate(zip(got, want, strict=True)):
        assert actual.dtype == expected.dtype, f"output {i}"
        assert torch.equal(actual, expected), f"output {i}"


class Returns(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 4))

    def forward(self, x):
        return x, x.transpose(0, 1), x[1:], self.w, self.w.t(), x * 2


def test_returned_inputs_weights_and_their_views_are_views_with_no_kernel() -> None:
    x = torch.randn(4, 3)
    compiled, got, want = run(Returns(), x)
    for actual, expected in zip(got[:5], want[:5], strict=True):
        assert torch.equal(actual, expected)
        assert actual.stride() == expected.stride()
        assert actual.data_ptr() == expected.data_ptr()  # the input's or weight's own memory
    assert torch.equal(got[5], want[5])
    assert [k.site.family for k in compiled.program.kernels.values()] == ["elementwise"]
    # a non-contiguous input: the same values (read as the program reads it, contiguous)
    strided = torch.randn(3, 4).t()
    for actual, expected in zip(
        compiled(strided), Returns.forward(compiled.module, strided), strict=True
    ):
        assert torch.equal(actual, expected)


def test_a_crashing_kernel_is_reported_with_its_site_family_and_key() -> None:
    compiled, _, _ = run(nn.Sequential(nn.ReLU()), torch.randn(4, 8))
    program = compiled.program
    (name, info) = next(iter(program.kernels.items()))
    # the program's own kernel, replaced by one that writes through a null pointer
    crashing = (
        '#include "emmy_device.cuh"\n'
        f"EMMY_KERNEL void {name}(const float* x, float* y) {{ float* p = nullptr; "
        "p[threadIdx.x] = x[0]; }\n"
        f"EMMY_EMU_ENTRY({name})\n"
    )
    broken = dataclasses.replace(program, source=crashing)
    with pytest.raises(KernelLaunchError) as caught:
        broken.run(EmuDevice(), [torch.randn(4, 8).numpy()])
    message = str(caught.value)
    assert "SIGSEGV" in message and f"{name} is {info.site.family} at {info.site.key}" in message


class Refused(nn.Module):
    def forward(self, x, mask, a, b, c):
        return (
            x[mask],
            x[a, b, c],
            torch.roll(x, (1, 1, 1), (0, 1, 2)),
            torch.triu(a[:, None] * a),
            torch.cat([x.reshape(-1), a]),  # promoted to float: a conversion
        )


def test_data_dependent_and_unsupported_indexing_is_refused_with_a_reason() -> None:
    x = torch.randn(2, 3, 4)
    mask = x > 0
    a = torch.tensor([0, 1])
    exported = export_program(Refused(), (x, mask, a, a, a))
    reasons = [
        supports(node).reason
        for node in exported.graph.nodes
        if node.op == "call_function" and not supports(node)
    ]
    assert "aten.index.Tensor by a boolean mask: its output shape depends on the data" in reasons
    assert "indexing by 3 index tensors: at most 2 are supported" in reasons
    assert "roll over 3 dims: at most 2 are supported" in reasons
    assert "aten.triu.default of torch.int64 values is not supported" in reasons
    assert "cat of torch.int64 into torch.float32 needs a conversion, which is not supported" in (
        reasons
    )


class Masks(nn.Module):
    """A causal and padding mask as Hugging Face models build them, from aranges."""

    def forward(self, x, mask):
        batch, length = mask.shape
        position = torch.arange(length)
        causal = position[None, :] <= position[:, None]
        padding = mask[torch.arange(batch)[:, None], position[None, :]]
        ones = torch.zeros_like(x) + torch.ones(x.shape[-1]) + torch.full((1,), 2.0)
        return causal, padding, ones + x, x.new_zeros(3), torch.cat([x, torch.ones(batch, 1)], 1)


def test_creation_ops_fold_to_constants_at_each_shape() -> None:
    module = Masks()
    example = (torch.randn(2, 4), torch.ones(2, 4, dtype=torch.long))
    compiled = emmy.compile(module, *example, device=EmuDevice())
    for length in (4, 6):  # the second shape compiles again: its constants are its own
        x, mask = torch.randn(2, length), torch.randint(0, 2, (2, length))
        for actual, expected in zip(compiled(x, mask), module(x, mask), strict=True):
            assert actual.dtype == expected.dtype
            assert torch.equal(actual, expected)
    # the masks and the constant parts of the sum are folded: no kernel computes them
    kernels = sorted(k.site.family for k in compiled.program.kernels.values())
    assert kernels == ["cat", "elementwise", "gather"]


class Compiled(nn.Module):
    def forward(self, x, ids, m):
        return (
            torch.index_select(x, 1, ids),
            x[ids],
            torch.flip(x, [0]),
            torch.roll(x, 1, 2),
            torch.triu(m, 1),
            torch.cat([x, x * 2], -1),
            torch.stack([x, x], 0),
            F.pad(x, (1, 1)),
            torch.zeros_like(x) + x,
        )


def test_torch_compile_runs_the_indexing_ops_in_emmy_kernels() -> None:
    """AOTAutograd's graph of them converts with no fallback (one would be an error)."""
    module = Compiled()
    compiled = torch.compile(module, backend=emmy.api.backend(device=EmuDevice(), fallback=False))
    x, ids, m = torch.randn(3, 4, 5), torch.tensor([2, 0, 1]), torch.randn(4, 4)
    with torch.no_grad():
        for actual, expected in zip(compiled(x, ids, m), module(x, ids, m), strict=True):
            assert torch.equal(actual, expected)


def test_emmy_run_of_an_expression_binds_its_constants(capsys) -> None:
    """A roll reads a constant index and a pad its fills: `emmy run -c` passes them."""
    from emmy.cli import main

    expression = "torch.nn.functional.pad(torch.randn(4, 8), (1, 2), value=1.5).roll(1, 0)"
    code = main(["run", "-c", expression, "--device", "emu", "--check"])
    out = capsys.readouterr().out
    assert code == 0 and "OK: matches torch eager (max abs error 0" in out, out
