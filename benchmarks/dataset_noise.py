"""How repeatable the dataset's timings are: the ceiling of any picker's top-1 score.

Benches a subset of the dataset's keys twice (every Nth key of each family, the same
configs each time: the pick and `--sample` configs drawn with a seed of the site) into two
fresh tuning databases, then scores "the best config of the first run" on the second run,
per family: best time / time of that config, as `emmy eval` scores a picker. A perfect
model of the first run's timings scores this, not 1.0; the prior is judged against
timings just as noisy.

    .venv/bin/python benchmarks/dataset_noise.py [--every 4] [--sample 12] [--device emu]
        [--family softmax ...]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from emmy.recall.tuning_db import ReadOnlyDB, canonical_config

ROOT = Path(__file__).resolve().parent.parent


def bench(db: Path, args: argparse.Namespace) -> None:
    # one worker: two timing at once on a small host would add their contention to the noise
    command = [sys.executable, str(ROOT / "scripts" / "make-dataset"), "--db", str(db)]
    command += ["--workers", "1", "--campaign", str(db.with_suffix(".campaign.json"))]
    command += ["--every", str(args.every), "--sample", str(args.sample), "--device", args.device]
    command += [flag for family in args.family for flag in ("--family", family)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def clean_times(db: Path) -> dict[tuple[str, str], dict[str, float]]:
    times: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    with ReadOnlyDB(db) as database:
        for row in database.rows():
            if row.status == "ok" and row.median_s is not None:
                times[(row.family, row.key)][canonical_config(row.config)] = row.median_s
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=4, help="every Nth key of each family (4)")
    parser.add_argument("--sample", type=int, default=12, help="configs per key besides the pick")
    parser.add_argument("--device", default="emu")
    parser.add_argument(
        "--family", action="append", default=[], help="only these families (default: all)"
    )
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="emmy-noise-"))
    start = time.perf_counter()
    runs = []
    for name in ("first", "second"):
        bench(folder / f"{name}.db", args)
        runs.append(clean_times(folder / f"{name}.db"))
    scores: dict[str, list[float]] = defaultdict(list)
    spreads: dict[str, list[float]] = defaultdict(list)
    for site, first in runs[0].items():
        second = runs[1].get(site, {})
        common = [c for c in first if c in second]
        if len(common) < 2:
            continue
        picked = min(common, key=first.__getitem__)
        scores[site[0]].append(min(second[c] for c in common) / second[picked])
        spreads[site[0]] += [abs(second[c] / first[c] - 1) for c in common]
    print(f"{'family':<14}{'keys':>6}{'repeat top-1':>14}{'worst':>8}{'median |t2/t1 - 1|':>20}")
    for family in sorted(scores):
        values = scores[family]
        print(
            f"{family:<14}{len(values):>6}{statistics.mean(values):>14.3f}{min(values):>8.3f}"
            f"{statistics.median(spreads[family]):>20.1%}"
        )
    means = [statistics.mean(v) for v in scores.values()]
    if means:
        print(f"mean over families: {statistics.mean(means):.3f}")
    else:
        # every timing was unstable (a busy machine) or a key kept fewer than two configs
        print("mean over families: none (no key has two clean timings in both runs)")
    print(f"({time.perf_counter() - start:.0f} s; databases in {folder})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
