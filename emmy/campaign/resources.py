"""The Ray custom resources by which a campaign's tasks find workers of their device kind.

A worker of device identity D advertises `emmy:D` (`emmy:emu`, `emmy:nvidia-h200-sm90`),
as many units as the tasks it may run at once; a task asks for one unit of its own.
"""

from __future__ import annotations

import os
from collections import Counter

from emmy.base.identity import EMU

RESOURCE_PREFIX = "emmy:"


def resource_name(device: str) -> str:
    """The Ray custom resource a worker of `device` advertises."""
    return f"{RESOURCE_PREFIX}{device}"


def device_of(resource: str) -> str | None:
    """The device identity a resource name advertises; None for another resource."""
    return resource[len(RESOURCE_PREFIX) :] if resource.startswith(RESOURCE_PREFIX) else None


def local_resources(emu_workers: int | None = None) -> dict[str, float]:
    """The emmy resources of this machine: a worker per core for the emulator (or
    `emu_workers`; 0: none), one per GPU of each kind."""
    # the CUDA bindings take ~0.25 s to load; only a campaign's node asks for its GPUs
    from emmy.runtime.cuda import device_identities

    workers = len(os.sched_getaffinity(0)) if emu_workers is None else emu_workers
    resources = {resource_name(EMU): float(workers)} if workers else {}
    for identity, count in Counter(device_identities()).items():
        resources[resource_name(identity)] = float(count)
    return resources
