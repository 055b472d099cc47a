"""A convolution's weight gradient (graph.conv_weight_gradient) as an implicit GEMM over
dy and x read in place: its rows the filters, its columns their weights, its depth every
output pixel of every image."""

from __future__ import annotations

from xdsl.ir import Operation

from emmy.dialects import graph
from emmy.families import conv
from emmy.families.chains import dtype_of, shape_of
from emmy.families.family import Fusion, KernelFamily, OpSites, Site
from emmy.families.matmul import split_k_slices

#: the forward convolution's key names that are no part of its weight gradient's
FORWARD_ONLY = ("has_bias", "epilogue", "inputs")
#: the weight gradient's key names, in order
KEY = (
    "batch", "cin", "h", "w", "cout", "oh", "ow", "kh", "kw", "sh", "sw", "ph", "pw",
    "dh", "dw", "groups", "cpg", "kdim", "spatial", "T",
)  # fmt: skip


def weight_key(op: graph.ConvWeightGradientOp) -> dict:
    batch, cin, h, w = shape_of(op.input)
    _, cout, oh, ow = shape_of(op.grad)
    _, cpg, kh, kw = shape_of(op.result)
    (sh, sw), (ph, pw), (dh, dw) = (
        [a.value.data for a in attr.data] for attr in (op.stride, op.padding, op.dilation)
    )
    return {
        "batch": batch, "cin": cin, "h": h, "w": w, "cout": cout, "oh": oh, "ow": ow,
        "kh": kh, "kw": kw, "sh": sh, "sw": sw, "ph": ph, "pw": pw, "dh": dh, "dw": dw,
        "groups": op.groups.value.data, "cpg": cpg, "kdim": cpg * kh * kw,
        "spatial": oh * ow, "T": dtype_of(op.grad),
    }  # fmt: skip


def site(op: Operation, fusion: Fusion) -> Site:
    assert isinstance(op, graph.ConvWeightGradientOp)
    return Site("conv_weight", weight_key(op), [op.grad, op.input])


def reference(key: dict, inputs: list):
    """Per group, dy's rows [filters, depth] times x's taps unfolded [depth, weights]; with
    `split`, each part the product over its slice of the depth."""
    # torch stays off the compile path: only benches and checks call references
    import torch

    batch, cout, cin, groups = (int(key[name]) for name in ("batch", "cout", "cin", "groups"))
    m, kdim, split = cout // groups, int(key["kdim"]), int(key.get("split", 1))
    dy = inputs[0].double().reshape(batch, groups, m, -1)
    x = inputs[1].double().reshape(batch, cin, int(key["h"]), int(key["w"]))
    geometry = {
        name: (int(key[f"{name[0]}h"]), int(key[f"{name[0]}w"]))
        for name in ("kernel_size", "dilation", "padding", "stride")
    }
    # each output pixel's taps: [batch, groups, kdim, spatial]
    taps = torch.nn.functional.unfold(x, **geometry).reshape(batch, groups, kdim, -1)
    parts = []
    for cut in split_k_slices(batch * int(key["spatial"]), split):
        per_group = [
            dy[:, g].permute(1, 0, 2).reshape(m, -1)[:, cut]
            @ taps[:, g].permute(0, 2, 1).reshape(-1, kdim)[cut]
            for g in range(groups)
        ]
        parts.append(torch.cat(per_group))
    return parts[0] if split == 1 else torch.stack(parts)


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import randn

    batch = int(key["batch"])
    return [
        randn((batch, int(key["cout"]), int(key["spatial"])), dtype, generator),
        randn((batch, int(key["cin"]), int(key["h"]), int(key["w"])), dtype, generator),
    ]


def weight_of(forward: dict) -> dict:
    """The key of the weight gradient of the convolution whose key is `forward`."""
    return {name: value for name, value in forward.items() if name not in FORWARD_ONLY}


def check_keys(dtype: str) -> list[dict]:
    """Odd channels and sizes, 1×1, 3×3 and 7×7 filters, stride 2, dilation 2, depthwise
    and grouped, a 1-D convolution (height 1), a depth of several tiles."""
    check_key = conv.check_key
    forwards = [
        check_key(dtype, 2, 3, (9, 11), 5, (3, 3), padding=1),
        check_key(dtype, 1, 7, (6, 5), 9, (1, 1)),
        check_key(dtype, 2, 3, (13, 12), 8, (7, 7), stride=2, padding=3),
        check_key(dtype, 1, 4, (9, 9), 6, (3, 3), dilation=2, padding=2),
        check_key(dtype, 2, 6, (7, 8), 6, (3, 3), stride=2, padding=1, groups=6),
        check_key(dtype, 1, 6, (5, 5), 9, (3, 3), padding=1, groups=3),
        check_key(dtype, 2, 5, (1, 17), 7, (1, 4), stride=2),
        check_key(dtype, 3, 20, (6, 6), 33, (3, 3), padding=1),
    ]  # fmt: skip
    keys = [weight_of(forward) for forward in forwards]
    # split-K parts: slices of 8 with empty last ones, ragged ones of a grouped gradient
    return [*keys, keys[0] | {"split": 8}, keys[4] | {"split": 3}]


def depth_atol(key: dict) -> float:
    """f32 accumulation over every output pixel of every image."""
    return 2e-6 * int(key["batch"]) * int(key["spatial"])


FAMILY = KernelFamily(
    "conv_weight",
    lowers=OpSites((graph.ConvWeightGradientOp,), site),
    reference=reference,
    check_keys=check_keys,
    check_inputs=check_inputs,
    extra_atol=depth_atol,
)
