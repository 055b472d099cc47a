"""A campaign's work on one worker: an item's cells benched through emmy's own bench.

This is what a Ray task of the campaign runs (emmy.campaign.ray_driver); it does not import
Ray. The worker benches like `emmy run --bench`: the same rows, regime, recall of rows
already in its node's tuning database, and failure rows, each row written to that database
as soon as it is known. It returns every row it recorded or recalled.

A process keeps its device between items: the emulator (one thread, so that a node runs one
worker per core), or a GPU through a device worker process, so that a sticky fault ends
that process, not this one (emmy.measure.bench_worker).
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from emmy.base.errors import EmmyError
from emmy.base.identity import EMU
from emmy.base.regime import normalise_flags
from emmy.campaign.items import Item
from emmy.measure.bench import Bench, BenchOptions
from emmy.measure.bench_worker import DeviceSpec, DeviceWorker
from emmy.recall.tuning_db import Row, TuningDB, default_db_path
from emmy.runtime.device import Device
from emmy.runtime.emu import EmuDevice


@dataclass(frozen=True)
class Task:
    """One item's missing cells on one device kind."""

    index: int  # the item's place in its campaign file
    item: Item
    device: str  # the device identity the cells are for
    flags: str
    configs: tuple[dict, ...]
    force: bool = False
    db: str | None = None  # the node's tuning database (default: emmy's own on that node)


@dataclass
class Result:
    index: int
    device: str
    rows: list[Row] = field(default_factory=list)
    measured: int = 0
    recalled: int = 0
    bench: str = ""  # the id of the bench that measured its new rows
    worker: str = ""  # host:pid
    started: float = 0.0
    finished: float = 0.0  # wall clock, when the worker returned


#: this process's device per (kind, flags)
_DEVICES: dict[tuple[str, tuple[str, ...]], Device] = {}


def device_for(kind: str, flags: str) -> Device:
    """This process's device of `kind` ("emu", or a GPU's identity) under `flags`."""
    normal = normalise_flags(flags)
    device = _DEVICES.get((kind, normal))
    if device is None:
        if kind == EMU:
            device = EmuDevice(1, flags=normal)
        else:
            device = DeviceWorker(DeviceSpec("cuda", normal))
        if device.identity != kind:
            raise EmmyError(
                f"this worker's device is {device.identity}, not {kind}: its node "
                "advertises a device it does not have"
            )
        _DEVICES[(kind, normal)] = device
    return device


def bench_task(task: Task) -> Result:
    """Benches the task's cells and returns every row the bench recorded or recalled."""
    started = time.time()
    device = device_for(task.device, task.flags)
    db_path = Path(task.db) if task.db else default_db_path()
    with TuningDB(db_path) as db:
        bench = Bench(device, device.regime, db, BenchOptions(force=task.force), lambda _: None)
        if task.item.is_choice:
            choice = task.item.choice()
            (fork_name,) = choice.config
            options = [config[fork_name] for config in task.configs]
            bench.bench_choice(task.item.site.family, choice, options)
        else:
            bench.bench_site(task.item.work(), list(task.configs))
    measured = sum(row.bench == bench.bench_id for row in bench.rows)
    return Result(
        index=task.index,
        device=task.device,
        rows=bench.rows,
        measured=measured,
        recalled=len(bench.rows) - measured,
        bench=bench.bench_id,
        worker=f"{socket.gethostname()}:{os.getpid()}",
        started=started,
        finished=time.time(),
    )
