"""`emmy db freeze|import|stats|export`: the command line of emmy/dataset/dataset_store.py."""

from __future__ import annotations

import argparse
from pathlib import Path

from emmy.dataset.dataset_store import export, freeze, import_sources, stats


def add_db_commands(commands: argparse._SubParsersAction) -> None:
    """Add `emmy db` and its actions to `commands`, the subparsers of `emmy`."""
    db_cmd = commands.add_parser(
        "db",
        help="measurement freezes, the dataset database and its export",
        description="Snapshot measurement rows (freeze), gather freezes, golden files and "
        "tuning databases into a dataset database (import), summarise one (stats) and write "
        "the dataset that emmy fit and emmy eval read (export). No compile reads a dataset "
        "database.",
    )
    actions = db_cmd.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    _add_freeze(actions)
    _add_import(actions)
    _add_stats(actions)
    _add_export(actions)


def _add_freeze(actions: argparse._SubParsersAction) -> None:
    freeze_cmd = actions.add_parser(
        "freeze",
        help="snapshot the rows of a database into a content-hashed file",
        description="Write the rows of a tuning (or dataset) database into "
        "DIR/freeze-<sha256[:12]>.jsonl, named by the hash of its content: the same rows "
        "make the same file.",
    )
    _add_db(freeze_cmd, "the database to snapshot, e.g. ~/.cache/emmy/autotune.db")
    freeze_cmd.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path("_data/freezes"),
        metavar="DIR",
        help="folder of the freeze (default: _data/freezes)",
    )
    for name in ("device", "family", "regime"):
        freeze_cmd.add_argument(
            f"--{name}",
            action="append",
            default=[],
            metavar=name.upper(),
            help=f"only rows of this {name} (repeatable)",
        )
    freeze_cmd.set_defaults(handler=cmd_freeze)


def _add_import(actions: argparse._SubParsersAction) -> None:
    import_cmd = actions.add_parser(
        "import",
        help="gather freezes, golden files and tuning databases into a dataset database",
        description="Import every SRC (a freeze, a golden file, a tuning database, or a folder "
        "of them) into the dataset database: a row is stored once however many sources hold "
        "it, each row remembers the sources it came from, and a source whose content was "
        "imported before is skipped. All sources are checked before anything is written: "
        "a malformed one leaves the database unchanged.",
    )
    _add_db(import_cmd, "the dataset database, e.g. _data/dataset.db (created if absent)")
    import_cmd.add_argument("sources", nargs="+", type=Path, metavar="SRC", help="what to import")
    import_cmd.set_defaults(handler=cmd_import)


def _add_stats(actions: argparse._SubParsersAction) -> None:
    stats_cmd = actions.add_parser(
        "stats",
        help="summarise a database by pool (family, device, regime)",
        description="Per pool (family, device, regime): problem keys, configs, rows, clean "
        "rows, failures by status, and the sources its rows came from.",
    )
    _add_db(stats_cmd, "the database to summarise")
    stats_cmd.set_defaults(handler=cmd_stats)


def _add_export(actions: argparse._SubParsersAction) -> None:
    export_cmd = actions.add_parser(
        "export",
        help="write the dataset (manifest.json and a matrix file per pool)",
        description="Write DIR/manifest.json and one DIR/<family>__<device>__<regime>.npz per "
        "pool: the best clean median of each problem key (rows) and config (columns), NaN "
        "where the config failed or was not measured, and a status code matrix.",
    )
    _add_db(export_cmd, "the dataset database, e.g. _data/dataset.db")
    export_cmd.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path("_data/dataset"),
        metavar="DIR",
        help="folder of the dataset (default: _data/dataset)",
    )
    export_cmd.set_defaults(handler=cmd_export)


def _add_db(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--db", type=Path, required=True, metavar="PATH", help=what)


def cmd_freeze(args: argparse.Namespace) -> int:
    done = freeze(
        args.db, args.output, devices=args.device, regimes=args.regime, families=args.family
    )
    state = "wrote" if done.written else "unchanged (the same rows were frozen before)"
    print(f"froze {_rows(done.rows)} of {args.db}: {done.path} {state}")
    print(f"sha256 {done.sha256}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    results = import_sources(args.db, args.sources)
    for r in results:
        if r.skipped_as is not None:
            same = "" if r.skipped_as == str(r.path) else f" as {r.skipped_as}"
            print(f"skipped {r.path}: already imported{same} (sha256 {r.sha256[:12]})")
        else:
            print(
                f"imported {r.path} ({r.kind}, sha256 {r.sha256[:12]}): {_rows(r.rows)},"
                f" {r.added} new"
            )
    added = sum(r.added for r in results)
    fresh = sum(r.skipped_as is None for r in results)
    print(f"{args.db}: {added} new rows from {fresh} source(s), {len(results) - fresh} skipped")
    return 0


def _rows(n: int) -> str:
    return f"{n} row{'s' * (n != 1)}"


def cmd_stats(args: argparse.Namespace) -> int:
    for line in stats(args.db).lines():
        print(line)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    manifest = export(args.db, args.output)
    pools = manifest["pools"]
    for pool in pools:
        print(
            f"{pool['file']}: {len(pool['keys'])} keys x {len(pool['configs'])} configs,"
            f" {pool['rows']} rows, {pool['clean']} clean cells"
        )
    print(f"wrote {len(pools)} pool(s) and {args.output / 'manifest.json'}")
    return 0
