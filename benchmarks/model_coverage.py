"""How much of each tiny real model (emmy.frontend.tiny_models: six Hugging Face
transformers, nn.TransformerEncoderLayer, a small conv net) emmy compiles natively: per
model, its ops and the share of them and of its FLOPs that the converter takes, and the
ops it refuses with their reasons (those run as torch ops, or fail without the fallback).

    .venv/bin/python benchmarks/model_coverage.py [--models gpt2,conv_net] [--seq 8]

FLOPs as emmy.frontend.coverage counts them: a matmul, convolution or attention as
torch.utils.flop_counter does, one per output element for any other op, none for a view.
"""

from __future__ import annotations

import argparse
import time

from emmy.frontend import tiny_models
from emmy.frontend.coverage import Coverage, model_coverage


def refused_text(coverage: Coverage) -> list[str]:
    """One line per refused op: how many nodes, the op and why (unless that just says the
    op is unsupported)."""
    lines = []
    for (op, reason), count in coverage.refused.most_common():
        why = "" if reason == f"unsupported op {op}" else f": {reason.removeprefix(f'{op}: ')}"
        lines.append(f"    {count} x {op}{why}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models",
        default=",".join(tiny_models.MODELS),
        help=f"comma-separated, of {', '.join(tiny_models.MODELS)} (default: all)",
    )
    parser.add_argument("--seq", type=int, default=8, help="sequence length (default: 8)")
    args = parser.parse_args()
    names = [name for name in args.models.split(",") if name]
    unknown = sorted(set(names) - set(tiny_models.MODELS))
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}")
    header = (
        f"{'model':14} {'ops':>5} {'in emmy':>8} {'op share':>9} {'FLOPs':>10} {'FLOP share':>11}"
    )
    print(header)
    details = []
    total = Coverage()
    for name in names:
        start = time.perf_counter()
        model, inputs = tiny_models.build(name, args.seq)
        coverage = model_coverage(model, inputs)
        seconds = time.perf_counter() - start
        print(
            f"{name:14} {coverage.ops:5} {coverage.native_ops:8} {coverage.op_share:9.1%} "
            f"{coverage.flops:10.3g} {coverage.flop_share:11.1%}   ({seconds:.1f} s)"
        )
        details += [f"{name}: {sum(coverage.refused.values())} op(s) refused"]
        details += refused_text(coverage)
        total += coverage
    print(
        f"all {len(names)} models: {total.op_share:.1%} of {total.ops} ops and "
        f"{total.flop_share:.1%} of the FLOPs in emmy kernels"
    )
    for line in details:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
