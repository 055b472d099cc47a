"""Training steps under torch.compile(backend=emmy), as their users write them: the model
in train mode, a loss, backward, an optimizer step; three steps against eager, the losses
and the first step's gradients compared. Every forward and backward graph is compiled by
emmy with no op left to torch (fallback refused, strict), so all of each graph's FLOPs
run in emmy's kernels; the backward ops reach emmy as the forms
emmy.frontend.decompositions gives them (checked against torch's in float64 here). A
compiled optimizer step runs in emmy's kernels too, in both of torch's forms."""

from __future__ import annotations

import copy
import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

import emmy.api
from emmy.frontend.decompositions import (
    adaptive_avg_pool_backward,
    adaptive_max_pool_backward,
    attention_backward,
    avg_pool_backward,
    batch_norm_backward,
    batch_norm_training,
    convolution_backward,
    cudnn_attention_backward,
    efficient_attention_backward,
    embedding_backward,
    flash_attention_backward,
    layer_norm_backward,
    max_pool_backward,
)
from emmy.frontend.tiny_training import TRAINING
from emmy.runtime.emu import EmuDevice

aten = torch.ops.aten

#: the first step's gradients, relative to their norm (f32 kernels against f32 eager)
GRADIENT_TOLERANCE = 1e-3


OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2),
}


@pytest.mark.parametrize("name", TRAINING)
def test_three_training_steps_match_eager(name: str) -> None:
    """Each model trains three steps with SGD (momentum) and with AdamW; each step's loss
    is eager's and so are the first step's gradients and, at the end, the buffers (a
    BatchNorm's running statistics). GPT-2 keeps its dropout (0.1): seeded alike, the
    compiled step draws eager's masks."""
    step = TRAINING[name]()
    compiled, inputs, loss_of = step.model, step.inputs, step.loss
    eager = copy.deepcopy(compiled)
    initial = copy.deepcopy(compiled.state_dict())
    programs: list = []
    backend = emmy.api.backend(device=EmuDevice(), programs=programs, db="none", fallback=False)
    torch._dynamo.reset()
    compiled_loss = torch.compile(loss_of, backend=backend)
    for optimizer_name, make_optimizer in OPTIMIZERS.items():
        # both start afresh from the same weights, in place: the compiled step is reused
        for model in (compiled, eager):
            model.load_state_dict(initial)
            model.zero_grad(set_to_none=True)
        optimizers = make_optimizer(compiled.parameters()), make_optimizer(eager.parameters())
        for index in range(3):
            torch.manual_seed(index)  # dropout's masks: the same draws for both
            loss = compiled_loss(compiled, *inputs)
            loss.backward()
            torch.manual_seed(index)
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
    # forward and backward graphs, compiled once for both optimizers' steps
    assert len(programs) >= 2 and len(programs) % 2 == 0, len(programs)
    torch._dynamo.reset()


@pytest.mark.parametrize("form", ["for-loop", "foreach", "fused"])
@pytest.mark.parametrize("optimizer_name", ["sgd", "adamw"])
def test_a_compiled_optimizer_step_updates_the_parameters_as_eager(
    optimizer_name: str, form: str
) -> None:
    """`torch.compile` of `optimizer.step()`, in place over the parameter list: the
    single-tensor form (a CPU's default) and the multi-tensor `_foreach_` form (a GPU's),
    which reaches emmy as single-tensor ops; Adam's moments as fused multiply-adds. The
    fused form (`fused=True`) is torch's own kernel, of which dynamo hands no compiler a
    graph (torch wraps `_fused_adam` in `torch.compiler.disable`): it runs eagerly, as
    under Inductor, and gives eager's parameters."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    eager = copy.deepcopy(model)
    forms = {"foreach": form == "foreach", "fused": form == "fused"}

    def optimizer_of(module: nn.Module) -> torch.optim.Optimizer:
        if optimizer_name == "sgd":
            return torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9, **forms)
        return torch.optim.AdamW(module.parameters(), lr=1e-2, **forms)

    compiled_optimizer, eager_optimizer = optimizer_of(model), optimizer_of(eager)
    programs: list = []
    backend = emmy.api.backend(device=EmuDevice(), programs=programs, db="none", fallback=False)
    torch._dynamo.reset()
    step = torch.compile(compiled_optimizer.step, backend=backend)
    x = torch.randn(4, 8)
    for _ in range(3):
        for module in (model, eager):
            module(x).square().mean().backward()
        step()
        eager_optimizer.step()
        compiled_optimizer.zero_grad()
        eager_optimizer.zero_grad()
    for got, want in zip(model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert bool(programs) == (form != "fused")
    torch._dynamo.reset()


@pytest.mark.parametrize("name", ["gpt2", "vit"])
def test_a_bf16_autocast_training_step_matches_eager(name: str) -> None:
    """Under autocast to bf16 (as most GPU training runs), one step's forward and backward
    graphs compile strict, and the loss and the gradients are eager autocast's within bf16's
    rounding: both compute the products in bf16, in different orders."""
    step = TRAINING[name]()
    eager = copy.deepcopy(step.model)
    programs: list = []
    backend = emmy.api.backend(device=EmuDevice(), programs=programs, db="none", fallback=False)
    torch._dynamo.reset()
    compiled_loss = torch.compile(step.loss, backend=backend)
    losses = []
    for loss_of, model in ((compiled_loss, step.model), (step.loss, eager)):
        torch.manual_seed(0)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_of(model, *step.inputs)
        loss.backward()
        losses.append(loss.detach().float())
    torch.testing.assert_close(losses[0], losses[1], rtol=2e-3, atol=1e-3)
    got = torch.cat([p.grad.flatten() for p in step.model.parameters()])
    want = torch.cat([p.grad.flatten() for p in eager.parameters()])
    error = (got - want).norm() / want.norm()
    assert error < 3e-2, f"relative error {error:.2e}"
    assert len(programs) >= 2 and len(programs) % 2 == 0, len(programs)
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


def test_the_transposed_convolution_gradients_are_torchs() -> None:
    """A transposed convolution's (ConvTranspose's, and a strided convolution's input
    gradient's): strides with and without an output_padding, paddings, dilations, groups,
    1-D and 2-D."""
    torch.manual_seed(0)
    for dims, size, stride, pad, dilation, groups in itertools.product(
        (1, 2), (1, 3), (1, 2, 3), (0, 1), (1, 2), (1, 2)
    ):
        extra = max(stride, dilation) - 1
        if 5 * stride + dilation * (size - 1) + extra <= 2 * pad:
            continue
        x = torch.randn([2, 4] + [5] * dims, dtype=torch.float64)
        weight = torch.randn([4, 6 // groups] + [size] * dims, dtype=torch.float64)
        arguments = ([stride] * dims, [pad] * dims, [dilation] * dims, True, [extra] * dims, groups)
        grad = torch.randn_like(aten.convolution(x, weight, None, *arguments))
        expected = aten.convolution_backward(grad, x, weight, [6], *arguments, [True] * 3)
        got = convolution_backward(grad, x, weight, [6], *arguments, [True] * 3)
        for want, have in zip(expected, got, strict=True):
            torch.testing.assert_close(have, want)


def _backward_kernels_matching_eager(model: nn.Module, x: torch.Tensor) -> list[str]:
    """The families of the kernels the backward graph of a step of `model` on `x` runs
    (torch.compile(backend=emmy), strict), its parameters' gradients checked against
    eager's."""
    return _kernels_matching_eager(model, x)[-1]


def _kernels_matching_eager(model: nn.Module, x: torch.Tensor) -> list[list[str]]:
    """The families of the kernels each graph of a step of `model` on `x` runs, forward
    then backward, as _backward_kernels_matching_eager checks them."""
    programs: list = []
    backend = emmy.api.backend(device=EmuDevice(), programs=programs, db="none", fallback=False)
    torch._dynamo.reset()
    torch.compile(lambda m, x: m(x).square().sum(), backend=backend)(model, x).backward()
    torch._dynamo.reset()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).square().sum().backward()
    for have, parameter in zip(got, model.parameters(), strict=True):
        torch.testing.assert_close(have, parameter.grad, rtol=1e-4, atol=1e-4)
    return [[call.kernel.rsplit("_", 1)[0] for call in p.calls] for p in programs]


def test_every_convolution_gradient_reads_do_and_the_input_in_place() -> None:
    """Convolutions of stride 1 (padded, dilated), of stride 2, and a transposed one
    (ConvTranspose2d with an output_padding): each input gradient is one convolution kernel
    reading dO in place (at stride 1 dO padded by the convolution itself, otherwise a
    transposed convolution), each weight gradient one conv_weight kernel reading dO and the
    input in place: no copy of either (no `cat`, no `permute`; the loss's gradient, an
    expanded scalar, is read as one); the gradients are eager's."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
        nn.Conv2d(8, 8, 3, stride=2, padding=1),
        nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1), nn.ReLU(),
        nn.Conv2d(4, 4, 3, padding=2, dilation=2),
        nn.Flatten(), nn.Linear(4 * 64, 4),
    )  # fmt: skip
    kernels = _backward_kernels_matching_eager(model, torch.randn(2, 3, 8, 8))
    # the input gradients of all but the first, the weight gradients of all
    assert kernels.count("conv") == 3 and kernels.count("conv_weight") == 4, kernels
    assert "cat" not in kernels and "permute" not in kernels, kernels


def test_the_batch_norm_forms_are_torchs() -> None:
    """A training BatchNorm's forward (batch statistics, the running ones updated) and its
    gradients, over 2-D, 3-D and 4-D inputs, with and without affine parameters; the
    statistics are f32 (emmy's kernels accumulate in f32) in a float64 program."""
    torch.manual_seed(0)
    close = {"rtol": 1e-5, "atol": 1e-6}
    for shape, affine in itertools.product(((6, 4), (3, 4, 5), (2, 4, 3, 5)), (True, False)):
        x = torch.randn(shape, dtype=torch.float64) * 2.0 + 3.0
        weight, bias = (torch.randn(4, dtype=torch.float64) if affine else None for _ in "wb")
        running = [torch.rand(4, dtype=torch.float64) for _ in "mv"]
        forward = (x, weight, bias, *running, True, 0.1, 1e-5)
        want = aten._native_batch_norm_legit_functional(*forward)
        got = batch_norm_training(*forward)
        for have, expected in zip(got, want, strict=True):
            torch.testing.assert_close(have, expected, **close)
        grad = torch.randn_like(x)
        backward = (grad, x, weight, *running, want[1], want[2], True, 1e-5, [True, affine, affine])
        expected = aten.native_batch_norm_backward(*backward)
        for have, theirs in zip(batch_norm_backward(*backward), expected, strict=True):
            if theirs is None:
                assert have is None
                continue
            torch.testing.assert_close(have, theirs, **close)


def test_a_batch_norms_statistics_and_gradients_read_each_channel_in_place() -> None:
    """A training BatchNorm2d and BatchNorm1d: the forward's batch statistics and the
    backward's two sums are one batch_norm_stats kernel each per norm, and the per-channel
    scale and shift are read per channel by the elementwise kernels (no copy of an
    activation's size); losses and gradients are eager's."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(),
        nn.Flatten(), nn.Linear(4 * 36, 5), nn.BatchNorm1d(5),
    )  # fmt: skip
    eager = copy.deepcopy(model)
    x = torch.randn(3, 3, 6, 6)
    programs: list = []
    backend = emmy.api.backend(device=EmuDevice(), programs=programs, db="none", fallback=False)
    torch._dynamo.reset()
    loss = torch.compile(lambda m, x: m(x).square().sum(), backend=backend)(model, x)
    loss.backward()
    torch._dynamo.reset()
    expected = eager(x).square().sum()
    expected.backward()
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
    _assert_gradients_close(model, eager)
    for buffer, theirs in zip(model.buffers(), eager.buffers(), strict=True):
        torch.testing.assert_close(buffer, theirs)  # the running statistics
    for program in programs:
        kernels = {call.kernel: program.kernels[call.kernel] for call in program.calls}
        assert sum(k.site.family == "batch_norm_stats" for k in kernels.values()) == 2, kernels
        copies = [str(k.site.key) for k in kernels.values() if k.site.family == "permute"]
        activation = 3 * 4 * 6 * 6  # the BatchNorm2d's
        assert all(_copied(key) < activation for key in copies), copies


def _copied(permute_key: str) -> int:
    """The elements a permute kernel writes: the product of its key's output dims."""
    fields = dict(field.split("=") for field in permute_key.split(","))
    return math.prod(
        int(value) for name, value in fields.items() if name[0] == "d" and name[1:].isdigit()
    )


def test_the_layers_around_convolutions_train_in_emmys_kernels() -> None:
    """GroupNorm (its forward saving each group's mean and rstd), InstanceNorm (a batch
    norm of no running statistics), PixelShuffle and the activations whose backward ops
    torch decomposes (hardswish, mish, hardsigmoid, softplus): strict, gradients as
    eager's. Each of these raised or fell back before."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.Hardswish(),
        nn.Conv2d(8, 8, 3, padding=1), nn.InstanceNorm2d(8, affine=True), nn.Mish(),
        nn.PixelShuffle(2), nn.Conv2d(2, 4, 3, padding=1), nn.Hardsigmoid(), nn.Softplus(),
        nn.Flatten(), nn.Linear(4 * 100, 3),
    )  # fmt: skip
    kernels = _backward_kernels_matching_eager(model, torch.randn(2, 3, 5, 5))
    assert kernels.count("batch_norm_stats") == 1, kernels  # the InstanceNorm's


def test_average_poolings_gradients_run_in_one_kernel_each() -> None:
    """Average pooling, padded without counting the padding, then ceil_mode's ragged last
    window over a divisor: each input gradient is one pool2d_backward kernel (torch has no
    decomposition of avg_pool2d_backward); the gradients are eager's."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False),
        nn.ReLU(),
        nn.AvgPool2d(2, ceil_mode=True, divisor_override=3),
        nn.Conv2d(4, 4, 1),
        nn.Flatten(),
        nn.Linear(4 * 9, 2),
    )
    kernels = _backward_kernels_matching_eager(model, torch.randn(2, 3, 10, 10))
    assert kernels.count("pool2d_backward") == 2, kernels


def test_an_embedding_scaled_by_frequency_trains_in_its_kernel() -> None:
    """scale_grad_by_freq with a padding row: the weight's gradient is one
    embedding_backward kernel, each row over its tokens' count, as eager's."""
    torch.manual_seed(0)
    model = nn.Embedding(10, 6, padding_idx=2, scale_grad_by_freq=True)
    ids = torch.tensor([[1, 2, 1, 7], [7, 7, 0, 2]])
    kernels = _backward_kernels_matching_eager(model, ids)
    assert kernels.count("embedding_backward") == 1, kernels


def test_adaptive_poolings_gradients_run_in_one_kernel_each() -> None:
    """Adaptive average pooling to a size that is no divisor of the plane's (windows that
    overlap), then adaptive max pooling: each input gradient is one pool2d_backward kernel
    over adaptive windows (torch has no decomposition of adaptive_max_pool2d_backward; a
    model with either did not train strict); the gradients are eager's."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d((4, 3)), nn.ReLU(),
        nn.Conv2d(4, 4, 1), nn.AdaptiveMaxPool2d((3, 2)), nn.Flatten(), nn.Linear(4 * 6, 2),
    )  # fmt: skip
    kernels = _backward_kernels_matching_eager(model, torch.randn(2, 3, 9, 7))
    assert kernels.count("pool2d_backward") == 2, kernels


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
        # a GPU's backward ops, with their own arguments, decompose to the same
        tensors = (grad, q.detach(), k.detach(), v.detach())
        out, unread = out.detach(), torch.empty(0)
        if mask_kind != "bool":
            for gpu in (
                efficient_attention_backward(
                    *tensors,
                    mask,
                    out,
                    unread,
                    unread,
                    unread,
                    0.0,
                    [True] * 3 + [False],
                    causal,
                    scale=0.3,
                )[:3],
                cudnn_attention_backward(
                    *tensors,
                    out,
                    unread,
                    unread,
                    unread,
                    mask,
                    unread,
                    unread,
                    8,
                    8,
                    0.0,
                    causal,
                    scale=0.3,
                ),
            ):
                for have, want in zip(gpu, got, strict=True):
                    torch.testing.assert_close(have, want, atol=0, rtol=0)
        if mask_kind is None:
            flash = flash_attention_backward(
                *tensors, out, unread, unread, unread, 8, 8, 0.0, causal, unread, unread, scale=0.3
            )
            for have, want in zip(flash, got, strict=True):
                torch.testing.assert_close(have, want, atol=0, rtol=0)


#: what runs an attention's gradients, by the `path` a compile is pinned to (none: emmy's
#: default on the emulator, its kernels)
GRADIENTS_BY_PATH = {
    "": ("kernels", {"attention_stats", "attention_dq", "attention_dkv"}),
    "path=sdpa": ("host_calls", {"vendor_attention", "vendor_attention_backward"}),
}


@pytest.mark.parametrize(
    ("causal", "group", "mask_kind", "q_len", "pins"),
    [
        (True, 1, None, 5, ""),
        (False, 2, "bool", 8, ""),
        (False, 1, "float", 5, ""),
        (True, 2, None, 8, ""),
        (True, 2, "float", 5, "path=sdpa"),
        (False, 2, "bool", 8, "path=sdpa"),
    ],
)
def test_sdpas_gradients_run_in_flash_attention_kernels_or_the_librarys(
    causal: bool, group: int, mask_kind: str | None, q_len: int, pins: str
) -> None:
    """SDPA's backward under torch.compile (strict) runs in attention_stats, attention_dq
    and attention_dkv, or pinned to `path=sdpa` in torch's SDPA backward (a host call, its
    forward recomputed under autograd): causal with fewer queries than keys, grouped-query,
    a boolean mask per batch and an additive one per head; the gradients are eager's."""
    torch.manual_seed(0)
    q = torch.randn(2, 4, q_len, 16, requires_grad=True)
    k = torch.randn(2, 4 // group, 8, 16, requires_grad=True)
    v = torch.randn(2, 4 // group, 8, 16, requires_grad=True)
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(2, 1, q_len, 8) > 0.3
        mask[..., 0] = True
    elif mask_kind == "float":
        mask = torch.randn(2, 4, q_len, 8)

    def loss_of(q, k, v, mask):
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal, scale=0.3, enable_gqa=group > 1
        )
        return (out * out).sum()

    programs: list = []
    backend = emmy.api.backend(
        device=EmuDevice(), programs=programs, db="none", fallback=False, pins=pins
    )
    torch._dynamo.reset()
    loss = torch.compile(loss_of, backend=backend)(q, k, v, mask)
    got = torch.autograd.grad(loss, (q, k, v))
    want = torch.autograd.grad(loss_of(q, k, v, mask), (q, k, v))
    torch._dynamo.reset()
    for have, expected in zip(got, want, strict=True):
        torch.testing.assert_close(have, expected, rtol=1e-4, atol=1e-5)
    where, families = GRADIENTS_BY_PATH[pins]
    if where == "kernels":
        ran = {call.kernel.rsplit("_", 1)[0] for p in programs for call in p.calls}
        assert families <= ran, ran
    else:
        ran = {h.family for p in programs for h in p.host_calls.values()}
        assert ran == families, ran


def test_the_attention_backward_op_lays_its_gradients_out_as_its_inputs() -> None:
    """emmy::attention_backward's eager form (what a step runs where emmy does not compile
    the graph) gives its fake's strides, the inputs': the graph around it views the
    gradients by them (q, k, v as a model's heads are, [batch, heads, len, d] over
    [batch, len, heads, d])."""
    q = torch.randn(2, 5, 4, 16).transpose(1, 2)
    k, v = (torch.randn(2, 8, 2, 16).transpose(1, 2) for _ in range(2))
    grad, out = torch.randn(2, 4, 5, 16), torch.randn(2, 4, 5, 16)
    gradients = torch.ops.emmy.attention_backward(grad, q, k, v, out, None, 0.25, True)
    for gradient, like in zip(gradients, (q, k, v), strict=True):
        assert gradient.shape == like.shape and gradient.stride() == like.stride()


#: a GPU's attentions below autograd (the flash one causal and scaled, the others under an
#: additive bias), as AOTAutograd hands a graph that calls them to the backend
GPU_ATTENTIONS = {
    "flash": lambda q, k, v, bias: aten._scaled_dot_product_flash_attention(
        q, k, v, 0.0, True, scale=0.3
    )[:1],
    "efficient": lambda q, k, v, bias: aten._scaled_dot_product_efficient_attention(
        q, k, v, bias, True
    )[:1],
    "cudnn": lambda q, k, v, bias: aten._scaled_dot_product_cudnn_attention(q, k, v, bias, True)[
        :1
    ],
}


@pytest.mark.parametrize("name", GPU_ATTENTIONS)
def test_a_gpus_attention_op_runs_in_emmys_kernels(name: str) -> None:
    """The ops SDPA becomes on a GPU, traced on the CPU through their meta kernels (no
    CPU kernel runs them), compiled strict by the backend and run on the emulator."""
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 5, 16), torch.randn(2, 4, 8, 16), torch.randn(2, 4, 8, 16)
    bias = torch.randn(2, 4, 5, 8)
    graph_module = make_fx(GPU_ATTENTIONS[name], tracing_mode="fake")(q, k, v, bias)
    backend = emmy.api.backend(device=EmuDevice(), fallback=False, strict=True)
    (got,) = backend(graph_module, [q, k, v, bias])(q, k, v, bias)
    if name == "flash":
        want = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3)
    else:
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    torch.testing.assert_close(got, want)


def test_the_layer_norm_gradients_are_torchs() -> None:
    """Over one and two trailing dims, with and without weight and bias, each gradient
    asked for alone: emmy's row kernel's eager form (f32) against torch's in float64."""
    torch.manual_seed(0)
    for normalized, affine, mask in itertools.product(
        ([7], [4, 7]), (True, False), ([True] * 3, [True, False, False], [False, True, True])
    ):
        x = torch.randn(3, 4, 7) * 2 + 0.5
        weight = torch.randn(normalized) if affine else None
        bias = torch.randn(normalized) if affine else None
        _, mean, rstd = aten.native_layer_norm(x, normalized, weight, bias, 1e-5)
        grad = torch.randn_like(x)
        # torch's CPU kernel fails on a gradient asked of an absent weight
        mask = [mask[0], mask[1] and affine, mask[2] and affine]
        arguments = (grad, x, normalized, mean, rstd, weight, bias, mask)
        as_double = [t.double() if isinstance(t, torch.Tensor) else t for t in arguments]
        expected = aten.native_layer_norm_backward(*as_double)
        got = layer_norm_backward(*arguments)
        for index, (want, have) in enumerate(zip(expected, got, strict=True)):
            if not mask[index]:
                assert have is None, (index, mask)
                continue
            torch.testing.assert_close(have.double(), want, atol=1e-5, rtol=1e-5)


def test_a_layer_norms_kernel_writes_the_statistics_its_backward_reads() -> None:
    """A residual add before a LayerNorm in a training step: one layer_norm kernel takes
    the add as its prologue and writes the sum (which the backward reads), y and each
    row's mean and rstd: no elementwise kernel or row reduction but the loss's; the
    backward reads them in layer_norm_backward; the gradients are eager's."""

    class Residual(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first, self.norm, self.last = nn.Linear(8, 32), nn.LayerNorm(32), nn.Linear(32, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.first(x)
            return self.last(self.norm(h + h.sin()))

    torch.manual_seed(0)
    forward, backward = _kernels_matching_eager(Residual(), torch.randn(6, 8))
    assert forward.count("layer_norm") == 1, forward
    assert forward.count("elementwise") == forward.count("reduce_rows") == 1, forward
    assert backward.count("layer_norm_backward") == 1, backward


def test_upsamplings_train_in_one_gather_kernel_each_way() -> None:
    """Nearest by a scale factor, bilinear to a size, bilinear with align_corners by a
    factor of 1.5 (a UNet's decoder, diffusion's): each forward is one resize2d kernel and
    each input gradient one resize2d_backward kernel, where torch's decomposition made a
    gather and an accumulating scatter by saved index tensors, which no model trained
    strict with; the gradients are eager's."""

    class Decoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)
            self.c = nn.Conv2d(4, 2, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = F.interpolate(self.a(x), scale_factor=2, mode="nearest")
            h = F.interpolate(self.b(h).relu(), size=(13, 11), mode="bilinear")
            return F.interpolate(self.c(h), scale_factor=1.5, mode="bilinear", align_corners=True)

    torch.manual_seed(0)
    forward, backward = _kernels_matching_eager(Decoder(), torch.randn(2, 3, 5, 6))
    assert forward.count("resize2d") == 3, forward
    assert backward.count("resize2d_backward") == 3, backward
    assert "gather" not in forward, forward  # the decomposition's gathers


def test_the_embedding_and_max_pooling_gradients_are_torchs() -> None:
    torch.manual_seed(0)
    for padding_idx, by_frequency in itertools.product((-1, 3), (False, True)):
        indices = torch.randint(0, 10, (3, 5))
        indices[0, 0] = 3
        grad = torch.randn(3, 5, 7, dtype=torch.float64)
        torch.testing.assert_close(
            embedding_backward(grad, indices, 10, padding_idx, by_frequency),
            aten.embedding_dense_backward(grad, indices, 10, padding_idx, by_frequency),
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


def test_the_average_pooling_gradients_are_torchs() -> None:
    """Overlapping, padded windows counting the padding or not, ceil_mode's ragged last
    window, a divisor (the eager form of emmy::avg_pool2d_backward)."""
    torch.manual_seed(0)
    for size, stride, pad, ceil, count_pad, divisor in itertools.product(
        (2, 3), (1, 2), (0, 1), (False, True), (False, True), (None, 5)
    ):
        x = torch.randn(2, 3, 8, 9, dtype=torch.float64)
        window = ([size] * 2, [stride] * 2, [pad] * 2, ceil, count_pad, divisor)
        grad = torch.randn_like(aten.avg_pool2d(x, *window))
        torch.testing.assert_close(
            avg_pool_backward(grad, x, *window), aten.avg_pool2d_backward(grad, x, *window)
        )


def test_the_adaptive_pooling_gradients_are_torchs() -> None:
    """Outputs fewer than the plane's elements, more (windows that share them), and as many."""
    torch.manual_seed(0)
    for out in ((3, 4), (11, 5), (8, 9)):
        x = torch.randn(2, 3, 8, 9, dtype=torch.float64)
        pooled, indices = aten.adaptive_max_pool2d(x, out)
        grad = torch.randn_like(pooled)
        torch.testing.assert_close(
            adaptive_max_pool_backward(grad, x, indices),
            aten.adaptive_max_pool2d_backward(grad, x, indices),
        )
        torch.testing.assert_close(
            adaptive_avg_pool_backward(grad, x), aten._adaptive_avg_pool2d_backward(grad, x)
        )
