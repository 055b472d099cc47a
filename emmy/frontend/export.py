"""The frontend for models: `torch.export` of an nn.Module → an emmy.graph function.

The exported program is read at the level torch.export gives before decompositions
(`aten.linear`, `aten.layer_norm`, `aten.scaled_dot_product_attention`, ...), so each op
keeps the shape a library family matches, and converted by emmy.frontend.converter. A
program exported with dynamic dims is specialised to the shapes it is called at without
exporting again, as is a graph AOTAutograd hands a backend.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, cast

import torch
from torch import fx
from torch.export._tree_utils import reorder_kwargs
from torch.export.graph_signature import InputSpec
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.utils import _pytree

from emmy.base.errors import EmmyError
from emmy.frontend.converter import Converter, ModelGraph
from emmy.frontend.function_builder import _where, bind_attributes
from emmy.frontend.op_registry import op_name, op_overload
from emmy.frontend.rms_norms import with_rms_norms
from emmy.frontend.torch_fallback import returns_view


def export_program(
    module: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor],
    dynamic_shapes: object = None,
    example_kwargs: dict[str, object] | None = None,
) -> torch.export.ExportedProgram:
    """torch.export of `module` (eval mode, no grad) at its example inputs, positional and
    keyword, as its users call it; `dynamic_shapes` (torch.export's, e.g.
    `({1: Dim("seq", max=1024)},)`) declares the dims that may vary."""
    module = module.eval()
    _refuse_split_devices(module, example_inputs, example_kwargs or {})
    register_output_types()
    try:
        with torch.no_grad():
            # the caller's, as given: what torch.export refuses is "torch.export failed"
            shapes = cast(dict[str, Any] | tuple[Any, ...] | list[Any] | None, dynamic_shapes)
            exported = torch.export.export(
                module, tuple(example_inputs), example_kwargs or None, dynamic_shapes=shapes
            )
            _write_fresh_functionally(exported.graph)
            if _mutates(exported.graph):
                # functionalised (no decompositions): each in-place op becomes its functional
                # form, and the graph returns the new value of every input it mutates
                with warnings.catch_warnings():
                    # torch's own copy of the export's tree spec warns about torch's API
                    warnings.filterwarnings("ignore", "`isinstance.treespec", FutureWarning)
                    exported = exported.run_decompositions({})
    except Exception as error:  # noqa: BLE001 - any reason torch.export refuses the model
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise EmmyError(f"torch.export failed: {type(error).__name__}: {first_line}") from None
    return exported


def _refuse_split_devices(
    module: torch.nn.Module, args: Sequence[object], kwargs: dict[str, object]
) -> None:
    """A one-line error where the module's weights and its example inputs share no device:
    torch.export traces the module on its inputs' device, and fails deep inside it."""
    weights = {str(t.device) for t in (*module.parameters(), *module.buffers())}
    leaves = _pytree.tree_leaves((tuple(args), kwargs))
    inputs = {str(t.device) for t in leaves if isinstance(t, torch.Tensor)}
    if weights and inputs and weights.isdisjoint(inputs):
        raise EmmyError(
            f"the model's weights are on {', '.join(sorted(weights))} and its inputs on "
            f"{', '.join(sorted(inputs))}: move the model to its inputs' device (model.to(...))"
        )


#: in-place ops that change no data, only autograd's view of a tensor (a Hugging Face
#: cache's lazily made tensors are detached in place)
_METADATA_ONLY = frozenset({torch.ops.aten.detach_.default})


def _mutates(fx_graph: fx.Graph) -> bool:
    """Whether a graph has an in-place op that writes data (a KV cache's `index_copy_`)."""
    return any(
        isinstance(node.target, torch._ops.OpOverload)
        and node.target._schema.is_mutable
        and node.target not in _METADATA_ONLY
        for node in fx_graph.nodes
        if node.op == "call_function"
    )


def _write_fresh_functionally(fx_graph: fx.Graph) -> None:
    """Makes each in-place op that writes only a tensor the graph made, which no op reads
    after it, its functional form (a mixture of experts' `weights /= sum`, `inv[perm] =
    arange`): its result is the tensor's one value from then on. torch's functionalisation
    is left for the writes it must order (an input's, a view's): it loses the constants
    lifted in submodules (a cache's lazy tensors)."""
    order = {node: place for place, node in enumerate(fx_graph.nodes)}
    for node in fx_graph.nodes:
        functional = _functional_form(node)
        if functional is not None and _writes_fresh(node, order):
            node.target = functional


def _functional_form(node: fx.Node) -> torch._ops.OpOverload | None:
    """The out-of-place overload of an in-place ATen op (`div_.Tensor` → `div.Tensor`)."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return None
    schema = node.target._schema
    if not schema.is_mutable or node.target in _METADATA_ONLY or not schema.name.endswith("_"):
        return None
    namespace, name = schema.name.split("::")
    packet = getattr(getattr(torch.ops, namespace), name.removesuffix("_"), None)
    overload = node.target._overloadname
    return getattr(packet, overload, None) if packet is not None else None


def _writes_fresh(node: fx.Node, order: dict[fx.Node, int]) -> bool:
    """Whether the op writes only its first argument, a tensor the graph made (no input,
    no view) that no op reads after it, nor views (a view would see the write)."""
    written = [
        value
        for argument, value in zip(op_overload(node)._schema.arguments, node.args, strict=False)
        if argument.alias_info is not None and argument.alias_info.is_write
    ]
    if len(written) != 1 or written[0] is not node.args[0]:
        return False
    target = written[0]
    if not isinstance(target, fx.Node) or target.op != "call_function" or returns_view(target):
        return False
    readers = [user for user in target.users if user is not node]
    return all(order[user] < order[node] and not returns_view(user) for user in readers)


def mutated_inputs(exported: torch.export.ExportedProgram) -> dict[int, int]:
    """The returned values that are the new values of mutated user inputs: their place in
    the graph's return → the input's place among the user inputs."""
    signature = exported.graph_signature
    kinds = torch.export.graph_signature.OutputKind
    for spec in signature.output_specs:
        if spec.kind in (kinds.BUFFER_MUTATION, kinds.PARAMETER_MUTATION):
            raise EmmyError(
                f"the model writes its own {spec.target} in place; a program writes only its "
                "inputs (pass the tensor, a KV cache, as an input)"
            )
    user = list(signature.user_inputs)
    return {
        index: user.index(spec.target)
        for index, spec in enumerate(signature.output_specs)
        if spec.kind == kinds.USER_INPUT_MUTATION
    }


def register_output_types() -> None:
    """Lets torch.export and pytree see through the types a model returns that they do not
    know: a Hugging Face model called with its defaults (use_cache) returns a DynamicCache,
    which transformers registers on request. Only where transformers is loaded already."""
    if "transformers" not in sys.modules:
        return
    try:
        # transformers is the user's model's, loaded by it already: emmy never loads it first
        from transformers.integrations.executorch import register_dynamic_cache_export_support
    except ImportError:  # a transformers without it: its caches stay refused, one line
        return
    register_dynamic_cache_export_support()


def export(
    module: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor],
    fallback: bool = True,
    example_kwargs: dict[str, object] | None = None,
) -> ModelGraph:
    """Exports `module` at its example inputs (positional and keyword) and converts it."""
    exported = export_program(module, example_inputs, example_kwargs=example_kwargs)
    flat = flat_inputs(exported.call_spec.in_spec, example_inputs, example_kwargs or {})
    return convert(exported, flat, fallback)


def flat_inputs(
    in_spec: _pytree.TreeSpec | None, args: Sequence[object], kwargs: dict[str, object]
) -> list[torch.Tensor]:
    """A call's tensors in the order of the exported graph's inputs: its positional and
    keyword arguments flattened as torch.export flattened the example's."""
    if not kwargs:
        return [x for x in args if isinstance(x, torch.Tensor)]
    ordered = reorder_kwargs(kwargs, in_spec) if in_spec is not None else kwargs
    leaves, _ = _pytree.tree_flatten((tuple(args), ordered))
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def convert(
    exported: torch.export.ExportedProgram,
    inputs: Sequence[torch.Tensor],
    fallback: bool = True,
) -> ModelGraph:
    """The graph of an exported program at the shapes of `inputs`: a program exported with
    dynamic dims is specialised to them without exporting again. Ops emmy has no kernel
    for run through torch, or with `fallback` False are an error naming the op."""
    state = {**exported.state_dict, **exported.constants}
    constants = {
        spec.arg.name: _state_of(state, spec)
        for spec in exported.graph_signature.input_specs
        if spec.kind != torch.export.graph_signature.InputKind.USER_INPUT
    }
    fx_graph = exported.graph
    _refuse_data_dependent_shapes(fx_graph)
    if exported.range_constraints:
        fx_graph = specialised_graph(exported, inputs)
    fx_graph = with_rms_norms(fx_graph)
    out_spec = exported.call_spec.out_spec
    model = Converter(fx_graph, constants, out_spec, fallback, mutated_inputs(exported)).convert()
    model.in_spec = exported.call_spec.in_spec
    return model


def _state_of(state: Mapping[str, object], spec: InputSpec) -> tuple[str, torch.Tensor]:
    """The state-dict name and tensor of an input of the graph that is not the user's (a
    weight, a buffer, a constant)."""
    tensor = state.get(spec.target) if spec.target is not None else None
    if spec.target is None or not isinstance(tensor, torch.Tensor):
        raise EmmyError(f"the exported program's {spec.kind.name.lower()} input is not a tensor")
    return spec.target, tensor


def _refuse_data_dependent_shapes(fx_graph: fx.Graph) -> None:
    """An op whose output shape depends on the data (nonzero, a boolean mask's selection) is
    one line naming it, before any kernel: neither emmy nor torch can plan its buffers."""
    for node in fx_graph.nodes:
        if node.op == "call_function" and free_unbacked_symbols(node.meta.get("val")):
            raise EmmyError(
                f"{op_name(node)} has a data-dependent output shape, which a compiled program "
                f"cannot hold (node {node.name}{_where(node)})"
            )


def dynamic_dims(exported: torch.export.ExportedProgram) -> dict[str, tuple[int, int]]:
    """The dims an exported program leaves free: their names and (min, max) ranges."""
    return {
        str(symbol): (int(bounds.lower), int(bounds.upper))
        for symbol, bounds in exported.range_constraints.items()
    }


def _bind_dims(exported: torch.export.ExportedProgram, inputs: Sequence[torch.Tensor]) -> None:
    """Checks the inputs against the shapes the program was exported for: each static dim
    as it was, each dynamic dim within its range and the same wherever it appears."""
    placeholders = [n for n in exported.graph.nodes if n.op == "placeholder"]
    user = [n for n in placeholders if n.name in exported.graph_signature.user_inputs]
    if len(inputs) != len(user):
        raise EmmyError(f"the model takes {len(user)} input(s), got {len(inputs)}")
    bound: dict[str, int] = {}
    for node, tensor in zip(user, inputs, strict=True):
        declared = node.meta["val"].shape
        where = f"input {node.name}"
        if len(declared) != tensor.dim():
            raise EmmyError(
                f"{where} has {tensor.dim()} dims; the model was exported with {len(declared)}"
            )
        for dim, (want, got) in enumerate(zip(declared, tensor.shape, strict=True)):
            if isinstance(want, int):
                if want != got:
                    raise EmmyError(
                        f"{where} dim {dim} is {got}; it is static at {want} (declare it "
                        "dynamic to vary it)"
                    )
                continue
            symbol = want.node.expr
            bounds = exported.range_constraints.get(symbol)
            if bounds is not None and not int(bounds.lower) <= got <= int(bounds.upper):
                raise EmmyError(
                    f"{where} dim {dim} is {got}, outside its dynamic range "
                    f"[{int(bounds.lower)}, {int(bounds.upper)}]"
                )
            if bound.setdefault(str(symbol), got) != got:
                raise EmmyError(
                    f"{where} dim {dim} is {got}, but the same dynamic dim is {bound[str(symbol)]} elsewhere"
                )


class _Propagate(fx.Interpreter):
    """Runs a graph on meta tensors, recording each node's value as its example."""

    def run_node(self, n: fx.Node):
        result = super().run_node(n)
        n.meta["val"] = result
        return result

    def get_attr(self, target, args, kwargs):
        # a tensor constant is met by meta tensors: its example is a meta tensor too (its
        # value is the node's ATTRIBUTE)
        value = super().get_attr(target, args, kwargs)
        if isinstance(value, torch.Tensor):
            return torch.empty_strided(
                value.shape, value.stride(), dtype=value.dtype, device="meta"
            )
        return value

    def call_function(self, target, args, kwargs):
        # a factory (aten.arange of the cache positions) or a move (`mask.to(device)`)
        # names the model's device: its tensor must be on meta beside the inputs it meets
        if "device" in kwargs:
            kwargs = {**kwargs, "device": torch.device("meta")}
        if target is torch.ops.aten.to.device:  # a mask moved to the model's device
            args = (args[0], torch.device("meta"), *args[2:])
        return super().call_function(target, args, kwargs)


def specialised_graph(
    exported: torch.export.ExportedProgram, inputs: Sequence[torch.Tensor]
) -> fx.Graph:
    """A copy of the exported graph whose example values have the shapes of `inputs`."""
    _bind_dims(exported, inputs)
    copy = fx.Graph()
    output = copy.graph_copy(exported.graph, {})
    copy.output(output)
    module = fx.GraphModule(exported.graph_module, copy)
    args = []
    state = {**exported.state_dict, **exported.constants}
    given = iter(inputs)
    for spec in exported.graph_signature.input_specs:
        if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT:
            tensor = next(given)
        else:
            _, tensor = _state_of(state, spec)
        args.append(torch.empty(tensor.shape, dtype=tensor.dtype, device="meta"))
    with torch.no_grad():
        _Propagate(module).run(*args)
    return copy


def _symbolic(value: object) -> bool:
    if isinstance(value, torch.Tensor):
        return any(not isinstance(d, int) for d in value.shape)
    return isinstance(value, torch.SymInt)


def specialised_fx_graph(module: fx.GraphModule, inputs: Sequence[object]) -> fx.Graph:
    """The graph of `module` (one AOTAutograd hands a backend) with example values at the
    shapes of `inputs`, its tensors and the sizes of its dynamic dims: the graph itself
    where it is static."""
    bind_attributes(module.graph)
    placeholders = [n for n in module.graph.nodes if n.op == "placeholder"]
    if not any(_symbolic(n.meta.get("val")) for n in placeholders):
        return module.graph
    copy = fx.Graph()
    copy.output(copy.graph_copy(module.graph, {}))
    args = [
        torch.empty(x.shape, dtype=x.dtype, device="meta") if isinstance(x, torch.Tensor) else x
        for x in inputs
    ]
    with torch.no_grad():
        _Propagate(fx.GraphModule(module, copy)).run(*args)
    return copy


def kept_input_mutations(fx_graph: fx.Graph) -> tuple[fx.Graph, dict[int, int]]:
    """An AOTAutograd graph that keeps its input mutations (a KV cache's new value copied
    into the input at the end, `aten.copy_(input, value)`) as a graph that returns each such
    value after its own outputs, and where they go: their place in the return → the
    input's place among the tensor inputs (Converter's `mutations`). A copy_ the graph
    also returns is returned as the input itself."""
    bind_attributes(fx_graph)
    copies = [
        node
        for node in fx_graph.nodes
        if node.op == "call_function"
        and node.target is torch.ops.aten.copy_.default
        and node.args[0].op == "placeholder"
        and all(user.op == "output" for user in node.users)
    ]
    if not copies:
        return fx_graph, {}
    graph = fx.Graph()
    mapping: dict[fx.Node, fx.Node] = {}
    returned = graph.graph_copy(fx_graph, mapping)
    tensors = [
        n
        for n in fx_graph.nodes
        if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)
    ]
    outputs = list(returned) if isinstance(returned, (list, tuple)) else [returned]
    mutations = {}
    for node in copies:
        copied = mapping[node]
        # a returned copy_ is the input itself, written: returned as a view of it
        outputs = [mapping[node.args[0]] if out is copied else out for out in outputs]
        mutations[len(outputs)] = tensors.index(node.args[0])
        outputs.append(mapping[node.args[1]])
        graph.erase_node(copied)
    graph.output(tuple(outputs))
    return graph, mutations
