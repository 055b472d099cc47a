"""`emmy compile`: a model or an expression to CUDA, its launch plan and its report
(`--explain`: every site's decision and evidence, every kernel's resources)."""

from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path

from emmy.backend.occupancy import devices_of, occupancy
from emmy.base.identity import EMU, arch_of
from emmy.build import CACHE_HIT
from emmy.cli.sources import add_source, compile_program, default_target, options_of, source_text
from emmy.program import SiteProvenance, coverage_line, per_element_line


def add_compile_command(commands: argparse._SubParsersAction) -> None:
    compile_cmd = commands.add_parser(
        "compile",
        help="compile a model or an expression to CUDA (needs no GPU)",
        description="Compile a recipe's model, a local Hugging Face model directory "
        "(config.json, and safetensors weights if any) or a PyTorch expression: CUDA source, "
        "cubin for --target, the launch plan and a report. Each fork is decided by the oracle stack: pins, golden files, the tuning "
        "database, the prior, the target default (on a GPU: the vendor library for matmuls and "
        "attentions), the declared default.",
    )
    add_source(compile_cmd)
    compile_cmd.add_argument(
        "--target",
        metavar="DEVICE",
        help="device identity to compile for, e.g. nvidia-h200-sm90, or emu "
        "(default: this machine's GPU, else emu)",
    )
    compile_cmd.add_argument(
        "--explain",
        action="store_true",
        help="print every site's config, its source and evidence, and (for a GPU target) each"
        " kernel's registers, spills, shared memory and occupancy",
    )
    compile_cmd.add_argument(
        "-o", "--output", metavar="DIR", type=Path, help="write source, cubin and report here"
    )
    compile_cmd.add_argument(
        "--verify-each",
        action="store_true",
        help="verify the IR in full after every pass, its ops' verifiers too (dominance is"
        " checked after each anyway; compiles afresh: a cached program is not read)",
    )
    compile_cmd.set_defaults(handler=cmd_compile)


def cmd_compile(args: argparse.Namespace) -> int:
    # a compile is short and leaves few reference cycles, while each full pass of the
    # collector walks every object torch, torch.export and xDSL made: ~0.5 s of a cold
    # GPT-2 compile
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _compile(args)
    finally:
        if enabled:
            gc.enable()


def _compile(args: argparse.Namespace) -> int:
    total = time.perf_counter()
    target = args.target or default_target()
    start = time.perf_counter()
    frontend_stages: dict[str, float] = {}
    text, constants, where = source_text(args, timings=frontend_stages)
    frontend = time.perf_counter() - start
    program = compile_program(
        text, options_of(args, target), args, constants=constants, where=where
    )
    if CACHE_HIT in program.timings:
        program.timings = {"frontend": frontend, **program.timings}
    else:
        program.timings["frontend"] = frontend
        program.timings.update(frontend_stages)
    program.timings["total"] = time.perf_counter() - total
    if args.explain:
        for line in explain_lines(program):
            print(line)
    for name, info in program.kernels.items():
        resources = program.resources.get(name)
        usage = ""
        if resources:
            usage = f", {resources['registers']} registers, {resources['spill_stores']} B spilled"
        print(
            f"{name}: {info.site.family} [{info.site.key}] grid {info.grid} block {info.block}{usage}"
        )
    if args.output:
        for path in program.write(args.output):
            print(f"wrote {path}")
    memory = program.memory()
    if program.constants:
        print(
            f"launch plan: {len(program.calls)} launches of {len(program.kernels)} kernels; "
            f"weights {memory['constants'] / 2**20:.1f} MiB, temporaries in a "
            f"{memory['arena'] / 2**20:.1f} MiB arena (unshared: "
            f"{memory['temporaries_unshared'] / 2**20:.1f} MiB)"
        )
    timings = ", ".join(
        f"{k} {v * 1000:.0f} ms" for k, v in program.timings.items() if k != "nvrtc_cache_hit"
    )
    print(f"ops: {coverage_line(program)}")
    print(f"compiled for {target}: {timings}")
    return 0


def explain_lines(program) -> list[str]:
    """What the compile's golden step did, where the graph's ops run, then one row per
    site: family, key, config (pinned forks marked), source, evidence; one per host call
    the device runs (the vendor library's matmul or attention); one per op torch runs (a fallback), with
    why and where the model calls it; the ops whose FLOPs were counted one per element;
    then each kernel's resources (resource_lines)."""
    # the registry loads the kernel library (xDSL), which a program-cache hit does not need
    from emmy.families.family import HostCallFamily
    from emmy.families.registry import registered_as

    rows = [("site", "family", "key", "config", "source", "evidence")]
    sites = [(name, c.site, c.config) for name, c in program.choices.items()]
    sites += [(name, i.site, i.config) for name, i in program.kernels.items()]
    for name, site, site_config in sites:
        provenance = program.provenance.get(name, SiteProvenance({}))
        forks = provenance.forks
        config = " ".join(
            f"{k}={v}{'(pin)' if forks.get(k) == 'pin' else ''}" for k, v in site_config.items()
        )
        rows.append(
            (
                name,
                site.family,
                str(site.key),
                config,
                provenance.oracle or "?",
                _evidence(provenance),
            )
        )
    for name, site in program.host_calls.items():
        runs_by = registered_as(site.family, HostCallFamily).runs_by
        rows.append((name, site.family, str(site.key), "-", "host call", runs_by))
    for name, call in program.fallbacks.items():
        where = f" at {call['source']}" if call["source"] else ""
        rows.append((name, "torch", call["target"], "-", "fallback", f"{call['reason']}{where}"))
    return [
        *program.golden_imports,
        f"ops: {coverage_line(program)}",
        *_aligned(rows),
        per_element_line(program),
        *resource_lines(program),
    ]


def _aligned(rows: list[tuple[str, ...]], indent: str = "") -> list[str]:
    """The rows as columns two spaces apart, each as its widest cell (the last one
    left as it is)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return [
        indent + "  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[-1]])
        for row in rows
    ]


def resource_lines(program) -> list[str]:
    """One row per kernel: what ptxas reports (registers, spill stores/loads, shared memory
    static + the launch's dynamic) and the occupancy it reaches on each device of the
    target's arch (emmy.backend.occupancy); on the emulator, one line saying why none."""
    if program.target == EMU:
        return [
            "resources: none on emu: g++ compiles its kernels, while registers, spills, shared"
            " memory and occupancy are what ptxas reports for a GPU target"
            " (e.g. --target nvidia-h200-sm90)"
        ]
    arch = arch_of(program.target)
    if not program.resources:
        return [f"resources: none: the kernels were not compiled for {arch}"]
    devices = devices_of(arch)
    title = f"resources (ptxas, {arch}); occupancy per SM on each {arch} device of the table"
    if not devices:
        title = f"resources (ptxas, {arch}); no {arch} device in emmy/backend/occupancy.py"
    rows: list[tuple[str, ...]] = [("kernel", "registers", "spills st/ld", "smem static+dynamic")]
    rows[0] += tuple(d.identity for d in devices)
    for name, info in program.kernels.items():
        used = program.resources.get(name)
        if used is None:
            rows.append((name, "?", "?", "?", *("?" for _ in devices)))
            continue
        shared = used["shared_static"] + info.smem
        rows.append(
            (
                name,
                str(used["registers"]),
                f"{used['spill_stores']}/{used['spill_loads']} B",
                f"{used['shared_static']}+{info.smem} B",
                *(occupancy(d, info.block, used["registers"], shared).describe() for d in devices),
            )
        )
    # indented under the title: lines that start with a site's name are its decision rows
    return [title, *_aligned(rows, indent="  ")]


def _evidence(provenance: SiteProvenance) -> str:
    evidence = provenance.evidence or {}
    oracle = provenance.oracle
    if oracle == "db":
        text = f"rows {','.join(map(str, evidence.get('rows', [])))} ({evidence.get('median_s', 0) * 1e3:.3f} ms"
        text += f", best of {evidence.get('measured')} measured)"
        runner_up = provenance.runner_up
        if runner_up:
            text += f"; runner-up row {runner_up['row']} {runner_up['median_s'] * 1e3:.3f} ms"
        return text
    if oracle == "golden":
        median = evidence.get("median_s")
        return f"{evidence.get('file')}" + (f" ({median * 1e3:.3f} ms)" if median else "")
    if oracle == "default":
        moved = evidence.get("moved_by_constraints")
        return (
            f"declared default; constraints moved {', '.join(moved)}"
            if moved
            else "declared default"
        )
    if oracle == "target":
        chosen = ", ".join(f"{n}={v}" for n, v in evidence.get("options", {}).items())
        return f"target default on a {evidence.get('device_class')} ({chosen}): no evidence at this key"
    if oracle == "pins":
        return "every fork pinned"
    if oracle == "prior":
        text = (
            f"predicted {evidence.get('predicted_s', 0) * 1e3:.3f} ms, best of "
            f"{evidence.get('configs_scored')} scored (dataset {str(evidence.get('dataset'))[:12]})"
        )
        runner_up = provenance.runner_up
        if runner_up:
            text += f"; runner-up predicted {runner_up['predicted_s'] * 1e3:.3f} ms"
        return text
    return " ".join(f"{k}={v}" for k, v in evidence.items())
