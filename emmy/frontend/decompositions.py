"""The ATen ops the torch.compile backend has AOTAutograd decompose before emmy sees them:
a training step's backward ops and its losses, as forms of the ops emmy compiles. torch's
own decompositions where theirs are made of such ops; emmy's where theirs are not (an
embedding's gradient by a kernel of its own instead of an accumulating scatter; attention's
gradient by FlashAttention-2's kernels). An op never decomposed keeps its
fused kernel: the forward ops (layer_norm, softmax, attention) are none of these."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache

import torch

from emmy.frontend import ops

aten = torch.ops.aten

#: the ops whose torch decompositions emmy takes as they are: each is made of pointwise
#: ops, reductions, products and the scatters emmy compiles
TORCH_DECOMPOSED = [
    aten.nll_loss_forward,
    aten.nll_loss_backward,
    aten.threshold_backward,
    aten.gelu_backward,
    aten.silu_backward,
    aten.tanh_backward,
    aten.sigmoid_backward,
    aten.hardtanh_backward,
    aten.leaky_relu_backward,
    aten.elu_backward,
    aten.select_backward,
    aten.native_dropout_backward,
    aten._safe_softmax,
    aten.slice_backward,
    aten.hardswish_backward,
    aten.hardsigmoid_backward,
    aten.mish_backward,
    aten.softplus_backward,
    aten.logit_backward,
    aten.native_group_norm_backward,
    aten.pixel_shuffle,
    aten.pixel_unshuffle,
]


def embedding_backward(
    grad: torch.Tensor,
    indices: torch.Tensor,
    num_weights: int,
    padding_idx: int,
    scale_grad_by_freq: bool,
) -> torch.Tensor:
    """The embedding's weight gradient by one kernel that sums the tokens' gradient rows by
    id (`emmy::embedding_backward`, where torch's form is an accumulating scatter), each
    row over its tokens' count where `scale_grad_by_freq`; the padding row's tokens come as
    id -1, which adds to no row."""
    tokens = indices.reshape(-1)
    if padding_idx >= 0:
        tokens = torch.where(tokens == padding_idx, -1, tokens)
    rows = grad.reshape(tokens.numel(), grad.shape[-1])
    return ops.embedding_backward(rows, tokens, num_weights, scale_grad_by_freq)


def attention_backward(
    grad_out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    out: torch.Tensor,
    logsumexp: torch.Tensor,
    dropout_p: float,
    is_causal: bool,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """torch's CPU flash attention backward by emmy's FlashAttention-2 kernels
    (`emmy::attention_backward`): the probabilities recomputed from q, k and each query's
    statistics, so the forward's saved log-sum-exp is unread (and the forward saves none)."""
    if dropout_p:
        return NotImplemented
    factor = query.shape[-1] ** -0.5 if scale is None else scale
    return ops.attention_backward(
        grad_out, query, key, value, out, attn_mask, float(factor), bool(is_causal)
    )


def flash_attention_backward(
    grad_out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    out: torch.Tensor,
    logsumexp: torch.Tensor,
    cum_seq_q: torch.Tensor,
    cum_seq_k: torch.Tensor,
    max_q: int,
    max_k: int,
    dropout_p: float,
    is_causal: bool,
    philox_seed: torch.Tensor,
    philox_offset: torch.Tensor,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A GPU's flash attention backward (SDPA's on f16/bf16) as the CPU's."""
    return attention_backward(
        grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, scale=scale
    )


def efficient_attention_backward(
    grad_out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_bias: torch.Tensor | None,
    out: torch.Tensor,
    logsumexp: torch.Tensor,
    philox_seed: torch.Tensor,
    philox_offset: torch.Tensor,
    dropout_p: float,
    grad_input_mask: list[bool],
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None]:
    """A GPU's memory-efficient attention backward (SDPA's on f32 and under a mask) as the
    CPU's; a bias that wants its own gradient stays torch's."""
    if attn_bias is not None and grad_input_mask[3]:
        return NotImplemented
    gradients = attention_backward(
        grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, attn_bias, scale
    )
    return (*gradients, None)


def cudnn_attention_backward(
    grad_out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    out: torch.Tensor,
    logsumexp: torch.Tensor,
    philox_seed: torch.Tensor,
    philox_offset: torch.Tensor,
    attn_bias: torch.Tensor | None,
    cum_seq_q: torch.Tensor,
    cum_seq_k: torch.Tensor,
    max_q: int,
    max_k: int,
    dropout_p: float,
    is_causal: bool,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A GPU's cuDNN attention backward (SDPA's first choice on a Hopper) as the CPU's."""
    return attention_backward(
        grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, attn_bias, scale
    )


def layer_norm_backward(
    grad_out: torch.Tensor,
    input: torch.Tensor,
    normalized_shape: list[int],
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    output_mask: list[bool],
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """A LayerNorm's gradients over its normalised trailing dims as rows: the input's by one
    row kernel (`emmy::layer_norm_backward`, where torch's form is five row reductions and
    sweeps), the weight's and the bias's as sums over the rows, in f32."""
    cols = math.prod(normalized_shape)
    rows = input.numel() // cols if cols else 0
    if rows == 0:
        return NotImplemented
    x, grad = input.reshape(rows, cols), grad_out.reshape(rows, cols)
    mean_rows, rstd_rows = mean.reshape(rows).float(), rstd.reshape(rows).float()
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        w = weight.reshape(cols) if weight is not None else input.new_ones(cols)
        grad_input = ops.layer_norm_backward(grad, x, mean_rows, rstd_rows, w)
        grad_input = grad_input.reshape(input.shape)
    if output_mask[1] and weight is not None:
        x_hat = (x.float() - mean_rows.unsqueeze(1)) * rstd_rows.unsqueeze(1)
        grad_weight = (grad.float() * x_hat).sum(0).to(weight.dtype).reshape(weight.shape)
    if output_mask[2] and bias is not None:
        grad_bias = grad.float().sum(0).to(bias.dtype).reshape(bias.shape)
    return grad_input, grad_weight, grad_bias


def batch_norm_training(
    input: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[torch.Tensor, ...]:
    """A BatchNorm's training forward as torch's decomposition computes it, its batch
    statistics by one kernel that reads each channel in place (`emmy::batch_norm_stats`,
    where torch's var_mean moves the channels first); the rest is elementwise."""
    if not training:
        return _torch_form(aten._native_batch_norm_legit_functional.default)(
            input, weight, bias, running_mean, running_var, training, momentum, eps
        )
    output, mean, rstd, variance = _batch_normalised(input, weight, bias, eps)
    count = input.numel() / input.shape[1]
    new_running_mean = momentum * mean + (1 - momentum) * running_mean
    unbiased = variance * (count / (count - 1))
    new_running_var = momentum * unbiased + (1 - momentum) * running_var
    return output, *_saved(input, mean, rstd), new_running_mean, new_running_var


def batch_norm_without_statistics(
    input: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[torch.Tensor, ...]:
    """A BatchNorm of batch statistics that keeps no running ones (InstanceNorm's, over
    [1, N · C, ...]): batch_norm_training's forward without the running statistics."""
    output, mean, rstd, _ = _batch_normalised(input, weight, bias, eps)
    return output, *_saved(input, mean, rstd)


def _batch_normalised(
    input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
) -> tuple[torch.Tensor, ...]:
    """x normalised by its batch statistics (one emmy::batch_norm_stats kernel), scaled and
    shifted per channel; and the f32 mean, rstd and biased variance."""
    channels = input.shape[1]
    stats = ops.batch_norm_stats(input.reshape(input.shape[0], channels, -1))
    mean, variance = stats[0], stats[1]
    rstd = torch.rsqrt(variance + eps)
    per_channel = [1, channels] + [1] * (input.dim() - 2)
    output = (input - mean.view(per_channel)) * rstd.view(per_channel)
    if weight is not None:
        output = output * weight.flatten().view(per_channel)
    if bias is not None:
        output = output + bias.flatten().view(per_channel)
    return output.to(input.dtype), mean, rstd, variance


def _saved(input: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The mean and rstd a BatchNorm saves: in the input's dtype on the CPU, as torch's CPU
    kernel saves them, else f32."""
    if input.device.type == "cpu":
        return mean.to(input.dtype), rstd.to(input.dtype)
    return mean, rstd


def batch_norm_backward(
    grad_out: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor | None,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    save_mean: torch.Tensor | None,
    save_invstd: torch.Tensor | None,
    train: bool,
    eps: float,
    output_mask: list[bool],
) -> tuple[torch.Tensor | None, ...]:
    """A training BatchNorm's gradients as torch's decomposition computes them, its two
    per-channel sums (Σ dO, Σ dO · (x - mean)) by one kernel that reads dO and x once in
    place (`emmy::batch_norm_backward_sums`); the input's gradient is then one elementwise
    chain, the weight's and the bias's the sums."""
    if not train or save_mean is None or save_invstd is None:
        return _torch_form(aten.native_batch_norm_backward.default)(
            grad_out, input, weight, running_mean, running_var, save_mean, save_invstd,
            train, eps, output_mask,
        )  # fmt: skip
    channels = input.shape[1]
    rows = [input.shape[0], channels, -1]
    mean, invstd = save_mean.float(), save_invstd.float()
    sums = ops.batch_norm_backward_sums(grad_out.reshape(rows), input.reshape(rows), mean)
    grad_sum, dot = sums[0], sums[1]
    count = input.numel() / channels
    per_channel = [1, channels] + [1] * (input.dim() - 2)
    scale = invstd * weight.float() if weight is not None else invstd
    projection = (dot / count * invstd * invstd).view(per_channel)
    centred = input.float() - mean.view(per_channel)
    grad_input = grad_out.float() - centred * projection - (grad_sum / count).view(per_channel)
    grad_input = (grad_input * scale.view(per_channel)).to(input.dtype)
    weight_dtype = weight.dtype if weight is not None else input.dtype
    return (
        grad_input if output_mask[0] else None,
        (dot * invstd).to(weight_dtype) if output_mask[1] else None,
        grad_sum.to(weight_dtype) if output_mask[2] else None,
    )


@cache
def _torch_form(op: torch._ops.OpOverload) -> Callable:
    """torch's own decomposition of `op` (for the cases emmy's leaves to it)."""
    # torch's decompositions are loaded by a backend alone, not by emmy.compile
    from torch._decomp import get_decompositions

    return get_decompositions([op])[op]


def convolution_backward(
    grad_out: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor,
    bias_sizes: list[int] | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    transposed: bool,
    output_padding: list[int],
    groups: int,
    output_mask: list[bool],
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """A convolution's gradients as convolutions (implicit GEMMs, as the forward's):
    the input's, dO convolved with the flipped weight of swapped channels at stride 1, a
    transposed convolution of dO otherwise; the weight's, the input convolved with dO as
    the kernel, batch and channels swapped (the stride becomes the dilation); the bias's,
    dO summed but over its channels. A transposed convolution's are the other way round:
    its input's a convolution of dO, its weight's a convolution's with input and dO
    swapped."""
    spatial = list(range(2, grad_out.dim()))
    geometry = (stride, padding, dilation, groups)
    if transposed:
        zeros = [0] * len(stride)
        grad_input = aten.convolution(
            grad_out, weight, None, stride, padding, dilation, False, zeros, groups
        )
        # an output_padding of a stride or more (under a wider dilation) is read by none
        for axis, size in enumerate(input.shape[2:]):
            grad_input = grad_input.narrow(2 + axis, 0, size)
        grad_weight = _weight_gradient(input, grad_out, weight, *geometry)
    else:
        grad_input = _input_gradient(grad_out, input, weight, *geometry)
        grad_weight = _weight_gradient(grad_out, input, weight, *geometry)
    grad_bias = grad_out.sum([0, *spatial]) if output_mask[2] else None
    return (
        grad_input if output_mask[0] else None,
        grad_weight if output_mask[1] else None,
        grad_bias,
    )


def _input_gradient(grad_out, input, weight, stride, padding, dilation, groups):
    sizes = weight.shape[2:]
    reaches = [d * (size - 1) for d, size in zip(dilation, sizes, strict=True)]
    borders = [reach - pad for reach, pad in zip(reaches, padding, strict=True)]
    if all(step == 1 for step in stride) and all(border >= 0 for border in borders):
        # dO padded by the convolution itself, on the forward's kernels (tensor cores too)
        out_channels, per_group = weight.shape[0], weight.shape[1]
        swapped = weight.reshape(groups, out_channels // groups, per_group, *sizes)
        swapped = swapped.transpose(1, 2).reshape(
            groups * per_group, out_channels // groups, *sizes
        )
        flipped = swapped.flip(list(range(2, weight.dim())))
        ones, zeros = [1] * len(sizes), [0] * len(sizes)
        return aten.convolution(
            grad_out, flipped, None, ones, borders, dilation, False, zeros, groups
        )
    # each element of dO scattered back onto the input: a transposed convolution, its
    # output_padding the input's elements past the last window's reach
    lengths = zip(grad_out.shape[2:], stride, padding, reaches, input.shape[2:], strict=True)
    extra = [size - ((length - 1) * step - 2 * pad + reach + 1)
             for length, step, pad, reach, size in lengths]  # fmt: skip
    return aten.convolution(grad_out, weight, None, stride, padding, dilation, True, extra, groups)


def max_pool_backward(
    grad_out: torch.Tensor,
    input: torch.Tensor,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    ceil_mode: bool,
    indices: torch.Tensor,
) -> torch.Tensor:
    """Max pooling's input gradient by one kernel that sums, at each element, the output
    gradients whose saved index is it (`emmy::max_pool2d_backward`, where torch's form
    scatters with accumulation)."""
    kernel, stride, padding, dilation = _pairs(kernel_size, stride, padding, dilation)
    height, width = input.shape[-2:]
    return ops.max_pool2d_backward(
        grad_out, indices, height, width, kernel, stride, padding, dilation
    )


def avg_pool_backward(
    grad_out: torch.Tensor,
    input: torch.Tensor,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
) -> torch.Tensor:
    """Average pooling's input gradient by one kernel that sums, at each element, the output
    gradients over their counts (`emmy::avg_pool2d_backward`; torch has no decomposition
    of it)."""
    kernel, stride, padding, _ = _pairs(kernel_size, stride, padding, [1])
    height, width = input.shape[-2:]
    return ops.avg_pool2d_backward(
        grad_out, height, width, kernel, stride, padding, count_include_pad, divisor_override or 0
    )


def adaptive_max_pool_backward(
    grad_out: torch.Tensor, input: torch.Tensor, indices: torch.Tensor
) -> torch.Tensor:
    """Adaptive max pooling's input gradient by max pooling's kernel, its windows adaptive
    (`emmy::max_pool2d_backward` of an empty window; torch has no decomposition of it)."""
    height, width = input.shape[-2:]
    return ops.max_pool2d_backward(grad_out, indices, height, width, [], [], [], [])


def adaptive_avg_pool_backward(grad_out: torch.Tensor, input: torch.Tensor) -> torch.Tensor:
    """Adaptive average pooling's input gradient by average pooling's kernel, its windows
    adaptive (`emmy::avg_pool2d_backward` of an empty window; torch's form is a loop of
    slices and adds per output)."""
    height, width = input.shape[-2:]
    return ops.avg_pool2d_backward(grad_out, height, width, [], [], [], True, 0)


def _pairs(
    kernel_size: list[int], stride: list[int], padding: list[int], dilation: list[int]
) -> tuple[list[int], list[int], list[int], list[int]]:
    """A 2-D pooling's window fields as pairs (one value stands for both dims; an empty
    stride is the window's, as torch takes it)."""
    kernel = list(kernel_size) * (2 // len(kernel_size))
    stride = list(stride or kernel) * (2 // len(stride or kernel))
    return (
        kernel,
        stride,
        list(padding) * (2 // len(padding)),
        list(dilation) * (2 // len(dilation)),
    )


def _weight_gradient(grad_out, input, weight, stride, padding, dilation, groups):
    """One implicit GEMM over dO and the input read in place (`emmy::conv2d_weight_gradient`;
    a 1-D convolution's as a 2-D one of height 1)."""
    sizes = list(weight.shape[2:])
    reaches = [d * (size - 1) for d, size in zip(dilation, sizes, strict=True)]
    # the outputs the input's size gives: past dO's own (a transposed convolution's
    # output_padding of a stride or more), dO's gradient is zero there
    outputs = [
        (length + 2 * pad - reach - 1) // step + 1
        for length, pad, reach, step in zip(input.shape[2:], padding, reaches, stride, strict=True)
    ]
    pads = [0] * (2 * len(sizes))
    for axis, (have, want) in enumerate(zip(grad_out.shape[2:], outputs, strict=True)):
        pads[2 * (len(sizes) - 1 - axis) + 1] = want - have
    if any(pads):
        grad_out = torch.constant_pad_nd(grad_out, pads, 0.0)
    if len(sizes) == 2:
        return ops.conv2d_weight_gradient(
            grad_out, input, sizes, list(stride), list(padding), list(dilation), groups
        )
    plane = ops.conv2d_weight_gradient(
        grad_out.unsqueeze(2), input.unsqueeze(2), [1, *sizes], [1, *stride], [0, *padding],
        [1, *dilation], groups,
    )  # fmt: skip
    return plane.squeeze(2)


def _over_the_list(single: torch._ops.OpOverloadPacket) -> Callable:
    """A `_foreach_` op as its single-tensor op on each element: the list arguments (tensors
    or numbers) read at the element, the others (a scalar, a 0-d tensor) as they are."""

    def each(*args: object, **kwargs: object) -> list[torch.Tensor]:
        count = len(next(a for a in args if isinstance(a, (list, tuple))))
        return [
            single(*(a[i] if isinstance(a, (list, tuple)) else a for a in args), **kwargs)
            for i in range(count)
        ]

    return each


def _added_quotients_or_products(single: torch._ops.OpOverloadPacket) -> Callable:
    """`_foreach_addcmul` and `_foreach_addcdiv`: their scalars (one, a list, or a tensor
    of one per element) are the single op's keyword `value`."""
    apply = single.default

    def each(
        tensors: list[torch.Tensor],
        first: list[torch.Tensor],
        second: list[torch.Tensor],
        scalars: object = 1,
        value: object = None,
    ) -> list[torch.Tensor]:
        given = scalars if value is None else value
        results = []
        for i, (x, a, b) in enumerate(zip(tensors, first, second, strict=True)):
            scale = given[i] if isinstance(given, (list, tuple, torch.Tensor)) else given
            if isinstance(scale, torch.Tensor):  # an element of a tensor of scalars
                results.append(apply(x, a * scale, b))  # x + (a · s) ∘ b, ∘ being · or /
            else:
                results.append(apply(x, a, b, value=scale))
        return results

    return each


#: the `_foreach_` ops an optimizer's step is made of (the multi-tensor form, a GPU's
#: default), and the single-tensor op each applies; the norm's is another name
FOREACH = {
    **{
        name: name
        for name in (
            "add", "sub", "mul", "div", "lerp", "maximum", "minimum",
            "clamp_max", "clamp_min", "pow", "sqrt", "rsqrt", "exp", "log", "neg", "abs",
            "reciprocal", "sign", "sigmoid", "tanh", "copy", "clone",
        )
    },
    "addcmul": "addcmul",
    "addcdiv": "addcdiv",
    "zero": "zeros_like",
    "norm": "linalg_vector_norm",
}  # fmt: skip


def _foreach_decompositions() -> dict:
    table = {}
    for name, single in FOREACH.items():
        packet = getattr(aten, f"_foreach_{name}")
        each = (
            _added_quotients_or_products(getattr(aten, single))
            if name in ("addcmul", "addcdiv")
            else _over_the_list(getattr(aten, single))
        )
        for overload in packet.overloads():
            if "out" not in overload:
                table[getattr(packet, overload)] = each
    return table


#: emmy's own decompositions, by the op they stand for
EMMY_DECOMPOSED: dict[torch._ops.OpOverload, Callable] = {
    aten.embedding_dense_backward.default: embedding_backward,
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default: attention_backward,
    aten._scaled_dot_product_flash_attention_backward.default: flash_attention_backward,
    aten._scaled_dot_product_efficient_attention_backward.default: efficient_attention_backward,
    aten._scaled_dot_product_cudnn_attention_backward.default: cudnn_attention_backward,
    aten.convolution_backward.default: convolution_backward,
    aten._native_batch_norm_legit_functional.default: batch_norm_training,
    aten._native_batch_norm_legit.no_stats: batch_norm_without_statistics,
    aten.native_batch_norm_backward.default: batch_norm_backward,
    aten.native_layer_norm_backward.default: layer_norm_backward,
    aten.max_pool2d_with_indices_backward.default: max_pool_backward,
    aten.avg_pool2d_backward.default: avg_pool_backward,
    aten.adaptive_max_pool2d_backward.default: adaptive_max_pool_backward,
    aten._adaptive_avg_pool2d_backward.default: adaptive_avg_pool_backward,
}


@cache
def decompositions() -> dict:
    """The table AOTAutograd decomposes by: torch's forms of TORCH_DECOMPOSED, and emmy's."""
    # torch's decompositions are loaded by a backend alone, not by emmy.compile
    from torch._decomp import get_decompositions

    return {**get_decompositions(TORCH_DECOMPOSED), **EMMY_DECOMPOSED, **_foreach_decompositions()}
