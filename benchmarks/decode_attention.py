"""Decode attention over a static KV cache (one query per head, the cache full): the time of
each path of an attention_decode_path, the one pass and every split-KV option offered, each
at its kernels' declared defaults, and the path the declared default rule picks.

    .venv/bin/python benchmarks/decode_attention.py [--device emu|cuda] [--max-len 1024,4096]
        [--batch 1] [--heads 32] [--kv-heads 8] [--dim 128] [--dtype f32] [--quick]

--quick times a 4-head cache of 256 once: it checks that the script runs, its figures mean
little. On the emulator the blocks run on the CPU's cores: split-KV's gain is a GPU's (its
idle multiprocessors), so the emulator's figures say what it costs, not what it gains.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile

import torch
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp


def path_program(key: dict, path: str):
    """The CUDA program of one path: its kernels at their declared defaults, and each
    launch's (kernel, its buffers' names)."""
    from emmy.backend.emit_cuda import emit_module
    from emmy.dsl.library import declaration
    from emmy.families.attention_decode_path import (
        COMBINE_FAMILY,
        DECODE_FAMILY,
        ONE_PASS,
        queries_of,
    )
    from emmy.passes.specialize_forks import SpecializeForks
    from emmy.sites.fork_space import ForkSpace
    from emmy.sites.lower import instantiate

    if path == ONE_PASS:
        steps = [(DECODE_FAMILY, key, ("q", "k", "v", "length", "o"))]
    else:
        splits = int(path.removeprefix("split"))
        combine = {"splits": splits, "rows": queries_of(key), "dim": key["dim"], "T": key["T"]}
        steps = [
            (DECODE_FAMILY, {**key, "splits": splits}, ("q", "k", "v", "length", "part", "lse")),
            (COMBINE_FAMILY, combine, ("part", "lse", "o")),
        ]
    sites = []
    for i, (family_name, site_key, _) in enumerate(steps):
        decl = declaration(family_name)
        site = instantiate(decl, site_key, f"step_{i}")
        space = ForkSpace.of(decl)
        config = space.declared
        if not space.is_valid(site_key, config):
            raise SystemExit(f"{family_name}'s declared default does not hold at {site_key}")
        for knob in site.knobs():
            knob.resolve(config[knob.knob_name.data], {})
        sites.append(site)
    module = ModuleOp(sites)
    SpecializeForks().apply(Context(), module)
    return emit_module(module), [(f"step_{i}", step[2]) for i, step in enumerate(steps)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("emu", "cuda"), default="emu")
    parser.add_argument("--max-len", default="1024,4096", help="cache sizes, comma-separated")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--dtype", choices=("f32", "f16", "bf16"), default="f32")
    parser.add_argument("--quick", action="store_true", help="a 4-head cache of 256, once")
    args = parser.parse_args()
    os.environ.setdefault("EMMY_CACHE_DIR", tempfile.mkdtemp(prefix="emmy-bench-"))
    from emmy.base import dtypes
    from emmy.cli import make_device
    from emmy.families.attention_decode_path import default_for, options_for
    from emmy.runtime.convert import to_storage
    from emmy.runtime.device import BufferArg, Launch

    if args.quick:
        args.max_len, args.heads, args.kv_heads, args.dim = "256", 4, 2, 16
    repetitions = 1 if args.quick else 5
    device = make_device(args.device)
    torch_dtype = dtypes.torch_dtype(args.dtype)
    for max_len in (int(n) for n in args.max_len.split(",")):
        key = {
            "batch": args.batch,
            "heads": args.heads,
            "kv_heads": args.kv_heads,
            "new": 1,
            "max_len": max_len,
            "dim": args.dim,
            "T": args.dtype,
        }
        cache = (args.batch, args.kv_heads, max_len, args.dim)
        queries = args.batch * args.heads
        splits = max((int(p.removeprefix("split")) for p in options_for(key)[1:]), default=1)
        buffers = {
            "q": to_storage(torch.randn(args.batch, args.heads, 1, args.dim).to(torch_dtype)),
            "k": to_storage(torch.randn(cache).to(torch_dtype)),
            "v": to_storage(torch.randn(cache).to(torch_dtype)),
            "length": to_storage(torch.tensor([max_len])),
            "o": to_storage(torch.empty(args.batch, args.heads, 1, args.dim, dtype=torch_dtype)),
            # sized for the most splits offered: fewer use its start
            "part": to_storage(torch.empty(splits * queries * args.dim)),
            "lse": to_storage(torch.empty(splits * queries)),
        }
        figures = []
        for path in options_for(key):
            source, steps = path_program(key, path)
            launches = [
                Launch(
                    name,
                    (source.kernels[name].grid, 1, 1),
                    (source.kernels[name].block, 1, 1),
                    source.kernels[name].smem,
                    tuple(BufferArg(b) for b in names),
                )
                for name, names in steps
            ]
            timing = device.time(
                source.source, launches, buffers, warmup=1, repetitions=repetitions
            )
            figures.append(f"{path} {statistics.median(timing.seconds) * 1e3:.3f} ms")
        print(
            f"{args.device} decode attention batch={args.batch} heads={args.heads} "
            f"kv_heads={args.kv_heads} dim={args.dim} {args.dtype} max_len={max_len}: "
            f"{', '.join(figures)}; declared default {default_for(key)}"
        )


if __name__ == "__main__":
    main()
