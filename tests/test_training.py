"""Training steps under torch.compile(backend=emmy), as their users write them: the model
in train mode, a loss, backward, an optimizer step; three steps against eager, the losses
and the first step's gradients compared. Every forward and backward graph is compiled by
emmy with no op left to torch (fallback refused, strict), so all of each graph's FLOPs
run in emmy's kernels; the backward ops reach emmy as the forms
emmy.frontend.decompositions gives them (checked against torch's in float64 here)."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import emmy.api
from emmy.frontend import tiny_models
from emmy.frontend.decompositions import (
    attention_backward,
    convolution_backward,
    embedding_backward,
    max_pool_backward,
)
from emmy.runtime.emu import EmuDevice

aten = torch.ops.aten

#: the first step's gradients, relative to their norm (f32 kernels against f32 eager)
GRADIENT_TOLERANCE = 1e-3


def _mlp() -> tuple[nn.Module, tuple, object]:
    model = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 4))
    x, labels = torch.randn(8, 16), torch.randint(0, 4, (8,))
    return model, (x, labels), lambda m, x, labels: F.cross_entropy(m(x), labels)


def _cnn() -> tuple[nn.Module, tuple, object]:
    """Conv, BatchNorm in train mode (batch statistics; the running ones and the batch
    count written in place), ReLU, max pooling, a linear head. The convolution before the
    norm has no bias, as CNNs write it: that bias's gradient is zero, and an optimizer that
    normalises its steps (AdamW) turns the rounding of a zero into full steps."""
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, stride=2, groups=2),
        nn.Flatten(),
        nn.Linear(8, 4),
    )
    x, labels = torch.randn(2, 3, 8, 8), torch.randint(0, 4, (2,))
    return model, (x, labels), lambda m, x, labels: F.cross_entropy(m(x), labels)


def _language_model(name: str) -> tuple[nn.Module, tuple, object]:
    """A tiny transformers causal LM with its defaults, its loss from `labels` as users
    train it; dropout off, whose random masks no compiled step shares with eager."""
    model = tiny_models.hf_model(name, defaults=True).train()
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    ids = torch.randint(3, 128, (2, 8))
    return model, (ids,), lambda m, ids: m(input_ids=ids, labels=ids).loss


def _vit() -> tuple[nn.Module, tuple, object]:
    transformers = tiny_models.packages.transformers()
    config = transformers.ViTConfig(
        num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2,
        image_size=16, patch_size=8, num_labels=4,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.ViTForImageClassification(config)
    x, labels = torch.randn(2, 3, 16, 16), torch.randint(0, 4, (2,))
    return model, (x, labels), lambda m, x, labels: m(pixel_values=x, labels=labels).loss


MODELS = {
    "mlp": _mlp,
    "cnn": _cnn,
    "gpt2": lambda: _language_model("gpt2"),
    "llama": lambda: _language_model("llama"),
    "vit": _vit,
}

OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2),
}


@pytest.mark.parametrize("name", MODELS)
def test_three_training_steps_match_eager(name: str) -> None:
    """Each model trains three steps with SGD (momentum) and with AdamW; each step's loss
    is eager's and so are the first step's gradients and, at the end, the buffers (a
    BatchNorm's running statistics)."""
    torch.manual_seed(0)
    model, inputs, loss_of = MODELS[name]()
    programs: list = []
    backend = emmy.api.backend(device=EmuDevice(), programs=programs, db="none", fallback=False)
    torch._dynamo.reset()
    step = torch.compile(loss_of, backend=backend)
    for optimizer_name, make_optimizer in OPTIMIZERS.items():
        compiled, eager = copy.deepcopy(model), copy.deepcopy(model)
        optimizers = make_optimizer(compiled.parameters()), make_optimizer(eager.parameters())
        for index in range(3):
            loss = step(compiled, *inputs)
            loss.backward()
            expected = loss_of(eager, *inputs)
            expected.backward()
            torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-5)
            if index == 0:
                _assert_gradients_close(compiled, eager)
            for optimizer in optimizers:
                optimizer.step()
                optimizer.zero_grad()
        for (buffer, got), (_, want) in zip(
            compiled.named_buffers(), eager.named_buffers(), strict=True
        ):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=buffer)
        assert programs, f"{optimizer_name}: no graph was compiled"
    forward_and_backward = len(programs)
    assert forward_and_backward >= 2 and forward_and_backward % 2 == 0, len(programs)
    torch._dynamo.reset()


def _assert_gradients_close(compiled: nn.Module, eager: nn.Module) -> None:
    """All gradients within 1e-3 of eager's, relative to their norm, and each parameter's
    elementwise (absolutely where its gradient is zero but for rounding: a key's bias)."""
    got, want = [], []
    for (name, mine), theirs in zip(compiled.named_parameters(), eager.parameters(), strict=True):
        assert mine.grad is not None, f"{name} has no gradient"
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-3, atol=1e-5, msg=name)
        got.append(mine.grad.flatten())
        want.append(theirs.grad.flatten())
    error = (torch.cat(got) - torch.cat(want)).norm() / torch.cat(want).norm()
    assert error < GRADIENT_TOLERANCE, f"relative error {error:.2e}"


# -- emmy's decompositions against torch's backward ops, in float64 ----------------------


def test_the_convolution_gradients_are_torchs() -> None:
    """Strides, paddings, dilations, groups, 1-D and 2-D, a kernel wider than the stride
    and one as wide as the image's rest (a patch embedding)."""
    torch.manual_seed(0)
    checked = 0
    for dims, size, stride, pad, dilation, groups in itertools.product(
        (1, 2), (1, 3, 8), (1, 2, 8), (0, 1, 3), (1, 2), (1, 2)
    ):
        if 17 + 2 * pad < dilation * (size - 1) + 1:
            continue
        x = torch.randn([2, 4] + [17] * dims, dtype=torch.float64)
        weight = torch.randn([6, 4 // groups] + [size] * dims, dtype=torch.float64)
        arguments = ([stride] * dims, [pad] * dims, [dilation] * dims, False, [0] * dims, groups)
        grad = torch.randn_like(aten.convolution(x, weight, None, *arguments))
        expected = aten.convolution_backward(grad, x, weight, [6], *arguments, [True] * 3)
        got = convolution_backward(grad, x, weight, [6], *arguments, [True] * 3)
        for want, have in zip(expected, got, strict=True):
            torch.testing.assert_close(have, want)
        checked += 1
    assert checked > 150


def test_the_attention_gradients_are_torchs() -> None:
    """Causal with fewer queries than keys (aligned top-left, as torch's CPU kernel),
    grouped-query, boolean and additive masks."""
    torch.manual_seed(0)
    for causal, group, mask_kind, q_len in itertools.product(
        (False, True), (1, 2), (None, "bool", "float"), (5, 8)
    ):
        if causal and mask_kind:
            continue
        q = torch.randn(2, 4, q_len, 16, dtype=torch.float64, requires_grad=True)
        k = torch.randn(2, 4 // group, 8, 16, dtype=torch.float64, requires_grad=True)
        v = torch.randn(2, 4 // group, 8, 16, dtype=torch.float64, requires_grad=True)
        mask = None
        if mask_kind == "bool":
            mask = torch.rand(2, 1, q_len, 8) > 0.3
            mask[..., 0] = True
        elif mask_kind == "float":
            mask = torch.randn(2, 4, q_len, 8, dtype=torch.float64)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal, scale=0.3, enable_gqa=group > 1
        )
        grad = torch.randn_like(out)
        out.backward(grad)
        got = attention_backward(
            grad, q.detach(), k.detach(), v.detach(), out.detach(), None, 0.0, causal,
            attn_mask=mask, scale=0.3,
        )  # fmt: skip
        for want, have in zip((q.grad, k.grad, v.grad), got, strict=True):
            torch.testing.assert_close(have, want)


def test_the_embedding_and_max_pooling_gradients_are_torchs() -> None:
    torch.manual_seed(0)
    for padding_idx in (-1, 3):
        indices = torch.randint(0, 10, (3, 5))
        indices[0, 0] = 3
        grad = torch.randn(3, 5, 7, dtype=torch.float64)
        torch.testing.assert_close(
            embedding_backward(grad, indices, 10, padding_idx, False),
            aten.embedding_dense_backward(grad, indices, 10, padding_idx, False),
        )
    for size, stride, pad, dilation, ceil in itertools.product(
        (2, 3), (1, 2, 3), (0, 1), (1, 2), (False, True)
    ):
        x = torch.randn(2, 3, 8, 9, dtype=torch.float64)
        window = ([size] * 2, [stride] * 2, [pad] * 2, [dilation] * 2, ceil)
        out, indices = aten.max_pool2d_with_indices(x, *window)
        grad = torch.randn_like(out)
        torch.testing.assert_close(
            max_pool_backward(grad, x, *window, indices),
            aten.max_pool2d_with_indices_backward(grad, x, *window, indices),
        )
