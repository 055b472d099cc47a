"""NVRTC time per kernel, emulator (g++) compile time per kernel, and the emulator's run
time of a 4096x1024 f32 softmax (the default config, with each `algo`), measured on this
machine.

    .venv/bin/python benchmarks/kernel_compile_and_run.py [--quick]

--quick compiles three variants per family and runs a 64-row softmax once: it checks that
the script runs, its figures mean little.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few variants, a small softmax")
    args = parser.parse_args()
    variants = 3 if args.quick else None
    rows, repetitions = (64, 1) if args.quick else (4096, 5)
    os.environ["EMMY_CACHE_DIR"] = tempfile.mkdtemp(prefix="emmy-bench-")
    from emmy.backend.nvrtc import compile_cuda
    from emmy.compiler import compile_variants
    from emmy.dsl.library import declaration
    from emmy.runtime.device import BufferArg, Launch
    from emmy.runtime.emu import EmuDevice, compile_emu
    from emmy.sites.fork_space import ForkSpace

    def default_config(family_name: str, key: dict) -> dict:
        """What a compile with no stores picks: the declared default, or the valid config
        nearest to it (a declared 16-byte vector of 8 f32 moves to 4)."""
        return ForkSpace.of(declaration(family_name)).default_config(key)

    for family_name, key in (
        ("softmax", {"rows": 4096, "cols": 1024, "T": "f32"}),
        (
            "elementwise",
            {
                "n": 1 << 20,
                "cols": 1024,
                "T": "f32",
                "inputs": "full/row",
                "fn": "gelu((in0 * in1))",
            },
        ),
    ):
        covering = ForkSpace.of(declaration(family_name)).pairwise([key])
        options = [config for _, config in covering][:variants]
        program = compile_variants(family_name, key, options)
        start = time.perf_counter()
        compile_cuda(program.source, "sm_90")
        nvrtc = (time.perf_counter() - start) / len(options)
        start = time.perf_counter()
        compile_emu(program.source)
        gxx = (time.perf_counter() - start) / len(options)
        single = compile_variants(
            family_name, key, [default_config(family_name, key)], prefix="one_"
        )
        start = time.perf_counter()
        compile_cuda(single.source, "sm_90")
        nvrtc_one = time.perf_counter() - start
        start = time.perf_counter()
        compile_emu(single.source)
        gxx_one = time.perf_counter() - start
        print(
            f"{family_name}: {len(options)} variants in one source: NVRTC {nvrtc * 1000:.0f} ms/kernel, "
            f"g++ {gxx * 1000:.0f} ms/kernel; one kernel alone: NVRTC {nvrtc_one * 1000:.0f} ms, "
            f"g++ {gxx_one * 1000:.0f} ms"
        )

    key = {"rows": rows, "cols": 1024, "T": "f32"}
    device = EmuDevice()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, 1024), dtype=np.float32)
    for algo in ("registers", "two_pass", "online"):
        config = {**default_config("softmax", key), "algo": algo}
        program = compile_variants("softmax", key, [config], prefix=f"{algo}_")
        ((name, info),) = program.kernels.items()
        launch = Launch(
            name, (info.grid, 1, 1), (info.block, 1, 1), info.smem, (BufferArg("x"), BufferArg("y"))
        )
        buffers = {"x": x, "y": np.empty_like(x)}
        timing = device.time(program.source, [launch], buffers, warmup=1, repetitions=repetitions)
        times = timing.seconds
        print(
            f"emu softmax {rows}x1024 f32 {config}: median {statistics.median(times):.3f} s "
            f"over {len(times)} runs ({os.cpu_count()} cores)"
        )


if __name__ == "__main__":
    main()
