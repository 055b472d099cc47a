"""The model frontend end to end: torch modules exported, compiled and run on the emulator,
against torch eager. Each compile costs a torch.export and a g++ run, so each test groups
several ops into one module."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import emmy
import emmy.api
from emmy.base.errors import EmmyError
from emmy.frontend.ops import rope
from emmy.runtime.emu import EmuDevice

F32 = {"atol": 1e-4, "rtol": 1e-4}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def compile_emu(module: nn.Module, *inputs: torch.Tensor, **options):
    return emmy.compile(module, *inputs, device=EmuDevice(), **options)


def check(module: nn.Module, *inputs: torch.Tensor, atol: float = 1e-4, rtol: float = 1e-4):
    """Compiles at `inputs`, then runs on fresh inputs of the same shapes and dtypes (so
    nothing of the examples is baked in) and compares with eager."""
    module = module.eval()
    compiled = compile_emu(module, *inputs)
    fresh = [fresh_like(t) for t in inputs]
    with torch.no_grad():
        expected = module(*fresh)
    actual = compiled(*fresh)
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)
    return compiled


def fresh_like(tensor: torch.Tensor) -> torch.Tensor:
    if tensor.dtype == torch.bool:
        return torch.rand(tensor.shape) > 0.5
    if tensor.dtype in (torch.int64, torch.int32):
        return tensor.flip(-1).clone()
    return torch.randn_like(tensor)


def families(program) -> list[str]:
    return sorted(call.kernel.rsplit("_", 1)[0] for call in program.calls)


# -- elementwise ------------------------------------------------------------------------


class Broadcasts(nn.Module):
    def forward(self, x, row, col, scalar, mid, channel, entry):
        # x [2, 3, 16]; row [16]; col [2, 3, 1]; scalar [1]; mid [2, 1, 16]; channel [3, 1];
        # entry [1, 3, 16] (a position embedding's, over the batch)
        chain = (x + row) * col - scalar / (1.0 - torch.sigmoid(x)) + 0.5 * torch.tanh(col)
        return chain, x * mid, x * channel + row + entry


def test_broadcast_row_column_scalar_channel_batch():
    inputs = (
        torch.randn(2, 3, 16),
        torch.randn(16),
        torch.randn(2, 3, 1),
        torch.randn(1),
        torch.randn(2, 1, 16),
        torch.randn(3, 1),
        torch.randn(1, 3, 16),
    )
    program = check(Broadcasts(), *inputs).program
    # the chain is one kernel reading row, col and scalar in place, and so is the one of
    # a value per channel (dim 1: a BatchNorm's scale) and a batch entry's values; mid
    # broadcasts over a middle dim, which no elementwise kernel reads in place: it is
    # expanded by a copy
    assert families(program) == ["elementwise", "elementwise", "elementwise", "permute"]
    assert "inputs=full/row/col/scalar" in program.ir
    assert "inputs=full/mid/row/batch,fn=(((in0 * in1) + in2) + in3),inner=16,mid=3" in program.ir


class Expanded(nn.Module):
    def forward(self, x, g, row):
        # x [4, 16]; g [] expanded to x's shape (as a sum's gradient is); row [16] expanded
        # to [4, 16]; an expand alone, whose operands do not cover its shape
        return x * g.expand(4, 16) + row.expand(4, 16), g.expand(4, 16) * 2.0


def test_an_expanded_operand_is_read_unexpanded():
    program = check(Expanded(), torch.randn(4, 16), torch.randn(()), torch.randn(16)).program
    # the first chain reads g as a scalar and row as a row, in place; the second has no
    # operand of the full shape, so its expanded g is copied out
    assert families(program) == ["elementwise", "elementwise", "permute"]
    assert "inputs=full/scalar/row" in program.ir


class NonContiguous(nn.Module):
    def forward(self, x, y, z):
        # x [8, 12] read transposed; z [2, 3, 4] permuted and made contiguous
        a = torch.relu(x.t()) + y
        b = z.permute(2, 0, 1).contiguous() * 2.0
        return a, b


def test_non_contiguous_views_are_materialised():
    inputs = (torch.randn(8, 12), torch.randn(12, 8), torch.randn(2, 3, 4))
    compiled = check(NonContiguous(), *inputs)
    assert families(compiled.program).count("permute") == 2
    # an input that is itself a non-contiguous view runs like its contiguous copy
    x = torch.randn(12, 8).t()
    assert not x.is_contiguous()
    expected = NonContiguous()(x, inputs[1], inputs[2])
    torch.testing.assert_close(compiled(x, inputs[1], inputs[2]), expected, **F32)


# -- reductions -------------------------------------------------------------------------


class Reductions(nn.Module):
    def forward(self, x):
        # x [3, 5, 7]; a tuple of seven results
        return (
            x.sum(dim=1, keepdim=True),
            x.mean(dim=0),
            x.amax(dim=1),
            x.amax(dim=-1, keepdim=True),
            torch.softmax(x, dim=1),
            x.sum(-1) + x.mean(-1),
            x - x.mean(dim=1, keepdim=True),
        )


def test_reductions_and_softmax_over_any_dim():
    program = check(Reductions(), torch.randn(3, 5, 7)).program
    assert "reduce_rows" in families(program)
    assert "softmax" in families(program)


# -- embedding --------------------------------------------------------------------------


class Embeddings(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = nn.Embedding(50, 16)

    def forward(self, ids64, ids32):
        return self.table(ids64) * 2.0, self.table(ids32)


def test_embedding_int64_and_int32_ids():
    ids64 = torch.randint(0, 50, (2, 5), dtype=torch.int64)
    ids32 = torch.randint(0, 50, (7,), dtype=torch.int32)
    program = check(Embeddings(), ids64, ids32).program
    assert families(program).count("embedding") == 2


# -- matmuls ----------------------------------------------------------------------------


class Linears(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 8, bias=False)

    def forward(self, x, w):
        # a Linear's weight is a constant; F.linear of an activation reads it as [n, k]
        return self.down(F.silu(self.up(x))), F.linear(x, w)


def test_linear_with_and_without_bias():
    program = check(Linears(), torch.randn(2, 3, 16), torch.randn(24, 16)).program
    assert families(program) == ["matmul", "matmul", "matmul"]


class ActivationMatmuls(nn.Module):
    def forward(self, q, k, v, a, b):
        # [2, 3, 5, 6]: k read in place as Bᵀ, the scale fused as the matmul's epilogue
        scores = (q @ k.transpose(-2, -1)) * 0.125
        return scores.softmax(-1) @ v, torch.bmm(a, b), a @ b[0]


def test_matmul_of_two_activations():
    inputs = (
        torch.randn(2, 3, 5, 8),
        torch.randn(2, 3, 6, 8),
        torch.randn(2, 3, 6, 4),
        torch.randn(2, 5, 8),
        torch.randn(2, 8, 7),
    )
    program = check(ActivationMatmuls(), *inputs).program
    # kᵀ costs no copy: the matmul reads k as B stored [n, k]
    assert "b_batch=6,b_rows=6,b_cols=8,layout=nk,T=f32,epilogue=(acc * 0.125)" in program.ir
    # b[0] does: a kernel reads its operands from the start of a buffer
    assert families(program).count("permute") == 1


# -- attention --------------------------------------------------------------------------


class Attentions(nn.Module):
    def forward(self, q, k, v, kg, vg):
        causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        full = F.scaled_dot_product_attention(q, k[:, :, :5], v[:, :, :5], scale=0.3)
        grouped = F.scaled_dot_product_attention(q, kg, vg, is_causal=True, enable_gqa=True)
        return causal, full, grouped


class WrittenOutAttention(nn.Module):
    def forward(self, q, k, v):
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        return torch.softmax(scores, dim=-1) @ v


def test_attention_written_as_matmuls_becomes_one_fused_kernel():
    q, k, v = torch.randn(2, 3, 9, 16), torch.randn(2, 3, 11, 16), torch.randn(2, 3, 11, 16)
    program = check(WrittenOutAttention(), q, k, v).program
    assert families(program) == ["attention"]
    assert "scale=0.25" in str(program.kernels[program.calls[0].kernel].site.key)


def test_sdpa_causal_full_and_grouped_query():
    inputs = (
        torch.randn(2, 4, 6, 8),
        torch.randn(2, 4, 6, 8),
        torch.randn(2, 4, 6, 8),
        torch.randn(2, 2, 6, 8),
        torch.randn(2, 2, 6, 8),
    )
    program = check(Attentions(), *inputs).program
    assert families(program).count("attention") == 3


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sdpa_unfused_path_matches_eager(dtype):
    """Pinned to the unfused path, each attention runs as matmul → scaled causal softmax →
    matmul (grouped-query heads folded into rows; in bf16 on tensor cores), and still
    matches eager; the path's choice is one site per attention key, reported with the
    program's decisions."""
    inputs = [torch.randn(2, 4, 8, 8), torch.randn(2, 4, 8, 8), torch.randn(2, 4, 8, 8)]
    inputs += [torch.randn(2, 2, 8, 8), torch.randn(2, 2, 8, 8)]
    inputs = [t.to(dtype) for t in inputs]
    module = Attentions().eval()
    compiled = emmy.compile(module, *inputs, device=EmuDevice(), pins="path=unfused", db="none")
    fresh = [fresh_like(t) for t in inputs]
    tolerance = F32 if dtype == torch.float32 else {"atol": 3e-2, "rtol": 3e-2}
    for actual, expected in zip(compiled(*fresh), module(*fresh), strict=True):
        torch.testing.assert_close(actual, expected, **tolerance)
    program = compiled.program
    assert "attention" not in families(program)
    assert families(program).count("softmax") == 3
    called = [program.kernels[call.kernel] for call in program.calls]
    softmax_keys = [str(info.site.key) for info in called if info.site.family == "softmax"]
    assert sum("causal=8" in key for key in softmax_keys) == 2  # causal, grouped
    # in bf16 both products run on tensor cores, q · kᵀ reading k in place
    expected = ["matmul" if dtype == torch.float32 else "matmul_tc"] * 6
    assert sorted(info.site.family for info in called if "matmul" in info.site.family) == expected
    copies = families(program).count("permute")  # `full`'s k and v slices
    assert copies == 2, families(program)
    choices = program.choices.values()
    assert len(choices) == 3 and all(c.config == {"path": "unfused"} for c in choices)
    assert all(len(c.paths["fused"]) == 1 for c in choices)
    unfused = sorted(len(c.paths["unfused"]) for c in choices)
    assert unfused == [3, 3, 3]


class PaddedAttention(nn.Module):
    def forward(self, q, k, v, padding, both, per_head):
        # padding [batch, kv_len]: 0 where a key is read, -inf where it is padding; both
        # [batch, 1, q_len, kv_len]: padding and causal in one, as Hugging Face builds it;
        # per_head [1, heads, q_len, kv_len]: a bias per head (ALiBi-like), for every batch
        mask = padding[:, None, None, :]
        return (
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
            F.scaled_dot_product_attention(q, k[:, :2], v[:, :2], attn_mask=mask, enable_gqa=True),
            F.scaled_dot_product_attention(q, k, v, attn_mask=both),
            F.scaled_dot_product_attention(q, k, v, attn_mask=per_head + both),
        )


def test_sdpa_with_padding_per_query_and_per_head_masks():
    """An additive mask per (batch, key), per (batch, query, key) or per (batch, head, query,
    key) is read by the fused kernel."""
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 8)
    padding = torch.zeros(2, 7)
    padding[0, 5:] = -torch.inf
    padding[1, 2:] = -torch.inf
    hidden = torch.ones(5, 7, dtype=torch.bool).triu(7 - 5 + 1)
    both = padding[:, None, None, :] + torch.zeros(5, 7).masked_fill(hidden, -torch.inf)
    per_head = torch.randn(1, 4, 5, 7)
    inputs = (q, k, v, padding, both, per_head)
    compiled = compile_emu(PaddedAttention(), *inputs)
    torch.testing.assert_close(compiled(*inputs), PaddedAttention()(*inputs), **F32)
    kernels = [compiled.program.kernels[c.kernel] for c in compiled.program.calls]
    keys = [str(info.site.key) for info in kernels if info.site.family == "attention"]
    assert len(keys) == 4 and all("masked=yes" in key for key in keys)
    assert sum("batch=2,mask_rows=5" in key for key in keys) == 1
    assert sum("batch=8,mask_rows=5" in key for key in keys) == 1  # a mask per head


def test_the_library_path_runs_every_attention_through_torch_sdpa():
    """Pinned to `sdpa`, causal, grouped-query, fewer keys than queries, padding masks, a
    mask per query and one per head all run as host calls of torch's SDPA (on emu, torch's
    CPU kernel over the emulator's buffers) and match eager; no attention kernel is left."""
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 8)
    padding = torch.zeros(2, 7)
    padding[0, 5:] = -torch.inf
    hidden = torch.ones(5, 7, dtype=torch.bool).triu(1)
    both = padding[:, None, None, :] + torch.zeros(5, 7).masked_fill(hidden, -torch.inf)
    cases = [
        (PaddedAttention(), (q, k, v, padding, both, torch.randn(1, 4, 5, 7))),
        (Attentions(), (q, k, v, torch.randn(2, 2, 7, 8), torch.randn(2, 2, 7, 8))),
    ]
    for module, inputs in cases:
        compiled = emmy.compile(module, *inputs, device=EmuDevice(), pins="path=sdpa", db="none")
        torch.testing.assert_close(compiled(*inputs), module(*inputs), **F32)
        program = compiled.program
        attentions = [f for f in families(program) if "attention" in f]
        assert set(attentions) == {"vendor_attention"}, families(program)
        assert {h.family for h in program.host_calls.values()} == {"vendor_attention"}
        assert all(c.config == {"path": "sdpa"} for c in program.choices.values())


class BoolMasked(nn.Module):
    """Boolean masks (true: the key is read): a padding mask given per call and viewed as
    [batch, 1, 1, keys], and a band of keys per query held by the model."""

    def __init__(self):
        super().__init__()
        self.register_buffer("band", torch.ones(5, 7, dtype=torch.bool).tril(2))

    def forward(self, q, k, v, keep):
        return (
            F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :]),
            F.scaled_dot_product_attention(q, k, v, attn_mask=self.band),
        )


def test_sdpa_with_boolean_masks_matches_eager():
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 8)
    keep = torch.ones(2, 7, dtype=torch.bool)
    keep[0, 5:] = False
    keep[1, 2:] = False
    inputs = (q, k, v, keep)
    compiled = compile_emu(BoolMasked(), *inputs)
    torch.testing.assert_close(compiled(*inputs), BoolMasked()(*inputs), **F32)
    found = families(compiled.program)
    assert found.count("mask_bias") == 2 and found.count("attention") == 2


# -- norms and rope ---------------------------------------------------------------------


class Norms(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(16)
        self.rms = nn.RMSNorm(16, eps=1e-6)
        self.rms_default = nn.RMSNorm(16)
        with torch.no_grad():
            for norm in (self.ln, self.rms, self.rms_default):
                norm.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x, r, cos, sin):
        plain = F.layer_norm(x, (16,))
        return plain, self.ln(x), self.rms(x), self.rms_default(x * 3.0), rope(r, cos, sin)


def test_norms_and_rope():
    inputs = (torch.randn(2, 4, 16), torch.randn(2, 4, 3, 8), torch.randn(4, 4), torch.randn(4, 4))
    program = check(Norms(), *inputs).program
    found = families(program)
    assert found.count("layer_norm") == 2 and found.count("rms_norm") == 2
    assert "rope" in found


class ResidualNorms(nn.Module):
    """Pre-norm residual blocks: the adds before each norm, the scaling after; a softmax of
    shifted, scaled scores, weighted."""

    def __init__(self):
        super().__init__()
        self.ln, self.rms = nn.LayerNorm(16), nn.RMSNorm(16, eps=1e-6)
        with torch.no_grad():
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)
            self.rms.weight.uniform_(0.5, 1.5)

    def forward(self, x, r, bias):
        h = x + r
        a = F.gelu(self.ln(h) * 2.0)
        h2 = h + a
        weights = torch.softmax(x * 0.5 + bias, dim=-1) * r
        return self.rms(h2) + bias, h2, weights


def test_norms_fuse_the_residual_add_before_and_the_chain_after():
    """Each norm computes the chain of its input (the residual add) and writes the sum, the
    residual stream used again, as a second output; the add after a norm is its epilogue.
    A softmax fuses the same way: three kernels in all."""
    inputs = (torch.randn(2, 5, 16), torch.randn(2, 5, 16), torch.randn(16))
    program = check(ResidualNorms(), *inputs).program
    assert families(program) == ["layer_norm", "rms_norm", "softmax"]
    keys = {
        program.kernels[c.kernel].site.family: str(program.kernels[c.kernel].site.key)
        for c in program.calls
    }
    assert "fn=(in0 + in1),store=yes" in keys["layer_norm"]
    assert "fn=(in0 + gelu((in1 * 2.0))),epilogue=(acc + in2),store=yes" in keys["rms_norm"]
    assert "fn=((in0 * 0.5) + in1),epilogue=(acc * in2)" in keys["softmax"]


# -- views ------------------------------------------------------------------------------


class Slices(nn.Module):
    def forward(self, x):
        # x [4, 12]
        a, b, c = x.split(4, dim=-1)
        top, bottom = x.chunk(2, dim=0)
        # `.to` and `.float()` that keep the dtype are no-ops
        return a * b + c, top - bottom, x[:, 2:6] * x[:, ::3], x[1].to(torch.float32) + x[2].float()


def test_slices_split_and_chunk():
    check(Slices(), torch.randn(4, 12))


# -- bf16 -------------------------------------------------------------------------------


class Mlp(nn.Module):
    def __init__(self, dim: int = 32, hidden: int = 64):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class ShiftedWindowMask(nn.Module):
    """Swin's attention mask, as torchvision builds it: a fresh zeros tensor written region
    by region through slices of it, then read."""

    def forward(self, x):
        mask = x.new_zeros((x.shape[1], x.shape[2]))
        regions = ((0, -7), (-7, -3), (-3, None))
        count = 0
        for h in regions:
            for w in regions:
                mask[h[0] : h[1], w[0] : w[1]] = count
                count += 1
        return x[..., 0] + mask


def test_writes_through_slices_of_a_fresh_tensor_are_kept():
    """An in-place write into a slice of a tensor the graph made writes that tensor: it is
    not a fresh tensor of its own to be computed functionally and dropped. Three calls with
    other values, each against eager."""
    model = ShiftedWindowMask()
    compiled = compile_emu(model, torch.randn(2, 14, 14, 8))
    for _ in range(3):
        x = torch.randn(2, 14, 14, 8)
        torch.testing.assert_close(compiled(x), model(x), **F32)


def test_a_slice_of_an_export_is_a_view():
    """torch.export's example values do not mark their views: the op's schema tells."""
    from emmy.frontend.torch_fallback import returns_view

    exported = torch.export.export(ShiftedWindowMask(), (torch.randn(2, 14, 14, 8),))
    kinds = {
        node.name: returns_view(node) for node in exported.graph.nodes if node.op == "call_function"
    }
    assert kinds["slice_1"] and kinds["select"]
    assert not kinds["new_zeros"] and not kinds["add"] and not kinds["fill_"]


def test_bf16_mlp_on_tensor_cores():
    model = Mlp().to(torch.bfloat16)
    program = check(
        model, torch.randn(2, 8, 32, dtype=torch.bfloat16), atol=3e-2, rtol=3e-2
    ).program
    assert families(program).count("matmul_tc") == 2


# -- the torch.compile backend ----------------------------------------------------------


def test_torch_compile_backend(caplog):
    """backend="emmy" compiles each graph AOTAutograd hands it (the emulator being this
    machine's device), and logs one line per compiled graph."""
    torch._dynamo.reset()
    model = Mlp(16, 32).eval()
    compiled = torch.compile(model, backend="emmy")
    # the second shape makes dynamo capture the graph again with a dynamic batch dim, and
    # hand emmy sizes as tensors: each call's sizes compile once
    with caplog.at_level(logging.INFO, logger="emmy"):
        for batch in (4, 6, 9, 6):
            x = torch.randn(batch, 16)
            with torch.no_grad():
                torch.testing.assert_close(compiled(x), model(x), **F32)
    lines = [r.getMessage() for r in caplog.records if r.name == "emmy"]
    assert len(lines) == 3, lines
    assert all("compiled a graph for emu" in line and "0 through torch" in line for line in lines)
    torch._dynamo.reset()


def test_a_training_steps_backward_graph_compiles_with_none_for_the_data_gradient():
    """A training step as its users write it (the model in train mode, cross-entropy,
    backward): AOTAutograd's backward graph returns None as the gradient of the data and
    the labels, which need none; emmy compiles that graph too, and the gradients are
    eager's."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    reference = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    reference.load_state_dict(model.state_dict())
    x, labels = torch.randn(8, 16), torch.randint(0, 4, (8,))
    programs: list = []
    backend = emmy.api.backend(device=EmuDevice(), programs=programs, db="none")
    step = torch.compile(lambda m: F.cross_entropy(m(x), labels), backend=backend)
    loss = step(model)
    loss.backward()
    expected = F.cross_entropy(reference(x), labels)
    expected.backward()
    torch.testing.assert_close(loss, expected, **F32)
    for parameter, eager in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(parameter.grad, eager.grad, **F32)
    assert len(programs) == 2  # the forward graph and the backward graph
    torch._dynamo.reset()


# -- memory -----------------------------------------------------------------------------


class Chain(nn.Module):
    def forward(self, x):
        for _ in range(4):
            x = torch.softmax(x * 2.0, dim=-1)
        return x


def test_arena_reuses_dead_temporaries():
    program = check(Chain(), torch.randn(8, 64)).program
    memory = program.memory()
    assert len(program.temporaries) >= 3
    assert 0 < memory["arena"] < memory["temporaries_unshared"]


# -- what is not supported --------------------------------------------------------------


class BoolArithmetic(nn.Module):
    """Arithmetic of bools (torch's add of bools is a logical or) has no kernel."""

    def forward(self, mask):
        return mask + mask


class Median(nn.Module):
    def forward(self, x):
        return torch.median(x)


class RoundDecimals(nn.Module):
    def forward(self, x):
        return torch.round(x * 2.0, decimals=2)


class FloorDivide(nn.Module):
    def forward(self, x):
        return torch.div(x, 3.0, rounding_mode="floor")


class Attention3d(nn.Module):
    def forward(self, q):
        return F.scaled_dot_product_attention(q, q, q)


class Permute5d(nn.Module):
    """A copy of 5 dims that do not merge, in no order of them and through no short runs
    of storage (every other element of each, their strides interleaved)."""

    def forward(self, x):
        return x[::2, ::2, ::2, ::2, ::2].permute(2, 4, 1, 3, 0).contiguous() * 2.0


UNSUPPORTED = [
    pytest.param(
        BoolArithmetic(),
        (torch.ones(4, 8, dtype=torch.bool),),
        ["aten.add.Tensor of torch.bool", "node add"],
        id="boolean-arithmetic",
    ),
    pytest.param(Median(), (torch.randn(4, 8),), ["aten.median", "node median"], id="median"),
    pytest.param(
        RoundDecimals(), (torch.randn(4, 8),), ["aten.round.decimals", "node round"], id="round-2"
    ),
    pytest.param(
        FloorDivide(), (torch.randn(4, 8),), ["aten.div.Tensor_mode", "node div"], id="floor-div"
    ),
    pytest.param(
        Attention3d(),
        (torch.randn(2, 3, 8),),
        ["graph.attention", "rank 4", "node scaled_dot_product_attention"],
        id="sdpa-rank-3",
    ),
    pytest.param(
        Permute5d(), (torch.randn(4, 4, 4, 4, 4),), ["5 dims", "node contiguous"], id="permute-5d"
    ),
]


@pytest.mark.parametrize(("module", "inputs", "words"), UNSUPPORTED)
def test_unsupported_without_fallback_fails_before_any_kernel(monkeypatch, module, inputs, words):
    def no_kernels(*args, **kwargs):
        raise AssertionError("a kernel was built for an unsupported model")

    monkeypatch.setattr("emmy.compiler.compile_graph", no_kernels)
    with pytest.raises(EmmyError) as error:
        compile_emu(module, *inputs, fallback=False)
    message = str(error.value)
    assert "\n" not in message, message
    for word in words:
        assert word in message, message


@pytest.mark.parametrize(("module", "inputs", "words"), UNSUPPORTED)
def test_unsupported_ops_run_through_torch(module, inputs, words):
    """What emmy has no kernel for runs as torch ops between its kernels, and matches."""
    program = check(module, *inputs).program
    assert program.fallbacks, "nothing fell back"
    assert program.coverage["ops"] >= len(program.fallbacks)


def test_other_input_shapes_compile_once_each_and_share_the_weights():
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)).eval()
    compiled = compile_emu(model, torch.randn(4, 16))
    for rows in (4, 3, 3):
        x = compiled.device.empty((rows, 16), torch.float32).copy_(torch.randn(rows, 16))
        with torch.no_grad():  # x in device memory: only the weights are uploads
            torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    assert len(compiled.specializations) == 2
    weights = {spec.name for s in compiled.specializations.values() for spec in s.program.constants}
    assert weights == set(compiled.weights.resident)
    # each weight crossed to the device once, and both shapes' programs read that copy
    assert compiled.device.counters.uploads == len(weights)
    first, second = (s.bound.fixed for s in compiled.specializations.values())
    assert all(first[name] is second[name] for name in weights)


class CausalSelfAttention(nn.Module):
    """Views whose sizes follow the sequence length: dynamic under torch.export."""

    def __init__(self):
        super().__init__()
        self.qkv, self.out = nn.Linear(16, 48), nn.Linear(16, 16)

    def forward(self, x):
        batch, seq, _ = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, 2, 8).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(batch, seq, 16))


def test_declared_dynamic_dims_export_once_and_specialise_per_shape(monkeypatch):
    """A sequence dim declared dynamic: one torch.export, each other length specialised from
    it and right; a length outside the declared range, or a change of a static dim, is a
    one-line error."""
    module = CausalSelfAttention().eval()
    exports = []
    real_export = torch.export.export
    monkeypatch.setattr(
        torch.export, "export", lambda *a, **k: exports.append(1) or real_export(*a, **k)
    )
    seq = torch.export.Dim("seq", min=2, max=40)
    compiled = emmy.compile(
        module, torch.randn(2, 12, 16), device=EmuDevice(), dynamic_shapes=({1: seq},)
    )
    for length in (12, 5, 40):
        x = torch.randn(2, length, 16)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), module(x), **F32)
    assert len(exports) == 1 and len(compiled.specializations) == 3
    with pytest.raises(
        EmmyError, match=r"input x dim 1 is 41, outside its dynamic range \[2, 40\]"
    ):
        compiled(torch.randn(2, 41, 16))
    with pytest.raises(EmmyError, match="input x dim 0 is 3; it is static at 2"):
        compiled(torch.randn(3, 12, 16))


class MaskedAttention(nn.Module):
    def forward(self, q, mask):
        return F.scaled_dot_product_attention(q, q, q, attn_mask=mask)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["simt", "tensor-cores"])
def test_a_query_whose_every_key_is_masked_reads_zero_as_torch_does(dtype):
    """Left padding hides every key from a padded query: torch gives 0 there, not NaN."""
    q = torch.randn(2, 2, 8, 16, dtype=dtype)
    mask = torch.ones(2, 1, 8, 8, dtype=torch.bool)
    mask[1, :, :3] = False  # the second sequence's first three queries see no key
    tolerance = F32 if dtype == torch.float32 else {"atol": 3e-2, "rtol": 3e-2}
    actual = compile_emu(MaskedAttention(), q, mask)(q, mask)
    assert not actual.isnan().any()
    torch.testing.assert_close(actual, MaskedAttention()(q, mask), **tolerance)
