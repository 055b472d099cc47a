"""How much of a model emmy compiles natively: of the ops of its exported graph, how many
and what share of the FLOPs the converter takes (`emmy.frontend.model.supports`), and
which ops it refuses and why (those run as torch ops, or fail without the fallback).

FLOPs are counted per node on the example inputs: a matmul, convolution or attention as
`torch.utils.flop_counter` counts it (2 per multiply-add), any other op that computes one
per output element, a view none.

    report = model_coverage(model, inputs)
    report.op_share, report.flop_share
    report.refused      # {("aten.cumsum.default", "unsupported op aten.cumsum.default"): 1}
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import fx
from torch.utils.flop_counter import FlopCounterMode

from emmy.frontend.model import export_program, supports


@dataclass
class Coverage:
    """Ops and FLOPs of a graph, in all and those the converter takes."""

    ops: int = 0
    native_ops: int = 0
    flops: int = 0
    native_flops: int = 0
    #: (op, reason) → how many nodes were refused so
    refused: Counter = field(default_factory=Counter)

    @property
    def op_share(self) -> float:
        return self.native_ops / self.ops if self.ops else 1.0

    @property
    def flop_share(self) -> float:
        return self.native_flops / self.flops if self.flops else 1.0

    def __add__(self, other: Coverage) -> Coverage:
        """The coverage of two graphs together."""
        return Coverage(
            self.ops + other.ops,
            self.native_ops + other.native_ops,
            self.flops + other.flops,
            self.native_flops + other.native_flops,
            self.refused + other.refused,
        )

    def add(self, node: fx.Node, flops: int) -> None:
        support = supports(node)
        self.ops += 1
        self.flops += flops
        if support:
            self.native_ops += 1
            self.native_flops += flops
        else:
            self.refused[(str(node.target), support.reason)] += 1


class _Counting(fx.Interpreter):
    """Runs an exported graph on real tensors, each op's FLOPs added to a Coverage."""

    def __init__(self, module: fx.GraphModule, coverage: Coverage) -> None:
        super().__init__(module)
        self.coverage = coverage

    def run_node(self, n: fx.Node):
        if n.op != "call_function" or n.target is operator.getitem:
            return super().run_node(n)
        with FlopCounterMode(display=False) as counter:
            result = super().run_node(n)
        flops = counter.get_total_flops()
        if not flops and isinstance(result, torch.Tensor) and not _is_view(n):
            flops = result.numel()
        self.coverage.add(n, flops)
        return result


def _is_view(node: fx.Node) -> bool:
    return bool(getattr(node.target, "is_view", False))


def program_coverage(
    exported: torch.export.ExportedProgram, inputs: Sequence[torch.Tensor]
) -> Coverage:
    """The coverage of an exported program, its FLOPs counted on `inputs`."""
    state = {**exported.state_dict, **exported.constants}
    given = iter(inputs)
    args = [
        next(given)
        if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT
        else state[spec.target]
        for spec in exported.graph_signature.input_specs
    ]
    coverage = Coverage()
    with torch.no_grad():
        _Counting(exported.graph_module, coverage).run(*args)
    return coverage


def model_coverage(module: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> Coverage:
    """The coverage of a module exported at `inputs`."""
    return program_coverage(export_program(module, inputs), inputs)
