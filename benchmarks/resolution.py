"""Resolution cost: deciding one site's forks through the oracle stack, with a tuning
database of 100,000 rows (median per site, in-process; target: at most 1 ms).

    .venv/bin/python benchmarks/resolution.py [--rows 100000] [--sites 200]
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import tempfile
import time
from pathlib import Path

from emmy.base.compile_options import CompileOptions
from emmy.base.regime import regime_for
from emmy.dsl.library import canonical_key, declaration
from emmy.passes.resolve_forks import record, site_query
from emmy.recall.oracles import oracle_stack
from emmy.recall.tuning_db import Row, TuningDB
from emmy.sites.fork_space import ForkSpace
from emmy.sites.lower import instantiate


def populate(db: TuningDB, rows: int) -> list[dict]:
    decl = declaration("softmax")
    regime = regime_for("emu")
    keys = []
    for rows_dim, cols in itertools.product(
        [1, 4, 16, 64, 256, 1024, 4096, 16384], range(64, 8192, 16)
    ):
        keys.append({"rows": rows_dim, "cols": cols, "T": "f32"})
    random.seed(0)
    random.shuffle(keys)
    per_key = 50
    keys = keys[: rows // per_key]
    batch = []
    for key in keys:
        valid = list(ForkSpace.of(decl).configs(key))
        key_text = canonical_key(decl, key)
        for config in random.sample(valid, min(per_key, len(valid))):
            batch.append(
                Row(
                    device="emu",
                    regime=regime.id,
                    regime_words=regime.words,
                    compiler="g++ bench",
                    family="softmax",
                    key=key_text,
                    config=config,
                    origin="forced",
                    status="ok",
                    median_s=random.uniform(1e-4, 1e-2),
                    repetitions=5,
                )
            )
    start = time.perf_counter()
    for i in range(0, len(batch), 10000):
        db.add(batch[i : i + 10000])
    print(f"wrote {len(batch)} rows over {len(keys)} keys in {time.perf_counter() - start:.1f} s")
    return keys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--sites", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "autotune.db"
        with TuningDB(path) as db:
            keys = populate(db, args.rows)
            print(f"database: {db.count()} rows, {path.stat().st_size / 1e6:.1f} MB")
        stack = oracle_stack(CompileOptions(db=path))
        stack.import_golden_rows()
        decl = declaration("softmax")
        sites = [instantiate(decl, key, f"softmax_{i}") for i, key in enumerate(keys[: args.sites])]
        misses = [
            instantiate(decl, {"rows": 3, "cols": 100 + i, "T": "f32"}, f"miss_{i}")
            for i in range(args.sites)
        ]
        for label, group in (
            ("sites with rows (db decides)", sites),
            ("sites without rows (default decides)", misses),
        ):
            times, oracles = [], set()
            for site in group:
                start = time.perf_counter()
                decision = stack.decide(site_query(site, {}))
                record(site, decision, set())
                times.append(time.perf_counter() - start)
                oracles.add(decision.oracle)
            times.sort()
            print(
                f"{label}: median {statistics.median(times) * 1e3:.3f} ms per site, "
                f"p90 {times[int(len(times) * 0.9)] * 1e3:.3f} ms, oracle {sorted(oracles)}"
            )


if __name__ == "__main__":
    main()
