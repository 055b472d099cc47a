"""How much of each tiny real model (emmy.frontend.tiny_models, by set: transformers,
vision, diffusion, moe) runs in emmy's kernels, under both APIs: emmy.compile (torch.export's
graph) and torch.compile with emmy's backend (AOTAutograd's graphs, summed). Per model and
API, the coverage the frontend records (its ops in emmy kernels, computed at compile time
and through torch, and the share of the FLOPs in emmy kernels); then each op that falls
back, how often and why, and the ops whose FLOPs were counted one per output element (no
formula) that torch does not tag pointwise. The set `training` (emmy.frontend.tiny_training:
mlp, cnn, gpt2, llama, vit) has torch.compile's training step instead, its forward graphs
(`train forward`) and its backward graphs (`train backward`) each a row.

    .venv/bin/python benchmarks/model_coverage.py [--sets vision,training] [--models gpt2,unet]
        [--training mlp,gpt2] [--apis export,torch.compile] [--seq 8]

With none of --sets, --models and --training, every set. FLOPs as emmy.frontend.torch_fallback counts them.
Converting is all either API does here (no kernel is built): torch.compile's graphs are
converted by a backend that then runs them eagerly, as emmy.api.backend converts them
before it builds their kernels.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

import torch
from torch._dynamo.backends.common import aot_autograd

from emmy.api import converting_compiler
from emmy.frontend import tiny_models
from emmy.frontend.decompositions import decompositions
from emmy.frontend.export import export
from emmy.frontend.tiny_training import TRAINING
from emmy.frontend.torch_fallback import Coverage, elementwise

APIS = ("export", "torch.compile")
#: the set of training steps, and what measures each (its APIs are the step's directions)
TRAINING_SET = "training"
TRAINING_DIRECTIONS = ("train forward", "train backward")


def export_coverage(model: torch.nn.Module, inputs: tuple) -> tuple[Coverage, int]:
    """emmy.compile's account: the coverage of torch.export's one graph."""
    return export(model, inputs).coverage, 1


def torch_compile_coverage(model: torch.nn.Module, inputs: tuple) -> tuple[Coverage, int]:
    """torch.compile's account: each graph AOTAutograd hands the backend, converted, their
    coverages summed."""
    coverages: list[Coverage] = []
    backend = aot_autograd(
        fw_compiler=converting_compiler(lambda m: coverages.append(m.coverage)),
        decompositions=decompositions(),
        keep_inference_input_mutations=True,
    )
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=backend)(*inputs)
    torch._dynamo.reset()
    return summed(coverages), len(coverages)


def training_coverage(name: str) -> dict[str, tuple[Coverage, int]]:
    """A training step's account under torch.compile: its forward graphs and its backward
    graphs (AOTAutograd compiles them at the first backward), each direction summed."""
    step = TRAINING[name]()
    forward: list[Coverage] = []
    backward: list[Coverage] = []
    backend = aot_autograd(
        fw_compiler=converting_compiler(lambda m: forward.append(m.coverage), training=True),
        bw_compiler=converting_compiler(lambda m: backward.append(m.coverage), training=True),
        decompositions=decompositions(),
        keep_inference_input_mutations=True,
    )
    torch._dynamo.reset()
    torch.compile(step.loss, backend=backend)(step.model, *step.inputs).backward()
    torch._dynamo.reset()
    return {
        "train forward": (summed(forward), len(forward)),
        "train backward": (summed(backward), len(backward)),
    }


def summed(coverages: list[Coverage]) -> Coverage:
    """One coverage of several graphs: their counts added, their lists joined."""
    total = Coverage()
    for coverage in coverages:
        total.ops += coverage.ops
        total.native += coverage.native
        total.folded += coverage.folded
        total.flops += coverage.flops
        total.native_flops += coverage.native_flops
        total.fallbacks += coverage.fallbacks
        total.per_element += coverage.per_element
    return total


MEASURE = {"export": export_coverage, "torch.compile": torch_compile_coverage}


def fallback_lines(coverage: Coverage) -> list[str]:
    """One line per op that falls back: how many nodes, the op and why (unless the reason
    only says that the op is unsupported); then the ops counted one FLOP per element."""
    counts = Counter((f.op, f.reason) for f in coverage.fallbacks)
    lines = []
    for (op, reason), count in counts.most_common():
        why = "" if reason == f"unsupported op {op}" else f": {reason.removeprefix(f'{op}: ')}"
        lines.append(f"    {count} x {op}{why}")
    per_element = Counter(op for op in coverage.per_element if not elementwise(op))
    if per_element:
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(per_element.items()))
        lines.append(f"    FLOPs one per output element, not tagged pointwise: {ops}")
    return lines


def known_sets() -> dict[str, list[str]]:
    return {**{n: list(m) for n, m in tiny_models.SETS.items()}, TRAINING_SET: list(TRAINING)}


def arguments() -> tuple[list[tuple[str, list[str]]], list[str], int]:
    """The sets to measure (each a name and its models), the APIs and the sequence length."""
    sets_known = known_sets()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="", help=f"comma-separated, of {', '.join(sets_known)}")
    parser.add_argument(
        "--models", default="", help=f"comma-separated, of {', '.join(tiny_models.MODELS)}"
    )
    parser.add_argument(
        "--training", default="", help=f"training steps, comma-separated, of {', '.join(TRAINING)}"
    )
    parser.add_argument(
        "--apis", default=",".join(APIS), help=f"comma-separated, of {', '.join(APIS)}"
    )
    parser.add_argument("--seq", type=int, default=8, help="sequence length (default: 8)")
    args = parser.parse_args()
    set_names = [s for s in args.sets.split(",") if s]
    models = [m for m in args.models.split(",") if m]
    apis = [a for a in args.apis.split(",") if a]
    steps = [t for t in args.training.split(",") if t]
    for given, known, what in (
        (set_names, sets_known, "set"),
        (models, tiny_models.MODELS, "model"),
        (steps, TRAINING, "training step"),
        (apis, APIS, "API"),
    ):
        unknown = sorted(set(given) - set(known))
        if unknown:
            parser.error(f"unknown {what}(s) {', '.join(unknown)}")
    if not set_names and not models and not steps:
        set_names = list(sets_known)
    sets = [(name, sets_known[name]) for name in set_names]
    if models:
        sets.append(("models", models))
    if steps:
        sets.append((TRAINING_SET, steps))
    return sets, apis, args.seq


def accounts(set_name: str, name: str, apis: list[str], seq: int):
    """Per API (or per direction of a training step), the model's coverage, its graph
    count and the seconds it took."""
    start = time.perf_counter()
    if set_name == TRAINING_SET:
        measured = training_coverage(name)
        seconds = time.perf_counter() - start
        yield from ((label, *measured[label], seconds) for label in TRAINING_DIRECTIONS)
        return
    model, inputs = tiny_models.build(name, seq)
    for api in apis:
        start = time.perf_counter()
        coverage, graphs = MEASURE[api](model, inputs)
        yield api, coverage, graphs, time.perf_counter() - start


def main() -> int:
    sets, apis, seq = arguments()
    header = (
        f"{'model':18} {'API':14} {'graphs':>6} {'ops':>5} {'in emmy':>8} {'folded':>7} "
        f"{'torch':>6} {'op share':>9} {'FLOPs':>9} {'FLOP share':>11}"
    )
    measured = 0
    totals: dict[str, Coverage] = {}
    for set_name, names in sets:
        print(f"== {set_name}")
        print(header)
        details = []
        for name in names:
            for api, coverage, graphs, seconds in accounts(set_name, name, apis, seq):
                done = coverage.native + coverage.folded
                share = done / coverage.ops if coverage.ops else 1.0
                flop_share = coverage.native_flops / coverage.flops if coverage.flops else 1.0
                print(
                    f"{name:18} {api:14} {graphs:6} {coverage.ops:5} {coverage.native:8} "
                    f"{coverage.folded:7} {len(coverage.fallbacks):6} {share:9.1%} "
                    f"{coverage.flops:9.3g} {flop_share:11.1%}   ({seconds:.1f} s)",
                    flush=True,
                )
                details += [f"{name} ({api}): {len(coverage.fallbacks)} op(s) through torch"]
                details += fallback_lines(coverage)
                totals[api] = summed([totals.get(api, Coverage()), coverage])
            measured += 1
        for line in details:
            print(line)
    for api, total in totals.items():
        done = total.native + total.folded
        print(
            f"all {measured} model(s) ({api}): {done / max(total.ops, 1):.1%} of {total.ops} ops "
            f"in emmy kernels or computed at compile time, "
            f"{total.native_flops / max(total.flops, 1):.1%} of the FLOPs in emmy kernels"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
