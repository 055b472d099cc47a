"""The product parts: matmul_tc at 4096³ and model shapes, convolutions and their weight
gradients, and split-K, beside the vendor library."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from emmy.base.problem_key import ProblemKey, SiteRef
from emmy.runtime.device import BufferArg
from gpucheck.context import (
    Context,
    Problem,
    checked_timing,
    compiled_seconds,
    kernel_sweep,
    site_pick,
    time_config,
)
from gpucheck.settings import FIRST_SHARE


def matmul_shapes(scale: int, quick: bool) -> dict[str, tuple[int, int, int]]:
    """(m, n, k) of the bf16 matmul targets: 4096³, then GPT-2's (1024 tokens) and
    Llama-1B's (2048 tokens) projections; every size divided by `scale`."""
    shapes = {
        "4096^3": (4096, 4096, 4096),
        "gpt2 qkv": (1024, 2304, 768),
        "gpt2 mlp": (1024, 3072, 768),
        "gpt2 lm_head": (1024, 50257, 768),
        "llama-1b mlp up": (2048, 8192, 2048),
        "llama-1b mlp down": (2048, 2048, 8192),
    }
    scaled = {
        name: tuple(max(16, size // scale) for size in shape) for name, shape in shapes.items()
    }
    return dict(list(scaled.items())[:1]) if quick else scaled


class Matmul(torch.nn.Module):
    def forward(self, a, b):
        return a @ b


class CausalAttention(torch.nn.Module):
    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def over_shapes(
    ctx: Context,
    what: str,
    shapes: dict,
    measure: Callable,
    first_also: tuple[str, Callable] | None = None,
) -> None:
    """`measure(ctx, label, shape, carried, until)` at each shape in its share of the
    part's time: the first shape's sweep in full, its fastest configs carried to the
    others; right after the first, `first_also` (what it measures, and how: called with
    ctx, label and shape) where given."""
    carried: list[dict] | None = None
    for index, (label, shape) in enumerate(shapes.items()):
        until = ctx.share(FIRST_SHARE if index == 0 else 1 / (len(shapes) - index))
        order = ctx.attempt(f"{what} {label}", measure, ctx, label, shape, carried, until)
        carried = (order or []) if carried is None else carried
        if index == 0 and first_also is not None:
            also, run = first_also
            ctx.attempt(f"{what} {label} {also}", run, ctx, label, shape)


def matmul_part(ctx: Context) -> None:
    """The tensor-core matmul at each target shape, bf16, in TFLOP/s: its sweep (in full
    at the first shape), the compile's pick for the kernel site, the vendor option,
    emmy.compile's pick for the whole product, and torch.matmul."""
    over_shapes(ctx, "matmul", matmul_shapes(ctx.scale, ctx.quick), matmul_shape)


def matmul_shape(ctx: Context, label: str, shape: tuple, carried, until: float) -> list[dict]:
    """One matmul target (see matmul_part); matmul_tc's configs, fastest first."""
    from emmy.program import host_call_of
    from emmy.runtime.convert import to_storage

    m, n, k = shape
    path, flops = (label,), 2 * m * n * k
    ctx.emit((*path, "shape"), [m, n, k])
    generator = torch.Generator().manual_seed(0)
    a = torch.randn((1, m, k), generator=generator).to(torch.bfloat16)
    b = torch.randn((1, k, n), generator=generator).to(torch.bfloat16)
    da, db = ctx.on_device(a), ctx.on_device(b)
    seconds = ctx.timed(f"{label} torch.matmul", lambda: da @ db)
    if seconds is not None:
        ctx.emit((*path, "torch_tflops"), flops / seconds / 1e12)
    arrays = [to_storage(a), to_storage(b)]
    key = {"batch": 1, "m": m, "n": n, "k": k, "b_batch": 1, "T": "bf16",
           "epilogue": "acc", "inputs": ""}  # fmt: skip
    checked = ("matmul_tc", key, arrays)
    picked = ctx.attempt(f"{label} emmy.compile", compiled_seconds, ctx, Matmul(), [a, b], checked)
    if picked is not None:
        ctx.emit((*path, "pick_tflops"), flops / picked[0] / 1e12)
        ctx.emit((*path, "pick"), picked[1])
    sizes = {"batch": 1, "m": m, "n": n, "k": k, "b_batch": 1, "layout": "kn", "T": "bf16"}
    vendor_site = SiteRef("vendor_matmul", ProblemKey.of(sizes.items()))
    args = (BufferArg("in0"), BufferArg("in1"), BufferArg("out"))
    buffers = {"in0": arrays[0], "in1": arrays[1], "out": np.empty((1, m, n), np.uint16)}
    vendor = ctx.attempt(
        f"{label} vendor option", checked_timing, ctx, "",
        [host_call_of(vendor_site, args)], buffers, checked,
    )  # fmt: skip
    if vendor is not None:
        ctx.emit((*path, "vendor_tflops"), flops / vendor / 1e12)
    problem = Problem("matmul_tc", key, arrays, (1, m, n), lambda s: flops / s / 1e12, "tflops")
    return kernel_sweep(ctx, path, problem, carried, until)


def conv_shapes(scale: int, quick: bool) -> dict[str, tuple[int, int, int, int, int, int]]:
    """(batch, in channels, image size, out channels, filter size, stride) of the bf16
    convolution targets: ResNet-50's at batch 32 (the stem, a 3×3 of each stage, a 1×1
    expansion) and Stable Diffusion's UNet at a 64×64 latent, batch 2 (its 3×3s at 320,
    640 and 1280 channels); channels and sizes divided by `scale`."""
    shapes = {
        "resnet50 stem 7x7/2": (32, 3, 224, 64, 7, 2),
        "resnet50 3x3 64@56": (32, 64, 56, 64, 3, 1),
        "resnet50 1x1 128->512@28": (32, 128, 28, 512, 1, 1),
        "resnet50 3x3 256@14": (32, 256, 14, 256, 3, 1),
        "unet 3x3 320@64": (2, 320, 64, 320, 3, 1),
        "unet 3x3 640@32": (2, 640, 32, 640, 3, 1),
        "unet 3x3 1280@16": (2, 1280, 16, 1280, 3, 1),
    }
    scaled = {
        name: (batch, max(3, cin // scale), max(8, hw // scale), max(8, cout // scale), f, s)
        for name, (batch, cin, hw, cout, f, s) in shapes.items()
    }
    return dict(list(scaled.items())[1:2]) if quick else scaled


class Conv(torch.nn.Module):
    """A convolution of a fixed bf16 weight, no bias, padded to keep its size."""

    def __init__(self, weight: torch.Tensor, stride: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(weight, requires_grad=False)
        self.stride = stride

    def forward(self, x):
        padding = self.weight.shape[-1] // 2
        return torch.nn.functional.conv2d(x, self.weight, stride=self.stride, padding=padding)


def conv_part(ctx: Context) -> None:
    """The tensor-core convolution (conv_tc, an implicit GEMM) at each target shape, bf16,
    in TFLOP/s: its sweep (in full at the first shape), the compile's pick for the kernel
    site, emmy.compile's pick for the whole convolution (on a GPU with no evidence: the
    vendor library), and torch's conv2d (cuDNN); at the first shape, its weight gradient
    (conv_weight_gradient)."""
    shapes = conv_shapes(ctx.scale, ctx.quick)
    over_shapes(ctx, "conv", shapes, conv_shape, ("weight gradient", conv_weight_gradient))


def conv_weight_gradient(ctx: Context, label: str, shape: tuple) -> None:
    """The first target's weight gradient, bf16, in microseconds: conv_weight at the
    compile's pick and each split of its depth the compiler offers (the parts' kernel plus
    split_sum, each at the compile's pick), beside torch's (cuDNN's)."""
    from emmy.families.conv import check_key
    from emmy.families.conv_weight import weight_of
    from emmy.families.conv_weight_path import splits_for
    from emmy.runtime.convert import to_storage

    batch, cin, hw, cout, size, stride = shape
    forward = check_key("bf16", batch, cin, (hw, hw), cout, (size, size), stride, size // 2)
    key = weight_of(forward)
    path = (label, "weight_gradient")
    generator = torch.Generator().manual_seed(0)
    x = torch.randn((batch, cin, hw, hw), generator=generator).to(torch.bfloat16)
    dy = torch.randn((batch, cout, key["oh"], key["ow"]), generator=generator).to(torch.bfloat16)
    weight = torch.empty((cout, cin, size, size), dtype=torch.bfloat16)
    dx, ddy, dweight = ctx.on_device(x), ctx.on_device(dy), ctx.on_device(weight)
    geometry = ([stride] * 2, [size // 2] * 2, [1, 1], False, [0, 0], 1, [False, True, False])
    seconds = ctx.timed(
        f"{label} torch weight gradient",
        lambda: torch.ops.aten.convolution_backward(ddy, dx, dweight, None, *geometry),
    )
    if seconds is not None:
        ctx.emit((*path, "torch_microseconds"), seconds * 1e6)
    arrays = [to_storage(dy.reshape(batch, cout, -1)), to_storage(x)]
    for split in [1, *splits_for(key)]:
        seconds = ctx.attempt(
            f"{label} weight gradient split {split}", split_k_seconds, ctx, "conv_weight", key,
            arrays, (cout, key["kdim"]), split,
        )  # fmt: skip
        if seconds is not None:
            ctx.emit((*path, "microseconds", str(split)), seconds * 1e6)
            print(f"  {label} weight gradient split {split}: {seconds * 1e6:.1f} us", flush=True)


def conv_shape(ctx: Context, label: str, shape: tuple, carried, until: float) -> list[dict]:
    """One convolution target (see conv_part); conv_tc's configs, fastest first."""
    from emmy.families.conv import check_key
    from emmy.runtime.convert import to_storage

    batch, cin, hw, cout, size, stride = shape
    key = check_key("bf16", batch, cin, (hw, hw), cout, (size, size), stride, size // 2, bias=False)
    path, flops = (label,), 2 * batch * cout * key["spatial"] * key["kdim"]
    ctx.emit((*path, "shape"), list(shape))
    generator = torch.Generator().manual_seed(0)
    x = torch.randn((batch, cin, hw, hw), generator=generator).to(torch.bfloat16)
    weight = torch.randn((cout, cin, size, size), generator=generator) / key["kdim"] ** 0.5
    weight = weight.to(torch.bfloat16)
    dx, dw = ctx.on_device(x), ctx.on_device(weight)
    conv = torch.nn.functional.conv2d
    seconds = ctx.timed(
        f"{label} torch conv2d", lambda: conv(dx, dw, stride=stride, padding=size // 2)
    )
    if seconds is not None:
        ctx.emit((*path, "torch_tflops"), flops / seconds / 1e12)
    arrays = [to_storage(x), to_storage(weight.reshape(cout, -1))]
    checked = ("conv_tc", key, arrays)
    module = Conv(weight, stride)
    picked = ctx.attempt(f"{label} emmy.compile", compiled_seconds, ctx, module, [x], checked)
    if picked is not None:
        ctx.emit((*path, "pick_tflops"), flops / picked[0] / 1e12)
        ctx.emit((*path, "pick"), picked[1])
    output = (batch, cout, key["spatial"])
    problem = Problem("conv_tc", key, arrays, output, lambda s: flops / s / 1e12, "tflops")
    return kernel_sweep(ctx, path, problem, carried, until)


def split_k_part(ctx: Context) -> None:
    """A decode-sized product (16 x 4096 · 4096 x 4096, bf16): one block per 64 x 64 tile
    leaves most multiprocessors idle, and split-K gives them work. The one kernel and each
    split the compiler offers (its parts' kernel plus split_sum, each at the compile's
    pick), in microseconds, beside torch.matmul."""
    from emmy.families.matmul_path import splits_for
    from emmy.runtime.convert import to_storage

    m, n, k = 16, max(64, 4096 // ctx.scale), max(512, 4096 // ctx.scale)
    key = {"batch": 1, "m": m, "n": n, "k": k, "b_batch": 1, "T": "bf16"}
    key |= {"epilogue": "acc", "inputs": ""}
    generator = torch.Generator().manual_seed(0)
    a = torch.randn((1, m, k), generator=generator).to(torch.bfloat16)
    b = torch.randn((1, k, n), generator=generator).to(torch.bfloat16)
    arrays = [to_storage(a), to_storage(b)]
    ctx.emit(("shape",), [m, n, k])
    da, db = ctx.on_device(a), ctx.on_device(b)
    seconds = ctx.timed("torch.matmul", lambda: da @ db)
    if seconds is not None:
        ctx.emit(("torch_microseconds",), seconds * 1e6)
    for split in [1, *splits_for(key)]:
        seconds = ctx.attempt(
            f"split {split}", split_k_seconds, ctx, "matmul_tc", key, arrays, (1, m, n), split
        )
        if seconds is not None:
            ctx.emit(("microseconds", str(split)), seconds * 1e6)
            print(f"  split-K {m}x{n}x{k} split {split}: {seconds * 1e6:.1f} us", flush=True)


def split_k_seconds(
    ctx: Context, family_name: str, key: dict, arrays: list, out_shape: tuple, split: int
) -> float:
    """Device seconds of a split-K site: at split 1 the family's kernel alone; else its
    kernel's f32 parts (of `split` slices of the sum) plus split_sum adding them up, each
    at the compile's pick and checked."""
    if split == 1:
        config = site_pick(ctx, family_name, key)
        return time_config(ctx, family_name, key, config, arrays, out_shape)
    size = math.prod(out_shape)
    parts_key = {**key, "split": split}
    sum_key = {"split": split, "size": size, "n": out_shape[-1], "T": key["T"]}
    sum_key |= {"epilogue": "acc", "inputs": ""}
    parts = np.random.default_rng(split).standard_normal((split, size), np.float32)
    parts_config = site_pick(ctx, family_name, parts_key)
    sum_config = site_pick(ctx, "split_sum", sum_key)
    return time_config(
        ctx, family_name, parts_key, parts_config, arrays, (split, size), np.float32
    ) + time_config(ctx, "split_sum", sum_key, sum_config, [parts], (size,))
