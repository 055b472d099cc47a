"""Campaign throughput on the emulator with 1 and 2 local Ray workers, side by side in one
run, and the driver's overhead per item (a worker's return to its rows on disk).

    .venv/bin/python benchmarks/campaign.py [--items 24] [--sample 2] [--rounds 1]

Plans `--items` keys of the dataset's grid (softmax, row sums, elementwise, f32 and bf16),
runs the campaign once to warm the kernel cache, then, per round, once with one worker and
once with two, each into a fresh output and fresh worker databases, so that every cell is
measured. Cells per minute count from the first task's start to the last one's return on
the workers (Ray's start is printed apart).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

from emmy.base.identity import EMU
from emmy.campaign.grid import grid
from emmy.campaign.items import load_campaign
from emmy.campaign.planner import grid_sources, plan
from emmy.campaign.ray_driver import run_campaign

#: the grid's groups the benchmark draws keys from: fast on the emulator, each a family
GROUPS = ("softmax", "reduce_rows", "elementwise")


def planned(folder: Path, items: int, sample: int) -> Path:
    per_group = -(-items // len(GROUPS))
    keys = grid()
    sources = []
    for group in GROUPS:
        every = max(1, len(keys[group]) // per_group)
        sources += grid_sources([group], every)[:per_group]
    path = folder / "campaign.json"
    campaign = plan(
        path,
        sources[:items],
        [EMU],
        configs={"sample": sample},
        max_rows=sample,
        progress=lambda _: None,
    )
    campaign.write()
    return path


def run(path: Path, workers: int, name: str, quiet: Console) -> dict:
    """One run into a fresh output and worker database; its figures."""
    data = json.loads(path.read_text())
    data["output"] = f"{name}.out"
    copy = path.with_name(f"{name}.json")
    copy.write_text(json.dumps(data))
    start = time.perf_counter()
    summary = run_campaign(
        load_campaign(copy),
        emu_workers=workers,
        worker_db=str(path.with_name(f"{name}.db")),
        console=quiet,
    )
    total = time.perf_counter() - start
    tally = summary.tallies[EMU]
    cells = tally.measured + tally.recalled
    return {
        "workers": workers,
        "cells": cells,
        "wall": tally.wall_s,
        "total": total,
        "per_minute": cells / tally.wall_s * 60 if tally.wall_s else 0.0,
        "durable": summary.durable_s,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=24, help="items of the campaign (24)")
    parser.add_argument("--sample", type=int, default=2, help="random configs per item (2)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of 1 and 2 workers (1)")
    parser.add_argument(
        "--no-warm",
        action="store_true",
        help="skip the warm-up run (the first measured run then compiles every kernel)",
    )
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="emmy-campaign-bench-"))
    quiet = Console(file=open("/dev/null", "w"))  # noqa: SIM115 - lives as the run
    path = planned(folder, args.items, args.sample)
    cells = sum(len(c) for _, _, c in load_campaign(path).iter_cells([EMU]))
    print(f"campaign: {args.items} items, {cells} cells on emu; {folder}")
    if not args.no_warm:
        run(path, 2, "warm", quiet)  # compiles every kernel once, into the shared kernel cache
    results = []
    for round_index in range(args.rounds):
        for workers in (1, 2):
            results.append(run(path, workers, f"r{round_index}-w{workers}", quiet))
    print(
        f"{'workers':>7} {'cells':>6} {'bench wall':>11} {'with Ray start':>15} {'cells/min':>10}"
    )
    for r in results:
        print(
            f"{r['workers']:>7} {r['cells']:>6} {r['wall']:>9.1f} s {r['total']:>13.1f} s "
            f"{r['per_minute']:>10.1f}"
        )
    rate = {
        w: statistics.mean(r["per_minute"] for r in results if r["workers"] == w) for w in (1, 2)
    }
    print(f"scaling, 2 workers over 1: {rate[2] / rate[1]:.2f}x")
    durable = [d for r in results for d in r["durable"]]
    print(
        f"driver overhead per item (worker's return to rows on disk): median "
        f"{statistics.median(durable) * 1e3:.1f} ms, max {max(durable) * 1e3:.1f} ms "
        f"over {len(durable)} items"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
