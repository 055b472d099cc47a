"""NVRTC time per kernel, emulator (g++) compile time per kernel, and the emulator's run
time of a 4096x1024 f32 softmax (default config), measured on this machine.

    .venv/bin/python benchmarks/kernels.py
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

import numpy as np


def main() -> None:
    os.environ["EMMY_CACHE_DIR"] = tempfile.mkdtemp(prefix="emmy-bench-")
    from emmy.backend.nvrtc import compile_cuda
    from emmy.check import pairwise
    from emmy.compiler import compile_variants
    from emmy.dsl.library import configs, default_config, family
    from emmy.runtime.device import BufferArg, Launch
    from emmy.runtime.emu import EmuDevice, compile_emu

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
        options = pairwise(list(configs(family(family_name), key)))
        program = compile_variants(family_name, key, options)
        start = time.perf_counter()
        compile_cuda(program.source, "sm_90")
        nvrtc = (time.perf_counter() - start) / len(options)
        start = time.perf_counter()
        compile_emu(program.source)
        gxx = (time.perf_counter() - start) / len(options)
        single = compile_variants(
            family_name, key, [default_config(family(family_name))], prefix="one_"
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

    key = {"rows": 4096, "cols": 1024, "T": "f32"}
    decl = family("softmax")
    device = EmuDevice()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4096, 1024), dtype=np.float32)
    for algo in ("two_pass", "online"):
        config = {**default_config(decl), "algo": algo}
        program = compile_variants("softmax", key, [config], prefix=f"{algo}_")
        ((name, info),) = program.kernels.items()
        launch = Launch(
            name, (info.grid, 1, 1), (info.block, 1, 1), info.smem, (BufferArg("x"), BufferArg("y"))
        )
        buffers = {"x": x, "y": np.empty_like(x)}
        times = device.time(program.source, [launch], buffers, warmup=1, repetitions=5)
        print(
            f"emu softmax 4096x1024 f32 {config}: median {statistics.median(times):.3f} s "
            f"over {len(times)} runs ({os.cpu_count()} cores)"
        )


if __name__ == "__main__":
    main()
