"""`emmy golden promote`: a device's measured winners written into a golden file."""

from __future__ import annotations

import argparse
from pathlib import Path

from emmy.base.regime import regime_for
from emmy.recall.golden import MODEL_AGNOSTIC_DIR, promote
from emmy.recall.tuning_db import TuningDB, default_db_path


def add_golden_command(commands: argparse._SubParsersAction) -> None:
    golden_cmd = commands.add_parser(
        "golden", help="golden configuration files", description="Golden configuration files."
    )
    golden_sub = golden_cmd.add_subparsers(dest="golden_command", required=True, metavar="ACTION")
    promote_cmd = golden_sub.add_parser(
        "promote",
        help="write the measured winners of a device into a golden file",
        description="For every site measured on DEVICE under its deployable regime, write the "
        "fastest clean config into a golden file, with its margin over the runner-up and over "
        "the compiler's old pick.",
    )
    promote_cmd.add_argument("--device", required=True, metavar="DEVICE", help="e.g. emu")
    promote_cmd.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE",
        help="golden file to write or update (default: the model-agnostic one of DEVICE)",
    )
    promote_cmd.add_argument("--family", help="only this family")
    promote_cmd.add_argument("--key", help="only this problem key")
    promote_cmd.add_argument("--db", metavar="PATH", default="", help="tuning database to read")
    promote_cmd.set_defaults(handler=cmd_golden_promote)


def cmd_golden_promote(args: argparse.Namespace) -> int:
    regime = regime_for(args.device)
    output = args.output or MODEL_AGNOSTIC_DIR / f"{args.device}.json"
    db_path = Path(args.db) if args.db else default_db_path()
    with TuningDB(db_path) as db:
        entries = promote(
            db, args.device, regime.id, regime.words, output, family=args.family, key=args.key
        )
    for entry in entries:
        margin = entry.promoted_from.get("margin_over_old_pick")
        margin_text = f", {margin:.2f}x over the old pick" if margin else ""
        print(f"{entry.family} [{entry.key}]: {entry.config}{margin_text}")
    print(f"wrote {len(entries)} entr{'y' if len(entries) == 1 else 'ies'} to {output}")
    return 0
