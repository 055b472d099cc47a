"""torchvision's classifiers that build at a small size, random weights (none all zeros:
tiny_models.without_zero_parameters), through both APIs on the emulator, each compiled
program called as a user calls it: three times, the example images and then other values
(emmy.runtime.convert.other_values; the second call captures a graph of the launches, the
third replays it), each call against eager.

    .venv/bin/python benchmarks/vision_zoo.py [--models resnet18,swin_t] [--sizes 32,64]
        [--batch 2] [--timeout 300]

Per model, in a process of its own (a crash or a hang costs its line): the first of
--sizes at which eager runs it, then emmy.compile and torch.compile(backend=emmy), the
largest relative error over the calls (max|actual - expected| / max|expected|; f32 passes
at 1e-4) and where the ops ran. Then the counts: built, matching through each API, both.
With no --models, every classifier torchvision lists.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

#: a model's output may differ from eager's by this much of its largest magnitude (f32)
TOLERANCE = 1e-4
#: the calls of each compiled program: the examples', then other values' (capture, replay)
CALLS = 3


def one(name: str, sizes: list[int], batch: int) -> dict:
    """One classifier through both APIs (runs in its own process)."""
    import torch

    from emmy.frontend import tiny_models
    from emmy.frontend.packages import torchvision
    from emmy.runtime.convert import other_values

    models = torchvision().models
    entry: dict = {"model": name}
    model, x = None, None
    for size in sizes:
        torch.manual_seed(0)
        options = {"image_size": size} if name.startswith("vit_") else {}
        try:
            model = models.get_model(name, weights=None, **options)
            model = tiny_models.without_zero_parameters(model).eval()
            x = torch.randn(batch, 3, size, size)
            with torch.no_grad():
                model(x)
        except Exception as error:  # noqa: BLE001 - a size the architecture refuses
            entry["refused"] = f"{type(error).__name__}: {str(error).splitlines()[0][:120]}"
            model = None
            continue
        entry["size"] = size
        entry.pop("refused", None)
        break
    if model is None or x is None:
        return entry
    calls = [x, *(other_values(x, seed) for seed in range(1, CALLS))]

    def worst(run) -> float:
        errors = []
        for given in calls:
            with torch.no_grad():
                expected, actual = model(given), run(given)
            scale = float(expected.abs().max()) or 1.0
            errors.append(float((actual.float() - expected.float()).abs().max()) / scale)
        return max(errors)

    import emmy
    import emmy.api
    from emmy.program import coverage_line
    from emmy.runtime.emu import EmuDevice

    start = time.perf_counter()
    try:
        compiled = emmy.compile(model, x, device=EmuDevice(), db="none")
        entry["emmy.compile"] = worst(compiled)
        entry["coverage"] = coverage_line(compiled.program)
    except Exception as error:  # noqa: BLE001 - the model's line says why
        entry["emmy.compile"] = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
    torch._dynamo.reset()
    try:
        dynamo = torch.compile(model, backend=emmy.api.backend(device=EmuDevice(), db="none"))
        entry["torch.compile"] = worst(dynamo)
    except Exception as error:  # noqa: BLE001 - the model's line says why
        entry["torch.compile"] = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
    entry["seconds"] = round(time.perf_counter() - start, 1)
    return entry


def matches(value: object) -> bool:
    return isinstance(value, float) and value <= TOLERANCE


def shown(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.1e} {'ok' if matches(value) else 'WRONG'}"
    return f"failed: {value}" if value is not None else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated (default: every classifier)")
    parser.add_argument("--sizes", default="32,64,128", help="image sizes to try, in order")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300, help="seconds per model")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    if args.one:
        print(json.dumps(one(args.one, sizes, args.batch)), flush=True)
        return 0
    if args.models:
        names = args.models.split(",")
    else:
        from emmy.frontend.packages import torchvision

        models = torchvision().models
        names = models.list_models(module=models)
    entries = []
    for name in names:
        command = [sys.executable, str(Path(__file__).resolve()), "--one", name,
                   "--sizes", args.sizes, "--batch", str(args.batch)]  # fmt: skip
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            entry = json.loads(lines[-1]) if lines else {"model": name, "died": done.returncode}
        except subprocess.TimeoutExpired:
            entry = {"model": name, "timeout": args.timeout}
        entries.append(entry)
        outcome = (
            f"size {entry['size']}: emmy.compile {shown(entry.get('emmy.compile'))}, "
            f"torch.compile {shown(entry.get('torch.compile'))} ({entry.get('seconds')} s)"
            if "size" in entry
            else f"not run: {entry.get('refused') or entry}"
        )
        print(f"{name:22} {outcome}", flush=True)
    built = [e for e in entries if "size" in e]
    through = {
        api: [e for e in built if matches(e.get(api))] for api in ("emmy.compile", "torch.compile")
    }
    both = [e for e in through["emmy.compile"] if e in through["torch.compile"]]
    print(
        f"{len(entries)} classifiers, {len(built)} built and ran; {CALLS} calls each against eager: "
        f"emmy.compile matches {len(through['emmy.compile'])}, torch.compile matches "
        f"{len(through['torch.compile'])}, both {len(both)}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
