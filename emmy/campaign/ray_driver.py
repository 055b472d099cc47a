"""`emmy campaign run`: a campaign's items as Ray tasks, their rows merged into one freeze.

Each worker advertises its device identity as the Ray custom resource `emmy:<identity>`
(`emmy:emu`, `emmy:nvidia-h200-sm90`), and a task asks for one unit of its device's
resource, so the rows of an H200 are measured on an H200. With no address, Ray starts on
this machine with one emulator worker per core and one worker per GPU; with one, the
campaign joins that cluster, whose nodes were started with `ray start --resources "$(emmy
campaign resources)"`.

The driver skips every cell already in the campaign's output (unless forced), sends each
item's missing cells as one task, and merges the rows of every task that returns into the
output's freeze at once. A task whose worker dies (killed, out of memory, its node gone)
is retried by Ray on another worker of its kind, up to `retries` times; an item that fails
every try becomes failure rows saying why, and the campaign goes on.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import ray
import ray.exceptions
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from emmy.base.errors import EmmyError
from emmy.base.identity import EMU
from emmy.base.regime import regime_for
from emmy.campaign import DEFAULT_RETRIES
from emmy.campaign.campaign_worker import Result, Task, bench_task
from emmy.campaign.items import Campaign
from emmy.campaign.output import CampaignOutput, is_failure
from emmy.campaign.resources import device_of, local_resources, resource_name
from emmy.dataset.dataset_store import row_cell
from emmy.recall.tuning_db import Row, canonical_config

#: the longest temp folder under which the local Ray's session sockets fit in 107 bytes
MAX_TEMP_ROOT = 40
#: the object store of an embedded Ray: rows are small, and a CI machine's /dev/shm too
LOCAL_OBJECT_STORE_BYTES = 256 * 2**20


def bench_item(task: Task) -> Result:
    """The Ray task: one item's cells on a worker of its device (its process title is
    `ray::bench_item` while it runs)."""
    return bench_task(task)


_remote_bench = ray.remote(bench_item)


@dataclass
class DeviceTally:
    """What a run did on one device kind."""

    cells: int = 0
    done_before: int = 0
    measured: int = 0
    recalled: int = 0
    failed: int = 0
    unplaceable: int = 0
    first_start: float | None = None
    last_finish: float | None = None

    @property
    def wall_s(self) -> float:
        if self.first_start is None or self.last_finish is None:
            return 0.0
        return self.last_finish - self.first_start


@dataclass
class RunSummary:
    tallies: dict[str, DeviceTally] = field(default_factory=lambda: defaultdict(DeviceTally))
    items: int = 0
    rows_received: int = 0
    unplaceable: list[str] = field(default_factory=list)
    #: per returned task, seconds from the worker's return to its rows on disk
    durable_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    output: Path | None = None


class CampaignInterrupted(EmmyError):
    """The driver was interrupted; what it had received is in the output."""


@dataclass
class _Pending:
    task: Task
    cells: list[tuple]


def run_campaign(
    campaign: Campaign,
    *,
    address: str | None = None,
    devices: Sequence[str] = (),
    emu_workers: int | None = None,
    worker_db: str | None = None,
    force: bool = False,
    retries: int = DEFAULT_RETRIES,
    console: Console | None = None,
) -> RunSummary:
    """Runs the campaign's missing cells on Ray (see the module's docstring)."""
    console = console or Console(stderr=True)
    started = time.time()
    output = CampaignOutput(campaign.output, str(campaign.path))
    summary = RunSummary(output=output.path)
    wanted = list(devices) or campaign.device_kinds()
    if not set(wanted) & set(campaign.device_kinds()):
        kinds = ", ".join(campaign.device_kinds()) or "none"
        raise EmmyError(
            f"{campaign.path}: no item is for {', '.join(wanted)} (the file's device kinds: {kinds})"
        )
    work = _work(campaign, output, wanted, force, worker_db, summary)
    if not work:
        console.print(
            f"campaign {campaign.path}: nothing to measure; every cell is in {campaign.output}"
        )
        summary.wall_s = time.time() - started
        return summary
    _start_ray(address, emu_workers)
    # a driver ended by SIGTERM (a job scheduler's stop) ends as an interrupted one does
    main_thread = threading.current_thread() is threading.main_thread()
    terminate = signal.signal(signal.SIGTERM, signal.default_int_handler) if main_thread else None
    try:
        placeable = _placeable(work, summary, console)
        _run(campaign, placeable, output, summary, force, retries, console)
    except KeyboardInterrupt:
        output.flush()
        raise CampaignInterrupted(
            f"interrupted: {len(output.rows)} row(s) kept in {output.path or campaign.output}; "
            "run the campaign again to measure the rest"
        ) from None
    finally:
        if terminate is not None:
            signal.signal(signal.SIGTERM, terminate)
        ray.shutdown()
    summary.output = output.flush()
    summary.wall_s = time.time() - started
    return summary


def _work(
    campaign: Campaign,
    output: CampaignOutput,
    devices: Sequence[str],
    force: bool,
    worker_db: str | None,
    summary: RunSummary,
) -> list[_Pending]:
    """A task per (item, device) with cells the output lacks (every cell, when forced)."""
    work = []
    for index, item in enumerate(campaign.items):
        for device in item.devices:
            if device not in devices:
                continue
            cells = campaign.cells(item, device)
            tally = summary.tallies[device]
            tally.cells += len(cells)
            missing = [(cell, config) for cell, config in cells if force or cell not in output]
            tally.done_before += len(cells) - len(missing)
            if not missing:
                continue
            configs = tuple(config for _, config in missing)
            task = Task(index, item, device, campaign.flags, configs, force, worker_db)
            work.append(_Pending(task, [cell for cell, _ in missing]))
    summary.items = len(work)
    return work


def _start_ray(address: str | None, emu_workers: int | None) -> None:
    if address is not None:
        try:
            # Ray annotates logging_level as an int, yet takes a level's name (its default
            # is "info"), as logging does
            ray.init(
                address=address,
                logging_level="ERROR",  # pyright: ignore[reportArgumentType]
                log_to_driver=False,
            )
        except (ConnectionError, ValueError, RuntimeError) as error:
            hint = (
                "; a cluster with token authentication (Ray's default since 2.59) needs "
                "RAY_AUTH_MODE=token and its RAY_AUTH_TOKEN here too (docs/campaigns.md)"
                if "RAY_AUTH_MODE" not in os.environ
                else ""
            )
            raise EmmyError(
                f"cannot join the Ray cluster at {address}: {_first_line(str(error))}{hint}"
            ) from None
        return
    resources = local_resources(emu_workers)
    gpus = sum(v for k, v in resources.items() if k != resource_name(EMU))
    try:
        ray.init(
            address="local",
            num_cpus=int(resources.get(resource_name(EMU), 0)),
            num_gpus=int(gpus),
            resources=resources,
            include_dashboard=False,
            object_store_memory=LOCAL_OBJECT_STORE_BYTES,
            logging_level="ERROR",  # pyright: ignore[reportArgumentType] - a name, as above
            log_to_driver=False,
            _temp_dir=_ray_temp_dir(),
        )
    except (OSError, RuntimeError, ValueError) as error:
        raise EmmyError(f"cannot start Ray on this machine: {_first_line(str(error))}") from None


def _ray_temp_dir() -> str:
    """Where the local Ray keeps its sockets: under the temp folder, unless that path is
    too long for them (a Unix socket's path is at most 107 bytes)."""
    root = os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()
    if len(root) > MAX_TEMP_ROOT:
        root = "/tmp"
    return os.path.join(root, "ray")


def _placeable(work: list[_Pending], summary: RunSummary, console: Console) -> list[_Pending]:
    """The tasks some worker of the cluster can run; one line for each device kind none
    has, whose tasks are left for a later run."""
    have = {
        device_of(name): int(count)
        for name, count in ray.cluster_resources().items()
        if device_of(name) is not None
    }
    kinds = ", ".join(f"{d} ×{n}" for d, n in sorted(have.items())) or "none"
    placeable, stranded = [], Counter()
    for pending in work:
        if have.get(pending.task.device, 0) > 0:
            placeable.append(pending)
            continue
        stranded[pending.task.device] += 1
        summary.tallies[pending.task.device].unplaceable += len(pending.cells)
    for device, count in sorted(stranded.items()):
        line = (
            f"{count} item(s) for {device} unplaceable: no worker in the cluster has that "
            f"device (workers: {kinds}); left for a run on a cluster that has one"
        )
        summary.unplaceable.append(line)
        console.print(f"emmy: campaign: {line}", highlight=False, soft_wrap=True)
    return placeable


def _submit(pending: _Pending, retries: int):
    device = pending.task.device
    gpu = device != EMU
    return _remote_bench.options(
        num_cpus=0 if gpu else 1,
        num_gpus=1 if gpu else 0,
        resources={resource_name(device): 1},
        max_retries=retries,
        retry_exceptions=False,
    ).remote(pending.task)


def _run(
    campaign: Campaign,
    work: list[_Pending],
    output: CampaignOutput,
    summary: RunSummary,
    force: bool,
    retries: int,
    console: Console,
) -> None:
    pending = {_submit(p, retries): p for p in work}
    done_cells: Counter = Counter()
    started = time.time()
    with _progress(console) as progress:
        bar = progress.add_task("items", total=len(pending), status="")
        while pending:
            ready, waiting = ray.wait(list(pending), num_returns=1, timeout=0.5)
            if not ready:
                continue
            if waiting:  # the others that are back already: one write for all of them
                ready += ray.wait(waiting, num_returns=len(waiting), timeout=0)[0]
            returned = []
            for ref in ready:
                item = pending.pop(ref)
                result, failure = _outcome(ref, item, retries)
                rows = result.rows if result is not None else _failure_rows(campaign, item, failure)
                summary.rows_received += output.add(rows, replace=force)
                _tally(summary.tallies[item.task.device], item, result, rows)
                done_cells[item.task.device] += len(item.cells)
                returned.append((item, result, failure))
            output.flush()
            durable = time.time()
            for item, result, failure in returned:
                if result is not None:
                    summary.durable_s.append(durable - result.finished)
                console.print(_item_line(item, result, failure), highlight=False, soft_wrap=True)
            progress.update(
                bar, advance=len(returned), status=_status(summary, done_cells, started)
            )


def _outcome(ref, pending: _Pending, retries: int) -> tuple[Result | None, str | None]:
    """The task's result, or why it failed every try."""
    try:
        return ray.get(ref), None
    except ray.exceptions.RayTaskError as error:
        cause = error.cause if error.cause is not None else error
        return None, f"{type(cause).__name__}: {_first_line(str(cause))}"
    except ray.exceptions.RayError as error:
        tries = retries + 1
        return (
            None,
            f"its worker died on each of {tries} tries ({type(error).__name__}: {_first_line(str(error))})",
        )


def _failure_rows(campaign: Campaign, pending: _Pending, reason: str | None) -> list[Row]:
    """A failure row for each cell of an item that failed every try."""
    task = pending.task
    regime = regime_for(task.device, campaign.flags)
    pick = task.item.choice().config if task.item.is_choice else task.item.work().pick
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return [
        Row(
            device=task.device,
            regime=regime.id,
            regime_words=regime.words,
            compiler="unknown",
            family=task.item.site.family,
            key=str(task.item.site.key),
            config=dict(config),
            origin="pick" if canonical_config(config) == canonical_config(pick) else "forced",
            status="launch_error",
            message=f"campaign: the item failed: {reason}",
            bench=f"campaign-{stamp}",
        )
        for config in task.configs
    ]


def _tally(tally: DeviceTally, pending: _Pending, result: Result | None, rows: list[Row]) -> None:
    """Counts an item's cells: measured by its task or recalled from its worker's database,
    and failed (a failure row, the task's or one that failed every try)."""
    if result is None:
        tally.failed += len(pending.cells)
        return
    cells = set(pending.cells)
    mine = [row for row in rows if row_cell(row) in cells]
    measured = sum(row.bench == result.bench for row in mine)
    tally.measured += measured
    tally.recalled += len(mine) - measured
    tally.failed += sum(is_failure(row) for row in mine)
    tally.first_start = min(t for t in (tally.first_start, result.started) if t is not None)
    tally.last_finish = max(t for t in (tally.last_finish, result.finished) if t is not None)


def _item_line(pending: _Pending, result: Result | None, failure: str | None) -> str:
    task = pending.task
    where = f"item {task.index} ({task.item.describe()}) on {task.device}"
    if result is None:
        return f"{where}: failed every try: {failure}"
    seconds = result.finished - result.started
    return (
        f"{where}: {result.measured} measured, {result.recalled} recalled in {seconds:.1f} s "
        f"[{result.worker}]"
    )


def _status(summary: RunSummary, done_cells: Counter, started: float) -> str:
    elapsed = max(time.time() - started, 1e-9)
    rates = ", ".join(
        f"{d} {n / elapsed * 60:.0f} cells/min" for d, n in sorted(done_cells.items())
    )
    failed = sum(t.failed for t in summary.tallies.values())
    return f"{summary.rows_received} rows, {failed} failed; {rates}"


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[status]}"),
        console=console,
    )


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def summary_table(summary: RunSummary) -> Table:
    """Per device kind: its cells, those already in the output before the run, measured,
    recalled from a worker's database, failed and left unplaceable, and the wall time."""
    table = Table(title="campaign summary", caption="before: in the output before this run")
    columns = ("device", "cells", "before", "measured", "recalled", "failed", "unplaced", "wall")
    for name in columns:
        table.add_column(name, justify="left" if name == "device" else "right")
    for device, tally in sorted(summary.tallies.items()):
        counts = (tally.cells, tally.done_before, tally.measured, tally.recalled, tally.failed)
        table.add_row(device, *map(str, counts), str(tally.unplaceable), f"{tally.wall_s:.1f} s")
    return table


def print_summary(summary: RunSummary, console: Console | None = None) -> None:
    """The table per device kind, the driver's overhead, and where the rows are."""
    console = console or Console()
    console.print(summary_table(summary))
    for line in summary.unplaceable:
        console.print(f"left: {line}", highlight=False, soft_wrap=True)
    if summary.durable_s:
        mean = sum(summary.durable_s) / len(summary.durable_s)
        console.print(
            f"driver: {mean * 1e3:.1f} ms per item from a worker's return to its rows on disk "
            f"(mean of {len(summary.durable_s)}, max {max(summary.durable_s) * 1e3:.1f} ms)",
            highlight=False,
            soft_wrap=True,
        )
    console.print(
        f"{summary.rows_received} row(s) received in {summary.wall_s:.1f} s; "
        f"output {summary.output or 'none yet'} (emmy db import takes it)",
        highlight=False,
        soft_wrap=True,
    )
