"""2-D convolutions (graph.conv; a 1-D one has height 1) and transposed convolutions
(graph.conv_transpose) as implicit GEMMs with a fused epilogue: the tensor-core family for
f16/bf16 convolutions, the SIMT family otherwise (see `conv_key`)."""

from __future__ import annotations

from collections.abc import Mapping

from emmy.base import dtypes
from emmy.base.problem_key import parse_input_kinds
from emmy.dialects import graph
from emmy.families.chains import collect_group, dtype_of, required_broadcast_kinds, shape_of
from emmy.families.family import Fuses, Fusion, KernelFamily, OpSites, Site

#: the convolution ops the families take
CONV_OPS = (graph.ConvOp, graph.ConvTransposeOp)


def conv_key(
    op: graph.ConvOp | graph.ConvTransposeOp, epilogue: str = "acc", inputs: str = ""
) -> tuple[str, dict]:
    """The family (conv_tc for an f16/bf16 convolution, conv otherwise: a transposed one
    runs on the SIMT kernel) and key of a convolution."""
    batch, cin, h, w = shape_of(op.input)
    _, cout, oh, ow = shape_of(op.result)
    kh, kw = shape_of(op.weight)[2:]
    (sh, sw), (ph, pw), (dh, dw) = (
        [a.value.data for a in attr.data] for attr in (op.stride, op.padding, op.dilation)
    )
    groups = op.groups.value.data
    cpg = cin // groups
    T = dtype_of(op.input)
    key = {
        "batch": batch, "cin": cin, "h": h, "w": w, "cout": cout, "oh": oh, "ow": ow,
        "kh": kh, "kw": kw, "sh": sh, "sw": sw, "ph": ph, "pw": pw, "dh": dh, "dw": dw,
        "groups": groups, "cpg": cpg, "kdim": cpg * kh * kw,
        "spatial": oh * ow, "has_bias": int(op.bias is not None), "T": T,
        "epilogue": epilogue, "inputs": inputs,
    }  # fmt: skip
    if isinstance(op, graph.ConvTransposeOp):
        return "conv", key | {"transposed": 1}
    return ("conv_tc" if dtypes.is_half(T) else "conv"), key


def site(op: graph.ConvOp | graph.ConvTransposeOp, fusion: Fusion) -> Site:
    """The convolution with `fusion`'s epilogue over its result `acc` (bias added)."""
    params = [op.input, op.weight, *([op.bias] if op.bias is not None else [])]
    if fusion.epilogue is None:
        return Site(*conv_key(op), params)
    group = collect_group(fusion.epilogue, op.result)
    kinds = required_broadcast_kinds(group.inputs, shape_of(fusion.epilogue.results[0]))
    family_name, key = conv_key(op, epilogue=group.text, inputs=kinds)
    return Site(family_name, key, [*params, *group.inputs])


def output_shape(key: dict) -> tuple[int, int, int, int]:
    return (key["batch"], key["cout"], key["oh"], key["ow"])


def reference(key: dict, inputs: list):
    # torch stays off the compile path: only benches and checks call references
    import torch

    from emmy.families.tensors import with_epilogue

    x, filters = inputs[0].double(), inputs[1].double()
    bias = inputs[2].double().reshape(-1) if int(key["has_bias"]) else None
    extra = inputs[3:] if bias is not None else inputs[2:]
    x = x.reshape(key["batch"], key["cin"], key["h"], key["w"])
    geometry = {
        "stride": (key["sh"], key["sw"]),
        "padding": (key["ph"], key["pw"]),
        "dilation": (key["dh"], key["dw"]),
        "groups": key["groups"],
    }
    if int(key.get("transposed", 0)):
        filters = filters.reshape(key["cin"], key["cout"] // key["groups"], key["kh"], key["kw"])
        out_padding = output_padding(key)
        out = torch.nn.functional.conv_transpose2d(
            x, filters, bias, output_padding=out_padding, **geometry
        )
    else:
        filters = filters.reshape(key["cout"], key["cpg"], key["kh"], key["kw"])
        out = torch.nn.functional.conv2d(x, filters, bias, **geometry)
    out = with_epilogue(key, out, extra)
    return out.reshape(key["batch"], key["cout"], key["spatial"])


def output_padding(key: Mapping[str, int | str]) -> tuple[int, int]:
    """A transposed convolution's output past its last input pixel's reach, per dim (torch's
    output_padding)."""

    def extra(out: str, size: str, s: str, p: str, d: str, k: str) -> int:
        value = {name: int(key[name]) for name in (out, size, s, p, d, k)}
        reach = (value[size] - 1) * value[s] - 2 * value[p] + value[d] * (value[k] - 1) + 1
        return value[out] - reach

    return extra("oh", "h", "sh", "ph", "dh", "kh"), extra("ow", "w", "sw", "pw", "dw", "kw")


def epilogue_input_sizes(key: dict) -> dict[str, int]:
    """Elements of an epilogue input of each kind, over the output [batch, cout, oh, ow]."""
    batch, cout, oh, ow = output_shape(key)
    return {"full": batch * cout * oh * ow, "row": ow, "col": batch * cout * oh, "scalar": 1}


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import randn

    sizes = epilogue_input_sizes(key)
    bias = [randn((key["cout"],), dtype, generator)] if int(key["has_bias"]) else []
    return [
        randn((key["batch"], key["cin"], key["h"], key["w"]), dtype, generator),
        randn((key["cout"], key["kdim"]), dtype, generator),
        *bias,
        *(randn((sizes[kind],), dtype, generator) for kind in parse_input_kinds(key["inputs"])),
    ]


def check_key(
    dtype: str,
    batch: int,
    cin: int,
    hw: tuple[int, int],
    cout: int,
    kernel: tuple[int, int],
    stride: int = 1,
    padding: int = 0,
    dilation: int = 1,
    groups: int = 1,
    bias: bool = True,
    epilogue: tuple[str, str] = ("acc", ""),
    transposed_by: int | None = None,
) -> dict:
    """A convolution's key from its shapes (square stride, padding and dilation); a
    transposed one's where `transposed_by` is its output_padding."""
    (h, w), (kh, kw) = hw, kernel
    oh = (h + 2 * padding - dilation * (kh - 1) - 1) // stride + 1
    ow = (w + 2 * padding - dilation * (kw - 1) - 1) // stride + 1
    if transposed_by is not None:
        oh, ow = (
            (size - 1) * stride - 2 * padding + dilation * (k - 1) + 1 + transposed_by
            for size, k in ((h, kh), (w, kw))
        )
    cpg = cin // groups
    transposed = {} if transposed_by is None else {"transposed": 1}
    return transposed | {
        "batch": batch, "cin": cin, "h": h, "w": w, "cout": cout, "oh": oh, "ow": ow,
        "kh": kh, "kw": kw, "sh": stride, "sw": stride, "ph": padding, "pw": padding,
        "dh": dilation, "dw": dilation, "groups": groups, "cpg": cpg, "kdim": cpg * kh * kw,
        "spatial": oh * ow, "has_bias": int(bias), "T": dtype,
        "epilogue": epilogue[0], "inputs": epilogue[1],
    }  # fmt: skip


def check_keys(dtype: str) -> list[dict]:
    """Odd channels and sizes; 1×1, 3×3 and 7×7 filters; stride 2, dilation 2; depthwise
    (groups = channels) and grouped; a 1-D convolution (height 1); fused epilogues."""
    return [
        check_key(dtype, 2, 3, (9, 11), 5, (3, 3), padding=1, epilogue=("relu(acc)", "")),
        check_key(dtype, 1, 7, (6, 5), 9, (1, 1), bias=False),
        check_key(dtype, 2, 3, (13, 12), 8, (7, 7), stride=2, padding=3),
        check_key(dtype, 1, 4, (9, 9), 6, (3, 3), dilation=2, padding=2, epilogue=("(acc + in0)", "full")),
        check_key(dtype, 2, 6, (7, 8), 6, (3, 3), stride=2, padding=1, groups=6),
        check_key(dtype, 1, 6, (5, 5), 9, (3, 3), padding=1, groups=3, bias=False,
                  epilogue=("(silu(acc) * in0)", "scalar")),
        check_key(dtype, 2, 5, (1, 17), 7, (1, 4), stride=2, padding=0, epilogue=("(acc + in0)", "col")),
        check_key(dtype, 1, 70, (3, 3), 33, (3, 3), padding=1),
        *transposed_check_keys(dtype),
    ]  # fmt: skip


def transposed_check_keys(dtype: str) -> list[dict]:
    """Transposed: stride 2 with an output_padding (a strided convolution's input gradient);
    stride 3, dilated and grouped, with a fused epilogue."""
    return [
        check_key(dtype, 2, 6, (5, 4), 4, (3, 3), stride=2, padding=1, transposed_by=1),
        check_key(dtype, 1, 4, (4, 5), 6, (4, 4), stride=3, padding=2, dilation=2, groups=2,
                  bias=False, epilogue=("relu(acc)", ""), transposed_by=0),
    ]  # fmt: skip


def depth_atol(key: dict) -> float:
    """f32 accumulation over kdim."""
    return 2e-6 * int(key["kdim"])


FAMILY = KernelFamily(
    "conv",
    lowers=OpSites(CONV_OPS, site),
    fuses=Fuses.EPILOGUE,
    reference=reference,
    check_keys=check_keys,
    check_inputs=check_inputs,
    extra_atol=depth_atol,
)
