"""PyTorch ops that emmy lowers to one kernel family, for models to call: torch.export
keeps each as one node (`emmy.rope.default`) instead of the slices and concatenation of
its eager form."""

from __future__ import annotations

import torch


@torch.library.custom_op("emmy::rope", mutates_args=())
def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding, rotate-half form, of x [batch, seq, heads, dim] by cos and
    sin [seq, dim / 2] (as Llama applies it)."""
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([first * c - second * s, second * c + first * s], dim=-1)


@rope.register_fake
def _(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("emmy::cached_attention", mutates_args=())
def cached_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, length: torch.Tensor
) -> torch.Tensor:
    """Causal attention of the newest tokens over a static KV cache, as a decode step
    computes it. q [batch, heads, new, dim]; k_cache, v_cache [batch, kv_heads, max_len,
    dim] (heads a multiple of kv_heads: grouped-query); length an int64 tensor [1], the
    cache's length after this step wrote its keys and values. Query i of `new` sits at
    position length - new + i and sees the keys at positions up to its own; the positions
    from `length` on are never read. Scale 1/sqrt(dim). The length is a runtime value, so
    one compile serves every step."""
    batch, heads, new, dim = q.shape
    kv_heads = k_cache.shape[1]
    end = int(length.reshape(-1)[0])
    keys = k_cache[:, :, :end].repeat_interleave(heads // kv_heads, dim=1)
    values = v_cache[:, :, :end].repeat_interleave(heads // kv_heads, dim=1)
    positions = torch.arange(end, device=q.device)
    query_positions = end - new + torch.arange(new, device=q.device)
    visible = positions[None, :] <= query_positions[:, None]
    return torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=visible)


@cached_attention.register_fake
def _(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, length: torch.Tensor
) -> torch.Tensor:
    return torch.empty_like(q)


@torch.library.custom_op("emmy::layer_norm_backward", mutates_args=())
def layer_norm_backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor,
) -> torch.Tensor:
    """The input gradient of a LayerNorm over the last dim of x [rows, cols] (what a
    training step's backward decomposes `native_layer_norm_backward` to, emmy.frontend.
    decompositions): grad [rows, cols], the forward's f32 statistics mean and rstd [rows],
    weight [cols]. With g = grad · weight and x̂ = (x − mean) · rstd,
    dx = rstd · (g − mean(g) − x̂ · mean(g · x̂)) over each row, computed in f32."""
    g = grad.float() * weight.float()
    x_hat = (x.float() - mean.unsqueeze(1)) * rstd.unsqueeze(1)
    inner = g - g.mean(-1, keepdim=True) - x_hat * (g * x_hat).mean(-1, keepdim=True)
    return (rstd.unsqueeze(1) * inner).to(x.dtype)


@layer_norm_backward.register_fake
def _(
    grad: torch.Tensor,
    x: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor,
) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("emmy::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim of x [..., cols] with weight [cols], x's dtype:
    x · rsqrt(mean(x²) + eps) · weight, computed in f32 or wider (what emmy.frontend.
    rms_norms makes of a model's RMSNorm before autograd, so that a training step's
    backward is `emmy::rms_norm_backward`, not the pieces autograd makes of pow, mean and
    rsqrt)."""
    wide = _widened(x)
    rstd = torch.rsqrt(wide.square().mean(-1, keepdim=True) + eps)
    return (wide * rstd * _widened(weight)).to(x.dtype)


def _widened(t: torch.Tensor) -> torch.Tensor:
    """t in the dtype the norms compute in: f32, or t's own where it is wider."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


@rms_norm.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("emmy::rms_norm_backward", mutates_args=())
def rms_norm_backward(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The input gradient of an RMSNorm over the last dim of x [rows, cols], and the rstd
    of each row (f32 [rows], which its weight's gradient reads): with g = grad · weight
    and rstd = rsqrt(mean(x²) + eps), dx = rstd · g − rstd³ · x · mean(g · x), in f32 or
    wider. The forward saves no statistics: the one row kernel reads x anyway."""
    g, wide = _widened(grad) * _widened(weight), _widened(x)
    rstd = torch.rsqrt(wide.square().mean(-1) + eps)
    projection = (g * wide).mean(-1) * rstd.pow(3)
    dx = rstd.unsqueeze(1) * g - projection.unsqueeze(1) * wide
    return dx.to(x.dtype), rstd.float()


@rms_norm_backward.register_fake
def _(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), x.new_empty(x.shape[:-1], dtype=torch.float32)


def _save_rms_norm_inputs(ctx, inputs: tuple, output: torch.Tensor) -> None:
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def _rms_norm_gradients(ctx, grad: torch.Tensor) -> tuple:
    x, weight = ctx.saved_tensors
    cols = x.shape[-1]
    rows_x, rows_grad = x.reshape(-1, cols), grad.reshape(-1, cols)
    dx, rstd = rms_norm_backward(rows_grad, rows_x, weight, ctx.eps)
    normalised = _widened(rows_x) * rstd.unsqueeze(1)
    dw = (_widened(rows_grad) * normalised).sum(0).to(weight.dtype)
    return dx.reshape(x.shape), dw, None


rms_norm.register_autograd(_rms_norm_gradients, setup_context=_save_rms_norm_inputs)


@torch.library.custom_op("emmy::upsample2d", mutates_args=())
def upsample2d(
    x: torch.Tensor,
    output_size: list[int],
    mode: str,
    align_corners: bool,
    scales_h: float | None,
    scales_w: float | None,
) -> torch.Tensor:
    """Nearest or bilinear upsampling of the last two dims of x [batch, channels, h, w] to
    `output_size`, as `aten.upsample_nearest2d` and `aten.upsample_bilinear2d` compute it
    (`scales_h`, `scales_w`: the caller's scale factors, or None). What emmy.frontend.
    interpolations makes of `F.interpolate` before autograd, so that a training step's
    backward is `emmy::upsample2d_backward`, not the accumulating scatter autograd makes of
    the gathers torch decomposes it to."""
    if mode == "nearest":
        return torch.ops.aten.upsample_nearest2d(x, output_size, scales_h, scales_w)
    return torch.ops.aten.upsample_bilinear2d(x, output_size, align_corners, scales_h, scales_w)


@upsample2d.register_fake
def _(
    x: torch.Tensor,
    output_size: list[int],
    mode: str,
    align_corners: bool,
    scales_h: float | None,
    scales_w: float | None,
) -> torch.Tensor:
    return x.new_empty((*x.shape[:-2], *output_size))


@torch.library.custom_op("emmy::upsample2d_backward", mutates_args=())
def upsample2d_backward(
    grad: torch.Tensor,
    input_size: list[int],
    mode: str,
    align_corners: bool,
    scales_h: float | None,
    scales_w: float | None,
) -> torch.Tensor:
    """The input gradient of emmy::upsample2d: each input element sums the output
    gradient's elements that read it, by their weights (input_size: [batch, channels, h,
    w])."""
    output_size = list(grad.shape[-2:])
    if mode == "nearest":
        return torch.ops.aten.upsample_nearest2d_backward(
            grad, output_size, input_size, scales_h, scales_w
        )
    return torch.ops.aten.upsample_bilinear2d_backward(
        grad, output_size, input_size, align_corners, scales_h, scales_w
    )


@upsample2d_backward.register_fake
def _(
    grad: torch.Tensor,
    input_size: list[int],
    mode: str,
    align_corners: bool,
    scales_h: float | None,
    scales_w: float | None,
) -> torch.Tensor:
    return grad.new_empty(input_size)


def _save_upsampling(ctx, inputs: tuple, output: torch.Tensor) -> None:
    x, _, ctx.mode, ctx.align_corners, ctx.scales_h, ctx.scales_w = inputs
    ctx.input_size = list(x.shape)


def _upsampling_gradient(ctx, grad: torch.Tensor) -> tuple:
    scales = ctx.scales_h, ctx.scales_w
    dx = upsample2d_backward(grad, ctx.input_size, ctx.mode, ctx.align_corners, *scales)
    return dx, None, None, None, None, None


upsample2d.register_autograd(_upsampling_gradient, setup_context=_save_upsampling)


@torch.library.custom_op("emmy::embedding_backward", mutates_args=())
def embedding_backward(
    grad: torch.Tensor, ids: torch.Tensor, num_weights: int, scale_grad_by_freq: bool = False
) -> torch.Tensor:
    """An embedding's weight gradient [num_weights, dim] (what a training step's backward
    decomposes `embedding_dense_backward` to, emmy.frontend.decompositions): row v sums
    grad's rows [tokens, dim] of the tokens whose id (ids [tokens]) is v, over their count
    where `scale_grad_by_freq`; an id outside [0, num_weights) adds to no row. Summed in
    f32, or in grad's dtype where it is wider."""
    kept = (ids >= 0) & (ids < num_weights)
    wide = torch.promote_types(grad.dtype, torch.float32)
    table = grad.new_zeros((num_weights, grad.shape[-1]), dtype=wide)
    table.index_add_(0, ids[kept].long(), grad[kept].to(wide))
    if scale_grad_by_freq:
        counts = torch.bincount(ids[kept].long(), minlength=num_weights).clamp(min=1)
        table /= counts.view(-1, 1)
    return table.to(grad.dtype)


@embedding_backward.register_fake
def _(
    grad: torch.Tensor, ids: torch.Tensor, num_weights: int, scale_grad_by_freq: bool = False
) -> torch.Tensor:
    return grad.new_empty((num_weights, grad.shape[-1]))


@torch.library.custom_op("emmy::attention_backward", mutates_args=())
def attention_backward(
    grad_out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    out: torch.Tensor,
    attn_mask: torch.Tensor | None,
    scale: float,
    is_causal: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of an attention's q, k and v [batch, heads, len, dim] (what a training
    step's backward decomposes the SDPA backward ops to, emmy.frontend.decompositions),
    FlashAttention-2's formulas: P = softmax(scale · q kᵀ + mask), dV = Pᵀ dO,
    dS = P ∘ (dO vᵀ − rowsum(dO ∘ O)), dQ = scale · dS k, dK = scale · dSᵀ q. k and v of
    fewer heads than q (grouped-query) get their groups' gradients summed; attn_mask is
    SDPA's (additive or boolean); the causal mask is top-left, as SDPA's."""
    heads, kv_heads = query.shape[1], key.shape[1]
    group = heads // kv_heads
    keys = key.repeat_interleave(group, dim=1)
    values = value.repeat_interleave(group, dim=1)
    scores = (query @ keys.transpose(-2, -1)) * scale
    if is_causal:
        kept = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).tril()
        scores = scores.masked_fill(~kept, float("-inf"))
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    elif attn_mask is not None:
        scores = scores + attn_mask
    hidden_rows = scores.isneginf().all(dim=-1, keepdim=True)
    probabilities = torch.softmax(scores.masked_fill(hidden_rows, 0.0), dim=-1)
    probabilities = probabilities.masked_fill(hidden_rows, 0.0)
    grad_value = probabilities.transpose(-2, -1) @ grad_out
    row_terms = (grad_out * out).sum(dim=-1, keepdim=True)
    grad_scores = probabilities * (grad_out @ values.transpose(-2, -1) - row_terms)
    grad_query = (grad_scores @ keys) * scale
    grad_key = (grad_scores.transpose(-2, -1) @ query) * scale
    batch, _, kv_len, dim = key.shape
    grad_key = grad_key.reshape(batch, kv_heads, group, kv_len, dim).sum(2)
    grad_value = grad_value.reshape(batch, kv_heads, group, kv_len, value.shape[-1]).sum(2)
    # laid out as the inputs are (as the fake's are, and as torch's attention backward gives
    # them): the graph around views them by those strides
    return (
        torch.empty_like(query).copy_(grad_query),
        torch.empty_like(key).copy_(grad_key),
        torch.empty_like(value).copy_(grad_value),
    )


@attention_backward.register_fake
def _(
    grad_out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    out: torch.Tensor,
    attn_mask: torch.Tensor | None,
    scale: float,
    is_causal: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.empty_like(query), torch.empty_like(key), torch.empty_like(value)


@torch.library.custom_op("emmy::max_pool2d_backward", mutates_args=())
def max_pool2d_backward(
    grad: torch.Tensor,
    indices: torch.Tensor,
    height: int,
    width: int,
    window: list[int],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
) -> torch.Tensor:
    """Max pooling's input gradient [..., height, width] (what a training step's backward
    decomposes `max_pool2d_with_indices_backward` to, emmy.frontend.decompositions; an
    empty window: adaptive max pooling's): each element sums grad [..., oh, ow] where the
    pooling's indices (iy · width + ix, as torch's max pooling gives them) name it. Summed
    in f32, or in grad's dtype where it is wider."""
    wide = torch.promote_types(grad.dtype, torch.float32)
    flat = grad.new_zeros((*grad.shape[:-2], height * width), dtype=wide)
    flat.scatter_add_(-1, indices.flatten(-2), grad.flatten(-2).to(wide))
    return flat.reshape(*grad.shape[:-2], height, width).to(grad.dtype)


@max_pool2d_backward.register_fake
def _(
    grad: torch.Tensor,
    indices: torch.Tensor,
    height: int,
    width: int,
    window: list[int],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
) -> torch.Tensor:
    return grad.new_empty((*grad.shape[:-2], height, width))


@torch.library.custom_op("emmy::avg_pool2d_backward", mutates_args=())
def avg_pool2d_backward(
    grad: torch.Tensor,
    height: int,
    width: int,
    window: list[int],
    stride: list[int],
    padding: list[int],
    count_include_pad: bool,
    divisor: int,
) -> torch.Tensor:
    """Average pooling's input gradient [..., height, width] (what a training step's
    backward decomposes `avg_pool2d_backward` to, emmy.frontend.decompositions; an empty
    window: adaptive average pooling's): each element sums grad [..., oh, ow] over each
    output whose window holds it, divided by that output's count (`divisor` where it is
    not 0, else as avg_pool2d counts)."""
    # torch's own backward ops read the input for its shape alone
    input = grad.new_empty((*grad.shape[:-2], height, width))
    if not window:
        return torch.ops.aten._adaptive_avg_pool2d_backward(grad, input)
    floor_sizes = [
        (size + 2 * pad - k) // step + 1
        for size, pad, k, step in zip((height, width), padding, window, stride, strict=True)
    ]
    ceil_mode = floor_sizes != list(grad.shape[-2:])  # a ragged last window
    return torch.ops.aten.avg_pool2d_backward(
        grad, input, window, stride, padding, ceil_mode, count_include_pad, divisor or None
    )


@avg_pool2d_backward.register_fake
def _(
    grad: torch.Tensor,
    height: int,
    width: int,
    window: list[int],
    stride: list[int],
    padding: list[int],
    count_include_pad: bool,
    divisor: int,
) -> torch.Tensor:
    return grad.new_empty((*grad.shape[:-2], height, width))


@torch.library.custom_op("emmy::conv2d_weight_gradient", mutates_args=())
def conv2d_weight_gradient(
    grad: torch.Tensor,
    input: torch.Tensor,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
) -> torch.Tensor:
    """A 2-D convolution's weight gradient [out channels, in channels / groups, *kernel_size]
    from its output's gradient and its input (what a training step's backward decomposes
    `convolution_backward`'s weight gradient to, emmy.frontend.decompositions), as torch's
    convolution_backward gives it."""
    weight = input.new_empty((grad.shape[1], input.shape[1] // groups, *kernel_size))
    _, grad_weight, _ = torch.ops.aten.convolution_backward(
        grad, input, weight, None, stride, padding, dilation, False, [0, 0], groups,
        [False, True, False],
    )  # fmt: skip
    return grad_weight


@conv2d_weight_gradient.register_fake
def _(
    grad: torch.Tensor,
    input: torch.Tensor,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
) -> torch.Tensor:
    return input.new_empty((grad.shape[1], input.shape[1] // groups, *kernel_size))


@torch.library.custom_op("emmy::batch_norm_stats", mutates_args=())
def batch_norm_stats(input: torch.Tensor) -> torch.Tensor:
    """A training BatchNorm's batch statistics of input [batch, channels, spatial]: f32
    [2, channels], each channel's mean and biased variance (what a training step's forward
    decomposes `_native_batch_norm_legit_functional`'s var_mean to)."""
    variance, mean = torch.var_mean(input.float(), dim=(0, 2), correction=0)
    return torch.stack([mean, variance])


@batch_norm_stats.register_fake
def _(input: torch.Tensor) -> torch.Tensor:
    return input.new_empty((2, input.shape[1]), dtype=torch.float32)


@torch.library.custom_op("emmy::batch_norm_backward_sums", mutates_args=())
def batch_norm_backward_sums(
    grad: torch.Tensor, input: torch.Tensor, mean: torch.Tensor
) -> torch.Tensor:
    """A training BatchNorm's backward sums over input and its gradient [batch, channels,
    spatial]: f32 [2, channels], each channel's Σ grad and Σ grad · (input - mean) (what a
    training step's backward decomposes `native_batch_norm_backward`'s two sums to)."""
    grad, centred = grad.float(), input.float() - mean.view(1, -1, 1)
    return torch.stack([grad.sum((0, 2)), (grad * centred).sum((0, 2))])


@batch_norm_backward_sums.register_fake
def _(grad: torch.Tensor, input: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
    return input.new_empty((2, input.shape[1]), dtype=torch.float32)
