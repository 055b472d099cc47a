"""`emmy campaign plan|run|status|resources`: the command line of emmy/campaign/.

Ray is the `campaign` extra: only `emmy campaign run` imports
it (through emmy.campaign.ray_driver), and without it they say in one line how to install it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from emmy.base.errors import EmmyError
from emmy.base.identity import EMU, is_well_formed
from emmy.campaign import DEFAULT_MAX_ROWS, DEFAULT_RETRIES
from emmy.campaign.output import CampaignOutput, is_failure
from emmy.campaign.resources import local_resources

INSTALL_RAY = "emmy campaign run needs Ray and rich: pip install 'emmy[campaign]'"


def add_campaign_commands(
    commands: argparse._SubParsersAction,
    add_model_options: Callable[[argparse.ArgumentParser], None],
    source_text: Callable[[argparse.Namespace], tuple],
) -> None:
    """Add `emmy campaign` and its actions to `commands`, the subparsers of `emmy`; a plan
    reads its model as `emmy compile` does (`add_model_options`, `source_text`)."""
    campaign_cmd = commands.add_parser(
        "campaign",
        help="bench campaigns over many sites and machines, on Ray",
        description="Plan the bench work of many sites into one campaign file, run it on a "
        "Ray cluster (or on this machine), merged into one freeze, and see what is left.",
    )
    actions = campaign_cmd.add_subparsers(dest="campaign_command", required=True, metavar="ACTION")
    _add_plan(actions, add_model_options, source_text)
    _add_run(actions)
    _add_status(actions)
    _add_resources(actions)


def _devices(text: str) -> list[str]:
    devices = [d.strip() for d in text.split(",") if d.strip()]
    for device in devices:
        if not is_well_formed(device):
            raise EmmyError(
                f"--devices: {device!r} is not a device identity (emu, or a slug such as "
                "nvidia-h200-sm90)"
            )
    if not devices:
        raise EmmyError("--devices: name at least one device kind, e.g. emu")
    return devices


def _add_plan(
    actions: argparse._SubParsersAction,
    add_model_options: Callable[[argparse.ArgumentParser], None],
    source_text: Callable[[argparse.Namespace], tuple],
) -> None:
    plan_cmd = actions.add_parser(
        "plan",
        help="write a campaign file from a recipe, a model directory, an expression or the key grid",
        description="Compile the source for each device kind with the declared defaults and "
        "the pins, and write an item for each of its sites (kernels and host-level choices): "
        "family, key, buffers, the configs to measure and the device kinds.",
    )
    add_model_options(plan_cmd)
    plan_cmd.add_argument(
        "--grid",
        action="store_true",
        help="the dataset's key grid (emmy.campaign.grid) instead of a model or expression",
    )
    plan_cmd.add_argument(
        "--family",
        action="append",
        default=[],
        metavar="GROUP",
        help="with --grid: only this group of the grid, a family or split_k (repeatable)",
    )
    plan_cmd.add_argument(
        "--every", type=int, default=1, metavar="N", help="with --grid: every Nth key of a group"
    )
    plan_cmd.add_argument(
        "--pin",
        action="append",
        default=[],
        metavar="FORK=VALUE",
        help="pin a fork in the planning compile (repeatable), e.g. matmul=split4",
    )
    plan_cmd.add_argument(
        "--configs",
        default="default",
        metavar="SPEC",
        help="what each site measures: default, all, sample=N (the default and N seeded "
        "random configs) or sweep=FORK[,FORK...] (default: default)",
    )
    plan_cmd.add_argument(
        "--max-rows",
        type=int,
        default=DEFAULT_MAX_ROWS,
        metavar="N",
        help=f"rows per site besides the pick ({DEFAULT_MAX_ROWS})",
    )
    plan_cmd.add_argument(
        "--devices",
        type=_devices,
        default=[EMU],
        metavar="LIST",
        help="the device kinds, comma-separated, e.g. emu,nvidia-h200-sm90 (default: emu)",
    )
    plan_cmd.add_argument(
        "--nvcc-flags",
        default="",
        metavar="FLAGS",
        help="code-generation flags of the campaign's regime (default: the deployable one)",
    )
    plan_cmd.add_argument(
        "--output",
        metavar="DIR",
        help="the folder of the merged freeze, beside the file (default: FILE without .json, "
        "plus .out)",
    )
    plan_cmd.add_argument(
        "-o", dest="file", type=Path, required=True, metavar="FILE", help="the campaign file"
    )
    plan_cmd.set_defaults(handler=cmd_plan, source_text=source_text, no_fallback=False)


def cmd_plan(args: argparse.Namespace) -> int:
    # the planner compiles (torch, xDSL): only this command loads it
    from emmy.campaign.planner import Source, grid_sources, parse_configs, plan

    if args.max_rows < 0:
        raise EmmyError("--max-rows must be 0 or more")
    configs = parse_configs(args.configs)
    pins = ",".join(args.pin)
    if args.grid:
        if args.recipe is not None or args.expression is not None:
            raise EmmyError("--grid plans the key grid: give no RECIPE, DIR or -c EXPR with it")

        def sources() -> list[Source]:
            return [
                (text, constants, where, ",".join(filter(None, [grid_pins, pins])), label)
                for text, constants, where, grid_pins, label in grid_sources(
                    args.family, args.every
                )
            ]
    else:
        if args.family or args.every != 1:
            raise EmmyError("--family and --every choose keys of the grid: give --grid")
        text, constants, where = args.source_text(args)
        label = args.expression or args.recipe

        def sources() -> list[Source]:
            return [(text, constants, where, pins, label)]

    campaign = plan(
        args.file,
        sources,
        args.devices,
        configs=configs,
        max_rows=args.max_rows,
        flags=args.nvcc_flags,
        output=args.output,
    )
    campaign.write()
    cells = sum(len(cells) for _, _, cells in campaign.iter_cells(args.devices))
    print(
        f"campaign {args.file}: {len(campaign.items)} item(s), {cells} cell(s) on "
        f"{', '.join(args.devices)}; output {campaign.output}"
    )
    return 0


def _add_run(actions: argparse._SubParsersAction) -> None:
    run_cmd = actions.add_parser(
        "run",
        help="run a campaign on Ray: local by default, or a cluster with --address",
        description="Bench every cell of the campaign that its output lacks, each item as a "
        "Ray task on a worker of its device kind, and merge the rows into the output's freeze "
        "as they arrive. Run it again to resume; --force measures everything again.",
    )
    run_cmd.add_argument("file", type=Path, metavar="FILE", help="the campaign file")
    run_cmd.add_argument(
        "--address",
        metavar="auto|HOST:PORT",
        help="join this Ray cluster (default: start Ray on this machine, one emulator worker "
        "per core and one worker per GPU)",
    )
    run_cmd.add_argument(
        "--devices",
        type=_devices,
        default=[],
        metavar="LIST",
        help="only the items of these device kinds (default: every kind the file names)",
    )
    run_cmd.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="emulator workers of the local Ray (default: one per core; 0: none, GPUs only)",
    )
    run_cmd.add_argument(
        "--worker-db",
        metavar="PATH",
        help="the tuning database each node's workers record into (default: emmy's own, "
        "~/.cache/emmy/autotune.db on that node)",
    )
    run_cmd.add_argument(
        "--retries",
        type=int,
        default=DEFAULT_RETRIES,
        metavar="N",
        help="tries of an item after its worker died, on another worker of its kind "
        f"({DEFAULT_RETRIES})",
    )
    run_cmd.add_argument(
        "--force", action="store_true", help="measure every cell again, even those in the output"
    )
    run_cmd.set_defaults(handler=cmd_run)


def _driver():
    """emmy.campaign.ray_driver, or one line on how to install Ray."""
    try:
        # Ray (the campaign extra) takes seconds to import; only a campaign run needs it
        from emmy.campaign import ray_driver as driver
    except ImportError as error:
        if (error.name or "").split(".")[0] in ("ray", "rich"):
            raise EmmyError(INSTALL_RAY) from None
        raise
    return driver


def cmd_run(args: argparse.Namespace) -> int:
    # a campaign's items know their configs through the bench (torch): loaded here only
    from emmy.campaign.items import load_campaign

    if args.workers is not None and args.workers < 0:
        raise EmmyError("--workers must be 0 or more")
    if args.retries < 0:
        raise EmmyError("--retries must be 0 or more")
    if args.address is not None and args.workers is not None:
        raise EmmyError("--workers sizes the local Ray; a cluster's nodes set their own")
    campaign = load_campaign(args.file)
    driver = _driver()
    try:
        summary = driver.run_campaign(
            campaign,
            address=args.address,
            devices=args.devices,
            emu_workers=args.workers,
            worker_db=args.worker_db,
            force=args.force,
            retries=args.retries,
        )
    except driver.CampaignInterrupted as interrupted:
        print(f"emmy: campaign {interrupted}", file=sys.stderr)
        return 130
    driver.print_summary(summary)
    return 0


def _add_status(actions: argparse._SubParsersAction) -> None:
    status_cmd = actions.add_parser(
        "status",
        help="what a campaign's output holds and what is left",
        description="Read the campaign file and its output: per device kind, the cells "
        "measured, failed and left, and the items with cells left.",
    )
    status_cmd.add_argument("file", type=Path, metavar="FILE", help="the campaign file")
    status_cmd.set_defaults(handler=cmd_status)


def cmd_status(args: argparse.Namespace) -> int:
    # a campaign's items know their configs through the bench (torch): loaded here only
    from emmy.campaign.items import load_campaign

    campaign = load_campaign(args.file)
    output = CampaignOutput(campaign.output, str(campaign.path))
    totals: dict[str, Counter] = {}
    items_left = 0
    for _, device, cells in campaign.iter_cells(campaign.device_kinds()):
        count = totals.setdefault(device, Counter())
        left = [cell for cell, _ in cells if cell not in output]
        failed = [cell for cell, _ in cells if cell in output and is_failure(output.rows[cell])]
        count.update(cells=len(cells), left=len(left), failed=len(failed))
        items_left += bool(left)
    where = output.path or f"{campaign.output} (nothing yet)"
    print(f"campaign {campaign.path}: {len(campaign.items)} item(s); output {where}")
    for device, count in totals.items():
        done = count["cells"] - count["left"]
        print(
            f"  {device}: {done}/{count['cells']} cells done ({count['failed']} failed), "
            f"{count['left']} left"
        )
    print(f"{items_left} item(s) with cells left" if items_left else "nothing left")
    return 0


def _add_resources(actions: argparse._SubParsersAction) -> None:
    resources_cmd = actions.add_parser(
        "resources",
        help="the Ray resources this machine's workers advertise, for `ray start --resources`",
        description="Print, as JSON, the custom resources a Ray node on this machine "
        "advertises: emmy:emu (a worker per core) and emmy:<identity> per GPU kind.",
    )
    resources_cmd.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="emulator workers (default: one per core; 0: none, for a node that benches its GPUs)",
    )
    resources_cmd.set_defaults(handler=cmd_resources)


def cmd_resources(args: argparse.Namespace) -> int:
    if args.workers is not None and args.workers < 0:
        raise EmmyError("--workers must be 0 or more")
    print(json.dumps(local_resources(args.workers)))
    return 0
