"""Compile time of tiny real models (emmy.frontend.tiny_models; resnet18 and the tiny UNet by
default) by three compilers in one run: emmy.compile (torch.export, on the emulator),
torch.compile with emmy's backend (on the emulator) and torch.compile's inductor (CPU).

    .venv/bin/python benchmarks/compile_time.py [--models resnet18,unet]
        [--compilers emmy,torch.compile-emmy,inductor] [--kernel-cache]

Each compile runs in its own process, the model built before the clock starts, with the
program cache off (`use_cache=False`) and, unless --kernel-cache, empty kernel caches (a
fresh EMMY_CACHE_DIR, a fresh TORCHINDUCTOR_CACHE_DIR): every kernel is compiled. emmy.compile
is timed alone (it runs nothing); a torch.compile is its first call less a later call (dynamo
and AOTAutograd included, running the model not).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

COMPILERS = ("emmy", "torch.compile-emmy", "inductor")

COMPILE = r"""
import json, sys, time, torch
from emmy.frontend import tiny_models
compiler, name = sys.argv[1], sys.argv[2]
model, inputs = tiny_models.build(name)
if compiler == "emmy":
    import emmy
    from emmy.runtime.emu import EmuDevice
    start = time.perf_counter()
    emmy.compile(model, *inputs, device=EmuDevice(), use_cache=False)
    print(json.dumps({"seconds": time.perf_counter() - start}))
    raise SystemExit(0)
if compiler == "torch.compile-emmy":
    import emmy.api
    from emmy.runtime.emu import EmuDevice
    backend = emmy.api.backend(device=EmuDevice(), use_cache=False)
else:
    backend = "inductor"
compiled = torch.compile(model, backend=backend)
with torch.no_grad():
    start = time.perf_counter()
    compiled(*inputs)
    first = time.perf_counter() - start
    start = time.perf_counter()
    compiled(*inputs)
    later = time.perf_counter() - start
print(json.dumps({"seconds": first - later}))
"""


def compile_seconds(compiler: str, name: str, kernel_cache: bool) -> float:
    """One compile's seconds, in a fresh process (fresh kernel caches unless kept)."""
    return fresh_process_seconds(COMPILE, compiler, name, kernel_cache)


def fresh_process_seconds(script: str, compiler: str, name: str, kernel_cache: bool) -> float:
    """The seconds `script` prints (its last line, JSON) run as `python -c script compiler
    name` in a fresh process, with empty kernel caches unless kept (benchmarks/training.py
    times its steps' compiles so too)."""
    with tempfile.TemporaryDirectory() as root:
        env = dict(os.environ)
        if not kernel_cache:
            env["EMMY_CACHE_DIR"] = f"{root}/emmy"
            env["TORCHINDUCTOR_CACHE_DIR"] = f"{root}/inductor"
        done = subprocess.run(
            [sys.executable, "-c", script, compiler, name],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        raise SystemExit(f"{compiler} failed on {name}: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["seconds"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,unet", help="comma-separated tiny models")
    parser.add_argument(
        "--compilers",
        default=",".join(COMPILERS),
        help=f"comma-separated, of {', '.join(COMPILERS)}",
    )
    parser.add_argument(
        "--kernel-cache",
        action="store_true",
        help="keep the environment's kernel caches (kernels compiled before come from them)",
    )
    args = parser.parse_args()
    # the model names are checked where they are built, in the compile's own process
    from emmy.frontend.tiny_models import MODELS

    names = [n for n in args.models.split(",") if n]
    compilers = [c for c in args.compilers.split(",") if c]
    unknown = sorted(set(names) - set(MODELS)) + sorted(set(compilers) - set(COMPILERS))
    if unknown:
        parser.error(f"unknown model(s) or compiler(s) {', '.join(unknown)}")
    caches = "kept kernel caches" if args.kernel_cache else "empty kernel caches"
    print(f"compile seconds, program cache off, {caches}")
    print(f"{'model':12}" + "".join(f"{c:>20}" for c in compilers))
    for name in names:
        cells = [compile_seconds(c, name, args.kernel_cache) for c in compilers]
        print(f"{name:12}" + "".join(f"{s:>19.1f}s" for s in cells), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
