"""Finds the RMSNorms of a graph and makes each one `emmy::rms_norm`: `torch.rms_norm`
(what `nn.RMSNorm` calls) and the form transformers' models write out (Llama, Mistral,
Qwen; Gemma's weight is (1 + w)),

    variance = x.pow(2).mean(-1, keepdim=True)
    y = weight * (x * torch.rsqrt(variance + eps)).to(dtype)

Under torch.compile the backend finds them in dynamo's graph, before AOTAutograd: below
autograd both forms become pow, mean, add, rsqrt and mul, and a training step's backward
the dozen pieces autograd makes of them; as one op, the forward is the `rms_norm` row
kernel and the backward `emmy::rms_norm_backward`'s. emmy.compile finds the written-out
form in the exported ATen graph (where `torch.rms_norm` is kept whole already). x may
first be widened to f32 (`x.to(torch.float32)`): the op then reads x in its own dtype,
which must be the weight's and the result's."""

from __future__ import annotations

import copy
import operator
from collections.abc import Sequence

import torch
from torch import fx

# the op's registration: the graph calls emmy::rms_norm
from emmy.frontend import ops  # noqa: F401

aten = torch.ops.aten

#: the functions of the pattern, dynamo's and ATen's, by what they compute
_FUNCTIONS = {
    torch.rsqrt: "rsqrt",
    aten.rsqrt.default: "rsqrt",
    operator.add: "add",
    torch.add: "add",
    aten.add.Tensor: "add",
    aten.add.Scalar: "add",
    operator.mul: "mul",
    torch.mul: "mul",
    aten.mul.Tensor: "mul",
    torch.pow: "pow",
    operator.pow: "pow",
    aten.pow.Tensor_Scalar: "pow",
    torch.mean: "mean",
    aten.mean.dim: "mean",
    torch.square: "square",
    aten._to_copy.default: "to",
    aten.to.dtype: "to",
}
#: what an exported graph checks of a value before converting it: no use of it
_CHECK = aten._assert_tensor_metadata.default
#: the methods of the pattern that dynamo's graphs call
_METHODS = {"rsqrt", "add", "mul", "pow", "mean", "square", "to", "float"}

#: a norm found: its x, weight and eps, the node of its result, and the nodes it replaces
Match = tuple[fx.Node, fx.Node, float, fx.Node, Sequence[fx.Node]]


def default_eps(dtype: torch.dtype) -> float:
    """`torch.rms_norm`'s eps where none is given: that of the dtype it computes in (f32 for
    f16 and bf16)."""
    return torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).eps


def recognise_rms_norms(graph_module: fx.GraphModule) -> int:
    """Makes each RMSNorm of dynamo's graph one `emmy::rms_norm` node; how many."""
    found = _rewrite(graph_module.graph)
    if found:
        graph_module.recompile()
    return found


def with_rms_norms(graph: fx.Graph) -> fx.Graph:
    """An exported graph with each RMSNorm one `emmy::rms_norm` node: a copy where there
    is one (the exported program stays the user's), else the graph itself."""
    if not any(_match(node) for node in graph.nodes):
        return graph
    rewritten = copy.deepcopy(graph)
    _rewrite(rewritten)
    return rewritten


def _rewrite(graph: fx.Graph) -> int:
    found = 0
    for node in list(graph.nodes):
        match = _match(node)
        if match is None:
            continue
        x, weight, eps, result, pieces = match
        # the result's node becomes the op: its name and its example value stay
        result.op, result.target = "call_function", torch.ops.emmy.rms_norm.default
        result.args, result.kwargs = (x, weight, eps), {}
        for piece in pieces:  # users first
            if piece is result or _users(piece):
                continue
            for check in list(piece.users):
                graph.erase_node(check)
            graph.erase_node(piece)
        found += 1
    return found


def _match(node: fx.Node) -> Match | None:
    return _library_call(node) or _written_out(node)


def _kind(node: fx.Node) -> str | None:
    if node.op == "call_method" and node.target in _METHODS:
        return str(node.target)
    if node.op == "call_function":
        return _FUNCTIONS.get(node.target)  # type: ignore[arg-type]
    return None


def _example(node: object) -> torch.Tensor | None:
    """The node's example tensor: dynamo's `example_value`, an exported graph's `val`."""
    if not isinstance(node, fx.Node):
        return None
    value = node.meta.get("example_value", node.meta.get("val"))
    return value if isinstance(value, torch.Tensor) else None


def _users(node: fx.Node) -> list[fx.Node]:
    return [user for user in node.users if user.target is not _CHECK]


def _only_user(node: fx.Node | None) -> fx.Node | None:
    if node is None:
        return None
    users = _users(node)
    return users[0] if len(users) == 1 else None


def _library_call(node: fx.Node) -> Match | None:
    """`torch.rms_norm(x, (cols,), weight, eps)` over the last dim, with a weight."""
    if node.op != "call_function" or node.target is not torch.rms_norm or node.kwargs:
        return None
    x, shape, weight, eps = (list(node.args) + [None, None])[:4]
    example = _example(x)
    if example is None or not isinstance(x, fx.Node) or not isinstance(weight, fx.Node):
        return None
    if not isinstance(shape, Sequence) or len(shape) != 1:
        return None
    if eps is None:
        return x, weight, default_eps(example.dtype), node, [node]
    if not isinstance(eps, (int, float)):
        return None
    return x, weight, float(eps), node, [node]


def _of(value: object, *kinds: str) -> fx.Node | None:
    """`value` where it is a node that computes one of `kinds`."""
    return value if isinstance(value, fx.Node) and _kind(value) in kinds else None


def _written_out(node: fx.Node) -> Match | None:
    """The pattern of the module's docstring, found from its rsqrt."""
    rsqrt = _of(node, "rsqrt")
    if rsqrt is None or len(rsqrt.args) != 1 or rsqrt.kwargs:
        return None
    shifted = _of(rsqrt.args[0], "add")
    if shifted is None or shifted.kwargs or _only_user(shifted) is not rsqrt:
        return None
    found, eps = _node_and_number(shifted.args)
    mean = _of(found, "mean")
    if mean is None or _only_user(mean) is not shifted or not _over_last_dim_kept(mean):
        return None
    squares = _of(mean.args[0], "pow", "mul", "square")
    x = _squared(squares) if squares is not None else None
    if squares is None or x is None or _only_user(squares) is not mean:
        return None
    scaled = _of(_only_user(rsqrt), "mul")
    if scaled is None or scaled.kwargs or {id(a) for a in scaled.args} != {id(x), id(rsqrt)}:
        return None
    pieces = [scaled, rsqrt, shifted, mean, squares]
    narrowed = _of(_only_user(scaled), "to")
    if narrowed is not None and len(narrowed.args) + len(narrowed.kwargs) == 2:
        pieces.insert(0, narrowed)
    else:
        narrowed = scaled
    result = _of(_only_user(narrowed), "mul")
    if result is None or result.kwargs or narrowed not in result.args:
        return None
    weights = [a for a in result.args if a is not narrowed]
    if len(weights) != 1:
        return None
    pieces.insert(0, result)
    return _with_input(x, weights[0], eps, result, pieces)


def _node_and_number(args: tuple) -> tuple[fx.Node | None, float]:
    if len(args) != 2:
        return None, 0.0
    first, second = args
    if isinstance(first, fx.Node) and isinstance(second, (int, float)):
        return first, float(second)
    if isinstance(second, fx.Node) and isinstance(first, (int, float)):
        return second, float(first)
    return None, 0.0


def _over_last_dim_kept(mean: fx.Node) -> bool:
    example = _example(mean.args[0])
    dims = mean.args[1] if len(mean.args) > 1 else mean.kwargs.get("dim")
    keepdim = mean.args[2] if len(mean.args) > 2 else mean.kwargs.get("keepdim", False)
    if example is None or keepdim is not True or set(mean.kwargs) - {"dim", "keepdim"}:
        return False
    dims = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    return (
        len(dims) == 1 and isinstance(dims[0], int) and dims[0] % example.dim() == example.dim() - 1
    )


def _squared(squares: fx.Node) -> fx.Node | None:
    """x where `squares` is x ** 2, x * x or x.square()."""
    kind = _kind(squares)
    if squares.kwargs:
        return None
    args = squares.args
    if kind == "pow" and len(args) == 2 and args[1] == 2 and isinstance(args[0], fx.Node):
        return args[0]
    if kind == "mul" and len(args) == 2 and args[0] is args[1] and isinstance(args[0], fx.Node):
        return args[0]
    if kind == "square" and len(args) == 1 and isinstance(args[0], fx.Node):
        return args[0]
    return None


def _with_input(
    x: fx.Node, weight: object, eps: float, result: fx.Node, pieces: list[fx.Node]
) -> Match | None:
    """The match, reading x before its widening to f32 where the norm's dtypes allow: x, the
    weight [cols] and the result share one dtype (the op computes in f32 whatever it is)."""
    examples = _example(x), _example(weight), _example(result)
    if not isinstance(weight, fx.Node) or any(e is None for e in examples):
        return None
    x_example, weight_example, result_example = examples
    assert x_example is not None and weight_example is not None and result_example is not None
    widths = [x_example.shape[-1], *weight_example.shape]
    # a symbolic width is never compared: that would add a guard after dynamo's trace
    if len(widths) != 2 or not all(isinstance(w, int) for w in widths) or widths[0] != widths[1]:
        return None
    source = x.args[0] if _kind(x) in ("to", "float") and set(_users(x)) <= set(pieces) else None
    source_example = _example(source)
    dtypes = {weight_example.dtype, result_example.dtype}
    if source_example is not None and dtypes == {source_example.dtype}:
        assert isinstance(source, fx.Node)
        return source, weight, eps, result, [*pieces, x]
    if dtypes == {x_example.dtype}:
        return x, weight, eps, result, pieces
    return None
