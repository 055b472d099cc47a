"""What each kernel family must compute, in float64 torch: how a bench checks a row.

A family's reference takes its problem key and its input tensors (shaped as at the call)
and gives the expected output (a tuple where the kernel has several). New families register
theirs with `register`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from lark import Token, Tree

from emmy.dsl.keys import parse_input_kinds
from emmy.dsl.parser import parse_expression
from emmy.errors import EmmyError

#: the expected output, or the outputs in the order of the kernel's out parameters
Reference = Callable[[dict, list[torch.Tensor]], torch.Tensor | tuple[torch.Tensor, ...]]
_REFERENCES: dict[str, Reference] = {}


def register(family: str, reference: Reference) -> None:
    _REFERENCES[family] = reference


def tolerance(family: str, key: dict, dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for a family's output against its float64 reference: the storage type's
    rounding, plus f32 accumulation error that grows with a matmul's depth or a row's
    length (a sum whose terms cancel keeps their absolute error, not its own size's)."""
    from emmy.runtime.convert import REFERENCE_TOLERANCES

    rtol, atol = REFERENCE_TOLERANCES[dtype]
    if family in ("matmul", "matmul_tc"):
        atol += 2e-6 * int(key["k"])
    if family in ("attention", "attention_tc"):
        atol += 2e-6 * int(key["kv_len"])
    if family == "reduce_rows":
        atol += 4e-6 * math.sqrt(int(key["cols"]))
    if family in ("layer_norm", "rms_norm"):
        atol += 2e-7 * math.sqrt(int(key["cols"]))
    return rtol, atol


def as_outputs(expected: torch.Tensor | tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """A reference's result as the tuple of a kernel's outputs."""
    return expected if isinstance(expected, tuple) else (expected,)


def reference(family: str) -> Reference:
    if family not in _REFERENCES:
        raise EmmyError(f"no reference for family {family!r}: a bench cannot check it")
    return _REFERENCES[family]


def _softmax(key: dict, inputs: list[torch.Tensor]):
    causal = int(key.get("causal", 0))

    def normalise(x: torch.Tensor) -> torch.Tensor:
        if causal:
            query = torch.arange(x.shape[0]).unsqueeze(1) % causal
            x = x.masked_fill(torch.arange(x.shape[1]) > query, -math.inf)
        return torch.softmax(x, dim=-1)

    return _fused_rows(key, inputs, 0, normalise)


_FUNCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "exp": torch.exp,
    "tanh": torch.tanh,
    "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "silu": torch.nn.functional.silu,
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
}
_BINARY = {"+": torch.add, "-": torch.sub, "*": torch.mul, "/": torch.div}


def _chain(node: Tree | Token, inputs: dict[str, torch.Tensor]):
    kind = node.data
    if kind == "float_lit" or kind == "int_lit":
        return float(node.children[0])
    if kind == "name":
        return inputs[str(node.children[0])]
    if kind == "neg":
        return -_chain(node.children[0], inputs)
    if kind == "call":
        (arg,) = node.children[1].children
        return _FUNCTIONS[str(node.children[0])](_as_tensor(_chain(arg, inputs)))
    value = _chain(node.children[0], inputs)
    for op, rhs in zip(node.children[1::2], node.children[2::2], strict=True):
        value = _BINARY[str(op)](_as_tensor(value), _chain(rhs, inputs))
    return value


def _as_tensor(value) -> torch.Tensor:
    return value if isinstance(value, torch.Tensor) else torch.tensor(value, dtype=torch.float64)


def _elementwise(key: dict, inputs: list[torch.Tensor]) -> torch.Tensor:
    named = {f"in{i}": t.double() for i, t in enumerate(inputs)}
    return _as_tensor(_chain(parse_expression(str(key["fn"])), named))


register("softmax", _softmax)
register("elementwise", _elementwise)


def _eps(key: dict) -> float:
    return float(key["eps"])


def _fused_rows(key: dict, inputs: list[torch.Tensor], params: int, normalise: Callable):
    """A row kernel (softmax, a norm with `params` weights) whose x is the key's chain `fn`
    over its inputs, followed by the `epilogue` chain; with `store = yes`, x itself is the
    second output."""
    ins = inputs[: len(inputs) - params]
    weights = [t.double() for t in inputs[len(inputs) - params :]]
    shape = (int(key["rows"]), int(key["cols"]))
    named = epilogue_inputs({"inputs": key.get("inputs", "full")}, ins, shape)
    x = _as_tensor(_chain(parse_expression(str(key.get("fn", "in0"))), named)).expand(shape)
    named["acc"] = normalise(x, *weights)
    y = _as_tensor(_chain(parse_expression(str(key.get("epilogue", "acc"))), named))
    return (y, x) if str(key.get("store", "no")) == "yes" else y


def _layer_norm(key: dict, inputs: list[torch.Tensor]):
    def normalise(x, weight, bias):
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, _eps(key))

    return _fused_rows(key, inputs, 2, normalise)


def _rms_norm(key: dict, inputs: list[torch.Tensor]):
    def normalise(x, weight):
        return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + _eps(key)) * weight

    return _fused_rows(key, inputs, 1, normalise)


def _reduce_rows(key: dict, inputs: list[torch.Tensor]) -> torch.Tensor:
    x = inputs[0].double()
    ops = {"sum": lambda: x.sum(-1), "mean": lambda: x.mean(-1), "max": lambda: x.amax(-1)}
    return ops[str(key["op"])]()


def _transpose(key: dict, inputs: list[torch.Tensor]) -> torch.Tensor:
    return inputs[0].double().transpose(-2, -1)


def _embedding(key: dict, inputs: list[torch.Tensor]) -> torch.Tensor:
    ids, table = inputs
    return table.double()[ids.long().clamp(0, int(key["vocab"]) - 1)]


def _mask_bias(key: dict, inputs: list[torch.Tensor]) -> torch.Tensor:
    (mask,) = inputs
    return torch.zeros(mask.shape, dtype=torch.float64).masked_fill(mask == 0, -math.inf)


register("layer_norm", _layer_norm)
register("rms_norm", _rms_norm)
register("reduce_rows", _reduce_rows)
register("transpose", _transpose)
register("embedding", _embedding)
register("mask_bias", _mask_bias)


def epilogue_inputs(key: dict, inputs: list[torch.Tensor], shape: tuple[int, ...]) -> dict:
    """The extra inputs of a fused epilogue, broadcast to the output `shape` by their kind:
    `full` has the output's elements, `row` one per column, `col` one per row, `scalar` one."""
    kinds = parse_input_kinds(str(key.get("inputs") or ""))
    views = {
        "full": lambda flat: flat.reshape(shape),
        "row": lambda flat: flat.expand(*shape[:-1], -1),
        "col": lambda flat: flat.reshape(*shape[:-1], 1),
        "scalar": lambda flat: flat[0],
    }
    return {
        f"in{i}": views[kind](tensor.double().reshape(-1))
        for i, (kind, tensor) in enumerate(zip(kinds, inputs, strict=True))
    }


def split_k_slices(k: int, split: int) -> list[slice]:
    """The k-slice each of a split-K matmul's `split` parts sums: ceil(k / split) rounded up
    to 8 wide (whole 16-byte rows of 16-bit elements), the last ones shorter or empty."""
    width = math.ceil(math.ceil(k / split) / 8) * 8
    return [slice(min(k, s * width), min(k, (s + 1) * width)) for s in range(split)]


def _matmul(key: dict, inputs: list[torch.Tensor]) -> torch.Tensor:
    a, b = (t.double() for t in inputs[:2])
    if str(key.get("layout", "kn")) == "nk":
        b = b.transpose(-2, -1)
    split = int(key.get("split", 1))
    if split > 1:  # each part's sum over its k-slice, before any epilogue
        b = b.expand(a.shape[0], *b.shape[1:])
        return torch.stack(
            [a[..., cut] @ b[:, cut, :] for cut in split_k_slices(a.shape[-1], split)]
        )
    product = a @ b
    named = epilogue_inputs(key, inputs[2:], tuple(product.shape))
    named["acc"] = product
    return _as_tensor(_chain(parse_expression(str(key["epilogue"])), named))


register("matmul", _matmul)


def _split_sum(key: dict, inputs: list[torch.Tensor]) -> torch.Tensor:
    n = int(key["n"])
    total = inputs[0].double().reshape(int(key["split"]), -1, n).sum(dim=0)
    named = epilogue_inputs(key, inputs[1:], tuple(total.shape))
    named["acc"] = total
    result = _as_tensor(_chain(parse_expression(str(key["epilogue"])), named))
    return result.expand(total.shape).reshape(-1)


register("split_sum", _split_sum)


def _matmul_tc(key: dict, inputs: list[torch.Tensor]) -> torch.Tensor:
    return _matmul(key, inputs)


register("matmul_tc", _matmul_tc)


def _rope(key: dict, inputs: list[torch.Tensor]) -> torch.Tensor:
    x, cos, sin = (t.double() for t in inputs)
    half = int(key["half"])
    first, second = x[..., :half], x[..., half:]
    batch = int(key["tokens"]) // int(key["seq"])
    cos, sin = cos.repeat(batch, 1)[:, None, :], sin.repeat(batch, 1)[:, None, :]
    return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)


register("rope", _rope)


def _attention(key: dict, inputs: list[torch.Tensor]) -> torch.Tensor:
    q, k, v = (t.double() for t in inputs[:3])
    group = int(key["bh"]) // int(key["kv_bh"])
    k, v = k.repeat_interleave(group, dim=0), v.repeat_interleave(group, dim=0)
    scores = q @ k.transpose(-2, -1) * float(key["scale"])
    if str(key.get("masked", "no")) == "yes":
        heads = int(key["bh"]) // int(key["batch"])
        rows = int(key.get("mask_rows", 1))
        mask = inputs[3].double().reshape(int(key["batch"]), rows, -1)
        scores = scores + mask.repeat_interleave(heads, dim=0)
    if str(key["causal"]) == "yes":
        rows, cols = scores.shape[-2:]
        hidden = torch.ones(rows, cols, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(hidden, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


register("attention", _attention)
register("attention_tc", _attention)


def _permute(key: dict, inputs: list[torch.Tensor]) -> torch.Tensor:
    dims = [int(key[f"d{i}"]) for i in range(4)]
    strides = [int(key[f"s{i}"]) for i in range(4)]
    flat = inputs[0].double().reshape(-1)
    return torch.as_strided(flat, dims, strides, int(key["offset"])).contiguous()


register("permute", _permute)
