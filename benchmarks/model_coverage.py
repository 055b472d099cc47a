"""How much of each tiny real model (emmy.frontend.tiny_models: six Hugging Face
transformers, nn.TransformerEncoderLayer, a small conv net) runs in emmy's kernels: per
model, the coverage the frontend records (its ops in emmy kernels, computed at compile time
and through torch, and the share of the FLOPs in emmy kernels), then each op that falls
back, how often, and why.

    .venv/bin/python benchmarks/model_coverage.py [--models gpt2,conv_net] [--seq 8]

FLOPs as emmy.frontend.fallback counts them.
"""

from __future__ import annotations

import time
from collections import Counter

from emmy.frontend import tiny_models
from emmy.frontend.fallback import Coverage
from emmy.frontend.model import export


def fallback_lines(coverage: Coverage) -> list[str]:
    """One line per op that falls back: how many nodes, the op and why (unless the reason
    only says that the op is unsupported)."""
    counts = Counter((f.op, f.reason) for f in coverage.fallbacks)
    lines = []
    for (op, reason), count in counts.most_common():
        why = "" if reason == f"unsupported op {op}" else f": {reason.removeprefix(f'{op}: ')}"
        lines.append(f"    {count} x {op}{why}")
    return lines


def main() -> int:
    names, seq = tiny_models.parse_model_arguments(__doc__.splitlines()[0])
    print(
        f"{'model':14} {'ops':>5} {'in emmy':>8} {'folded':>7} {'torch':>6} {'op share':>9} "
        f"{'FLOPs':>9} {'FLOP share':>11}"
    )
    details = []
    ops = native = flops = native_flops = 0
    for name in names:
        start = time.perf_counter()
        model, inputs = tiny_models.build(name, seq)
        coverage = export(model, inputs).coverage
        seconds = time.perf_counter() - start
        share = (coverage.native + coverage.folded) / coverage.ops if coverage.ops else 1.0
        flop_share = coverage.native_flops / coverage.flops if coverage.flops else 1.0
        print(
            f"{name:14} {coverage.ops:5} {coverage.native:8} {coverage.folded:7} "
            f"{len(coverage.fallbacks):6} {share:9.1%} {coverage.flops:9.3g} "
            f"{flop_share:11.1%}   ({seconds:.1f} s)"
        )
        details += [f"{name}: {len(coverage.fallbacks)} op(s) through torch"]
        details += fallback_lines(coverage)
        ops += coverage.ops
        native += coverage.native + coverage.folded
        flops += coverage.flops
        native_flops += coverage.native_flops
    print(
        f"all {len(names)} models: {native / max(ops, 1):.1%} of {ops} ops in emmy kernels or "
        f"computed at compile time, {native_flops / max(flops, 1):.1%} of the FLOPs in emmy "
        "kernels"
    )
    for line in details:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
