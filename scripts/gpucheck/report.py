"""The report: the issue's targets as ratios, and the table printed at the end."""

from __future__ import annotations

from collections.abc import Iterator

from gpucheck.memory_parts import memory_bound
from gpucheck.settings import GOALS

# --- targets -----------------------------------------------------------------------------


def targets(speed: dict) -> list[dict]:
    """The issue's targets from what was measured, with torch's own figures beside them:
    each row emmy's (or torch's) figure, the reference's, their ratio and the goal (None:
    shown for comparison); a side not measured leaves the ratio None."""
    rows = []

    def row(what, figure, reference, reference_name, unit, goal=None):
        ratio = figure / reference if figure and reference else None
        met = None if ratio is None or goal is None else ratio >= goal
        rows.append({"target": what, "emmy": figure, "reference": reference,
                     "reference_name": reference_name, "unit": unit, "ratio": ratio,
                     "goal": goal, "met": met})  # fmt: skip

    copy = speed.get("copy", {})
    bandwidth = copy.get("torch_gb_s") or copy.get("best_gb_s")
    copy_name = "copy_" if copy.get("torch_gb_s") else "emmy copy"
    for name in memory_bound(1):
        entry = speed.get(name, {})
        for what, key, goal in (("pick", "kernel_pick_gb_s", GOALS["copy"]),
                                ("best", "best_gb_s", GOALS["copy"]),
                                ("torch eager", "torch_gb_s", None)):  # fmt: skip
            row(f"{name} {what}", entry.get(key), bandwidth, copy_name, "GB/s", goal)
    for label, entry in speed.get("matmul_tc", {}).items():
        torch_tflops = entry.get("torch_tflops")
        for what, key, goal in (("kernel", "best_tflops", GOALS["kernel vs torch.matmul"]),
                                ("pick", "pick_tflops", GOALS["pick vs torch.matmul"]),
                                ("vendor option", "vendor_tflops", None)):  # fmt: skip
            row(f"matmul {label} {what}", entry.get(key), torch_tflops, "torch.matmul",
                "TFLOP/s", goal)  # fmt: skip
    for length, entry in speed.get("attention", {}).items():
        flash = entry.get("sdpa_backends", {}).get("flash")
        picked = f"SDPA's pick ({entry.get('sdpa_backend', '?')})"
        for what, key, goal in (("kernel", "best_tflops", GOALS["kernel vs SDPA flash"]),
                                ("pick", "pick_tflops", GOALS["pick vs SDPA flash"]),
                                (picked, "sdpa_tflops", None)):  # fmt: skip
            row(f"attention {length} {what}", entry.get(key), flash, "SDPA flash", "TFLOP/s",
                goal)  # fmt: skip
    for label, entry in speed.get("conv", {}).items():
        # no goal yet: the first GPU run measures where the implicit GEMM stands
        for what, key in (("kernel", "best_tflops"), ("pick", "pick_tflops")):
            row(f"conv {label} {what}", entry.get(key), entry.get("torch_tflops"),
                "torch conv2d (cuDNN)", "TFLOP/s")  # fmt: skip
    forward = speed.get("forward", {})
    compiled = forward.get("torch.compile", {}).get("tokens_s")
    for what in FORWARD_ROWS:
        figure = forward.get(what, {}).get("tokens_s")
        row(f"gpt2 forward {what}", figure, compiled, "torch.compile", "tokens/s")
    return rows


#: the forward part's figures set against torch.compile's: emmy through each API, eager
FORWARD_ROWS = ("emmy kernels", "emmy default", "torch.compile emmy kernels",
                "torch.compile emmy default", "torch eager")  # fmt: skip


def table(report: dict, title: str = "gpu-check") -> Iterator[str]:
    """The report as text: the parts, the problems (one line each), the targets."""
    yield f"{title} on {report.get('card') or report.get('device', '?')}: {report['seconds']:.0f} s"
    yield f"  {'part':12} {'status':13} {'seconds':>7}  limit"
    for name, part in report["parts"].items():
        yield f"  {name:12} {part['status']:13} {part['seconds']:7.1f}  {part['limit']:.0f}"
    if report["problems"]:
        yield "problems, one line each:"
        yield from (f"  {line}" for line in report["problems"])
    if not report.get("targets"):
        return
    yield f"targets (same device, same run: {report.get('card') or report.get('device', '?')}):"
    yield f"  {'target':36} {'figure':>9} {'reference':>22} {'ratio':>6}  goal"
    for r in report["targets"]:
        figure = f"{r['emmy']:.4g}" if r["emmy"] else "-"
        reference = f"{r['reference_name']} {r['reference']:.4g}" if r["reference"] else "-"
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        verdict = {True: "met", False: "BELOW", None: "unmeasured"}[r["met"]]
        goal = f"≥ {r['goal']:.2f} {verdict}" if r["goal"] is not None else "(for comparison)"
        yield f"  {r['target']:36} {figure:>9} {reference:>22} {ratio:>6}  {goal} {r['unit']}"
