"""The attention part: attention_tc's sweep and emmy.compile's pick beside SDPA's backends, and
the gradients."""

from __future__ import annotations

import torch

import emmy.api
from gpucheck.context import Context, Problem, compiled_seconds, kernel_sweep, wrong_output
from gpucheck.product_parts import CausalAttention
from gpucheck.settings import FIRST_SHARE

#: the scaled_dot_product_attention backends, by their names in torch.nn.attention.SDPBackend
SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                 "cudnn": "CUDNN_ATTENTION", "math": "MATH"}  # fmt: skip


def sdpa_part(ctx: Context, path: tuple, q, k, v, flops: int) -> None:
    """torch's SDPA on the device's tensors: the backend it picks by itself, then each
    backend that runs there (torch.nn.attention.sdpa_kernel), in TFLOP/s."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    sdpa = torch.nn.functional.scaled_dot_product_attention
    choice = ctx.attempt(
        "SDPA's own choice", lambda: SDPBackend(torch._fused_sdp_choice(q, k, v, is_causal=True))
    )
    if choice is not None:
        names = {member: name for name, member in SDPA_BACKENDS.items()}
        ctx.emit((*path, "sdpa_backend"), names.get(choice.name, choice.name.lower()))
    seconds = ctx.timed("SDPA", lambda: sdpa(q, k, v, is_causal=True))
    if seconds is not None:
        ctx.emit((*path, "sdpa_tflops"), flops / seconds / 1e12)

    for name, member in SDPA_BACKENDS.items():
        backend = getattr(SDPBackend, member, None)
        if backend is None:
            ctx.note(f"SDPA {name}: this torch has no such backend")
            continue
        with sdpa_kernel(backend):
            seconds = ctx.timed(f"SDPA {name}", lambda: sdpa(q, k, v, is_causal=True))
        if seconds is not None:
            ctx.emit((*path, "sdpa_backends", name), flops / seconds / 1e12)
            print(f"  SDPA {name:10} {flops / seconds / 1e12:8.1f} TFLOP/s", flush=True)


def attention_part(ctx: Context) -> None:
    """Causal attention, bf16, head dim 128, 32 heads (fewer at --scale), at 2k, 4k and 8k
    tokens, in TFLOP/s: attention_tc's sweep (in full at 2k), what emmy.compile picks for
    the whole attention, and torch's SDPA with each backend."""
    lengths = [max(16, length // ctx.scale) for length in (2048, 4096, 8192)]
    lengths = lengths[:1] if ctx.quick else lengths
    carried: list[dict] | None = None
    for index, length in enumerate(lengths):
        until = ctx.share(FIRST_SHARE if index == 0 else 1 / (len(lengths) - index))
        order = ctx.attempt(f"attention {length}", attention_length, ctx, length, carried, until)
        order = order or []
        carried = order if carried is None else carried


def attention_length(ctx: Context, length: int, carried, until: float) -> list[dict]:
    """One attention target (see attention_part); attention_tc's configs, fastest first."""
    from emmy.runtime.convert import to_storage

    bh, d = max(1, 32 // ctx.scale), 128
    path = (str(length),)
    flops = 4 * bh * length * length * d // 2  # causal: half the scores
    generator = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn((1, bh, length, d), generator=generator).to(torch.bfloat16) for _ in range(3)
    )
    dq, dk, dv = (ctx.on_device(t) for t in (q, k, v))
    ctx.attempt(f"{length} SDPA", sdpa_part, ctx, path, dq, dk, dv, flops)
    key = {"bh": bh, "kv_bh": bh, "q_len": length, "kv_len": length, "d": d, "T": "bf16",
           "causal": "yes", "scale": repr(d**-0.5)}  # fmt: skip
    if carried is None:  # the first length's
        ctx.attempt(f"{length} backward", attention_backward_part, ctx, path, key, (q, k, v), flops)
    arrays = [to_storage(t.view(bh, length, d)) for t in (q, k, v)]
    picked = ctx.attempt(
        f"{length} emmy.compile", compiled_seconds, ctx, CausalAttention(), [q, k, v],
        ("attention_tc", key, arrays),
    )  # fmt: skip
    if picked is not None:
        ctx.emit((*path, "pick_tflops"), flops / picked[0] / 1e12)
        ctx.emit((*path, "pick"), picked[1])
    output = (bh, length, d)
    problem = Problem("attention_tc", key, arrays, output, lambda s: flops / s / 1e12, "tflops")
    return kernel_sweep(ctx, path, problem, carried, until)


class CausalAttentionBackward(torch.nn.Module):
    """The gradients of a causal attention's q, k and v from its output's (emmy's op that
    SDPA's backward becomes under torch.compile(backend=emmy))."""

    def forward(self, grad, q, k, v, out):
        scale = q.shape[-1] ** -0.5
        return torch.ops.emmy.attention_backward(grad, q, k, v, out, None, scale, True)


def attention_backward_part(ctx: Context, path: tuple, key: dict, qkv: tuple, flops: int) -> None:
    """A causal attention's gradients in TFLOP/s (2.5 times the forward's FLOPs, as torch
    counts them): emmy.compile with each path of the choice pinned (emmy's FlashAttention-2
    kernels; the vendor library's backward, its forward recomputed) and torch's SDPA
    backward alone, from a forward kept; emmy's outputs checked against float64 first."""
    from emmy.runtime.convert import to_storage

    q, k, v = qkv
    generator = torch.Generator().manual_seed(1)
    grad = torch.randn(q.shape, generator=generator).to(q.dtype)
    out = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), is_causal=True
    ).to(q.dtype)
    arrays = [to_storage(t) for t in (q, k, v, grad)]
    inputs = [ctx.on_device(t) for t in (grad, q, k, v, out)]
    module = CausalAttentionBackward().to(ctx.device.torch_device)
    figure = flops * 5 // 2 / 1e12
    for label, pins in (("emmy kernels", "path=fused"), ("vendor", "path=sdpa")):
        compiled = ctx.attempt(
            f"backward emmy.compile {label}", emmy.api.compile, module, *inputs,
            device=ctx.device, pins=pins,
        )  # fmt: skip
        if compiled is None:
            continue
        outputs = list(compiled(*inputs))
        wrong = wrong_output(ctx, "vendor_attention_backward", key, arrays, outputs)
        if wrong is not None:
            ctx.note(f"backward {label}: wrong result: {wrong}")
            continue
        seconds = ctx.timed(f"backward {label}", lambda c=compiled: c(*inputs), launches=True)
        if seconds is not None:
            ctx.emit((*path, "backward", f"{label}_tflops"), figure / seconds)
            print(f"  backward {label:14} {figure / seconds:8.1f} TFLOP/s", flush=True)
    leaves = [ctx.on_device(t).requires_grad_() for t in (q, k, v)]
    result = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=True)
    seconds = ctx.timed(
        "backward SDPA",
        lambda: torch.autograd.grad(result, leaves, inputs[0], retain_graph=True),
    )
    if seconds is not None:
        ctx.emit((*path, "backward", "sdpa_tflops"), figure / seconds)
        print(f"  backward {'SDPA':14} {figure / seconds:8.1f} TFLOP/s", flush=True)
