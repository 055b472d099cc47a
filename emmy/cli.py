"""The `emmy` command: compile and run PyTorch expressions as emmy kernels.

A user mistake (a bad expression, an unknown op, a bad pin, a missing device) is printed
as one line `emmy: error: ...` with exit status 2, never as a traceback.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from emmy.errors import EmmyError

EXAMPLE = "torch.nn.Softmax(dim=-1)(torch.randn(4, 1000))"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except EmmyError as error:
        print(f"emmy: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("emmy: interrupted", file=sys.stderr)
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="emmy",
        description="Compile PyTorch expressions to CUDA kernels whose choices are recalled, "
        "not autotuned.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    compile_cmd = commands.add_parser(
        "compile",
        help="compile an expression to CUDA (needs no GPU)",
        description="Compile a PyTorch expression: CUDA source, cubin for --target and a report.",
    )
    _add_source(compile_cmd)
    compile_cmd.add_argument(
        "--target",
        metavar="DEVICE",
        help="device identity to compile for, e.g. nvidia-h200-sm90, or emu "
        "(default: this machine's GPU, else emu)",
    )
    compile_cmd.add_argument(
        "--explain", action="store_true", help="print every fork's value and its source"
    )
    compile_cmd.add_argument(
        "-o", "--output", metavar="DIR", type=Path, help="write source, cubin and report here"
    )
    compile_cmd.set_defaults(handler=cmd_compile)

    run_cmd = commands.add_parser(
        "run",
        help="compile and run an expression on a device",
        description="Compile a PyTorch expression and run its kernels on random inputs.",
    )
    _add_source(run_cmd)
    run_cmd.add_argument(
        "--device", choices=["cuda", "emu"], default="emu", help="where to run (default: emu)"
    )
    run_cmd.add_argument("--check", action="store_true", help="compare the result with torch eager")
    run_cmd.add_argument(
        "--schedule",
        default="forward",
        help="emulator thread order: forward, reverse or shuffle[:SEED] (default: forward)",
    )
    run_cmd.set_defaults(handler=cmd_run)
    return parser


def _add_source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-c",
        dest="expression",
        metavar="EXPR",
        required=True,
        help=f'a PyTorch expression, e.g. "{EXAMPLE}"',
    )
    parser.add_argument(
        "--pin",
        action="append",
        default=[],
        metavar="FORK=VALUE",
        help="force a fork's value (repeatable, or comma-separated)",
    )


def _pins(args: argparse.Namespace) -> str:
    return ",".join(args.pin)


def default_target() -> str:
    from emmy.runtime.cuda import CudaDevice, cuda_available

    if cuda_available():
        with CudaDevice() as device:
            return device.identity
    return "emu"


def cmd_compile(args: argparse.Namespace) -> int:
    from emmy.frontend.cache import traced_graph

    total = time.perf_counter()
    target = args.target or default_target()
    start = time.perf_counter()
    module = traced_graph(args.expression)
    frontend = time.perf_counter() - start
    program = compile_program(module, target, _pins(args))
    program.timings["frontend"] = frontend
    program.timings["total"] = time.perf_counter() - total
    if args.explain:
        print_explain(program)
    for name, info in program.kernels.items():
        resources = program.resources.get(name)
        usage = (
            f", {resources['registers']} registers, {resources['spill_stores']} B spilled"
            if resources
            else ""
        )
        print(f"{name}: {info.family} [{info.key}] grid {info.grid} block {info.block}{usage}")
    if args.output:
        for path in program.write(args.output):
            print(f"wrote {path}")
    timings = ", ".join(
        f"{k} {v * 1000:.0f} ms" for k, v in program.timings.items() if k != "nvrtc_cache_hit"
    )
    print(f"compiled for {target}: {timings}")
    return 0


def compile_program(module, target: str, pins: str):
    from emmy.compiler import compile_graph
    from emmy.runtime.identity import EMU, arch_of

    if target != EMU:
        arch_of(target)  # a malformed identity is one clear line, before any work
    return compile_graph(module, target=target, pins=pins)


def print_explain(program) -> None:
    rows = [("site", "family", "key", "fork", "value", "source")]
    for name, info in program.kernels.items():
        for fork_name, value in info.config.items():
            rows.append(
                (
                    name,
                    info.family,
                    info.key,
                    fork_name,
                    str(value),
                    program.provenance[name][fork_name],
                )
            )
    widths = [min(60, max(len(r[i]) for r in rows)) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell[:60].ljust(width) for cell, width in zip(row, widths, strict=True)))


def cmd_run(args: argparse.Namespace) -> int:

    from emmy.frontend.expression import trace
    from emmy.runtime.convert import from_storage, to_storage

    traced = trace(args.expression, meta=False)
    device = make_device(args.device)
    program = compile_program(traced.module, device.identity, _pins(args))
    options = {"schedule": args.schedule} if args.device == "emu" else {}
    start = time.perf_counter()
    (result,) = program.run(device, [to_storage(t) for t in traced.inputs], **options)
    elapsed = time.perf_counter() - start
    output = from_storage(result, traced.output.dtype)
    print(
        f"ran {len(program.calls)} kernel(s) on {device.identity} in {elapsed * 1000:.1f} ms: "
        f"{traced.output.dtype} {list(output.shape)}"
    )
    if not args.check:
        return 0
    from emmy.runtime.convert import compare

    report = compare(output, traced.output)
    print(report.summary)
    return 0 if report.ok else 1


def make_device(name: str):
    if name == "cuda":
        from emmy.runtime.cuda import CudaDevice

        return CudaDevice()
    from emmy.runtime.emu import EmuDevice

    return EmuDevice()


if __name__ == "__main__":
    sys.exit(main())
