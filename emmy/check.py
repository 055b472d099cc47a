"""Correctness of every option of the kernel library: pairwise variants of each family,
run on a device against the float64 references of the families (emmy.measure.reference).

The shapes and inputs are each family's (emmy/families/, `check_keys` and `check_inputs`).
On a GPU a case runs in a worker process (emmy.measure.bench_worker): a kernel that faults is a
failure of its case, and leaves the process that checks the next case unharmed.
Options are covered pairwise over the storage types, shapes and forks together (each option
at each shape and in each storage type, every pair of options together); all variants of a
family and dtype share one source, so a case costs one compiler invocation and one device
run. The test suite runs the cases on the emulator; scripts/gpu-check runs the same cases on
a GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache

import numpy as np
import torch

from emmy.backend.emit_cuda import CudaProgram
from emmy.base import dtypes
from emmy.base.errors import KernelLaunchError
from emmy.base.problem_key import INDEX_NAME
from emmy.compiler import TensorSpec, Variant, compile_sites, poisoned
from emmy.dsl.keys import param_dtype
from emmy.dsl.library import active_params, declaration
from emmy.families.family import KernelFamily
from emmy.families.registry import of_kind, registered_as
from emmy.measure.bench_worker import DeviceWorker, isolated
from emmy.measure.reference import as_outputs, reference, tolerance
from emmy.runtime.convert import from_storage, to_storage
from emmy.runtime.device import BufferArg, Device, Launch
from emmy.runtime.emu_serve import EAGER
from emmy.sites.fork_space import ForkSpace


def checked_families() -> list[str]:
    """The families whose every option a check runs: the kernel families of the registry."""
    return list(of_kind(KernelFamily))


def dtypes_of(family_name: str) -> list[str]:
    return list(registered_as(family_name, KernelFamily).check_dtypes)


@dataclass
class Case:
    source: str
    launches: list[Launch]
    buffers: dict[str, np.ndarray]
    expected: dict[str, torch.Tensor]
    configs: dict[str, dict]
    dtype: str
    family: str
    #: each output's storage type where it is not the case's (split-K parts are f32)
    output_dtypes: dict[str, str] = field(default_factory=dict)


def check_keys(family_name: str, dtype: str, index: str = "i32") -> list[dict]:
    """The family's check keys in `dtype`, with `index=i64` on each for a 64-bit case."""
    keys = registered_as(family_name, KernelFamily).check_keys(dtype)
    return keys if index == "i32" else [{**key, INDEX_NAME: index} for key in keys]


def case_variants(family_name: str, dtype: str, index: str = "i32") -> list[tuple[int, Variant]]:
    """The kernels a case runs, each with the index of its check key: the storage type's
    share of checked_variants (each option once in 64-bit arithmetic, which changes the
    integer type, not what the options do)."""
    if index == "i32":
        return [(shape, v) for d, shape, v in checked_variants(family_name) if d == dtype]
    keys = check_keys(family_name, dtype, index)
    space = ForkSpace.of(declaration(family_name))
    chosen = space.pairwise(keys, 1, keys_paired=True)
    return [
        (shape, Variant(f"s{shape}_{n}", family_name, keys[shape], config))
        for n, (shape, config) in enumerate(chosen)
    ]


def case_configs(family_name: str, dtype: str, index: str = "i32") -> list[dict]:
    """The configs a case runs (case_variants), each with the index of its check key as
    `shape`."""
    return [
        {"shape": shape, **variant.config}
        for shape, variant in case_variants(family_name, dtype, index)
    ]


def _keys_in_every_dtype(family_name: str) -> list[tuple[str, int, dict]]:
    """The family's check keys in each storage type it is checked in: (its storage type,
    its index among that type's keys, the key)."""
    return [
        (dtype, shape, key)
        for dtype in dtypes_of(family_name)
        for shape, key in enumerate(check_keys(family_name, dtype))
    ]


def _cover_in_every_dtype(
    family_name: str, keys_paired: bool, archs: Sequence[str] = ("",)
) -> list[tuple[str, str, int, Variant]]:
    """Pairwise over the storage types, the shapes and the forks together (and over
    `archs`, where several), a type and an arch paired with the options as a fork is:
    (arch, storage type, shape index, kernel)."""
    keyed = [(arch, *each) for arch in archs for each in _keys_in_every_dtype(family_name)]
    chosen = ForkSpace.of(declaration(family_name)).pairwise(
        [key for *_, key in keyed],
        keys_paired=keys_paired,
        key_labels=[shape for _, _, shape, _ in keyed],
        key_forks=[
            {"T": dtype, **({"arch": arch} if len(archs) > 1 else {})}
            for arch, dtype, _, _ in keyed
        ],
    )
    return [
        (arch, dtype, shape, Variant(f"s{shape}_{n}", family_name, key, config))
        for n, (at, config) in enumerate(chosen)
        for arch, dtype, shape, key in [keyed[at]]
    ]


@cache
def checked_variants(family_name: str) -> tuple[tuple[str, int, Variant], ...]:
    """The kernels the emulator's and a GPU's checks run, over every storage type the
    family is checked in: pairwise over the storage types, the shapes and the forks
    together. Each option runs at each shape and in each storage type, each pair of
    options somewhere, each shape in each storage type: the types share the pairs a
    single type's cover runs, instead of each type running them all."""
    cover = _cover_in_every_dtype(family_name, keys_paired=True)
    return tuple((dtype, shape, variant) for _, dtype, shape, variant in cover)


#: the archs the register checks compile for, each its share of one cover
REGISTER_ARCHS = ("sm_80", "sm_90")


@cache
def register_program(family_name: str, arch: str) -> CudaProgram:
    """What the register checks compile for `arch` (no spills; rows kept in registers):
    its share of the family's pairwise cover over its check keys in every storage type it
    is checked in and the REGISTER_ARCHS, each option in each type and on each arch. A
    config's registers come from its tiles and from the sizes its key makes constants, so
    each option and each pair of options compiles at some key, and each key at least once;
    the emulator's check (`case`) runs each option at each key besides."""
    cover = _cover_in_every_dtype(family_name, keys_paired=False, archs=REGISTER_ARCHS)
    return compile_sites([variant for on, _, _, variant in cover if on == arch])


@cache
def case(family_name: str, dtype: str, index: str = "i32") -> Case:
    """Pairwise over the shapes and the forks together: each option runs, with each other
    fork's options and on each shape, in far fewer variants than pairwise per shape.
    `index="i64"` runs the kernels lowered in 64-bit arithmetic (as a site with a tensor
    of 2^31 elements or more has them) at the family's own small shapes."""
    inputs_of = registered_as(family_name, KernelFamily).check_inputs
    generator = torch.Generator().manual_seed(7)
    keys = check_keys(family_name, dtype, index)
    variants = case_variants(family_name, dtype, index)
    program = compile_sites([variant for _, variant in variants])
    launches, buffers, expected, chosen = [], {}, {}, {}
    output_dtypes: dict[str, str] = {}
    for shape_index, key in enumerate(keys):
        at_key = [variant for shape, variant in variants if shape == shape_index]
        if not at_key:
            continue
        tensors = inputs_of(key, dtype, generator)
        names = [f"s{shape_index}_in{i}" for i in range(len(tensors))]
        for name, tensor in zip(names, tensors, strict=True):
            integer = tensor.dtype in (torch.int32, torch.int64)
            buffers[name] = tensor.numpy().copy() if integer else to_storage(tensor)
        wants = as_outputs(reference(family_name)(key, tensors))
        stored = [
            param_dtype(p, key)
            for p in active_params(declaration(family_name), key)
            if p.direction == "out"
        ]
        for variant in at_key:
            info = program.kernels[variant.name]
            outputs = [f"out{i}_{variant.name}" for i in range(len(wants))]
            for output, want, storage in zip(outputs, wants, stored, strict=True):
                buffers[output] = poisoned(TensorSpec(output, tuple(want.shape), storage))
                expected[output] = want
                output_dtypes[output] = storage
                chosen[output] = {"key": key, **variant.config}
            args = tuple(BufferArg(n) for n in [*names, *outputs])
            launches.append(
                Launch(info.name, (info.grid, 1, 1), (info.block, 1, 1), info.smem, args)
            )
    return Case(
        program.source, launches, buffers, expected, chosen, dtype, family_name, output_dtypes
    )


def emu_schedules(c: Case, schedule: str) -> list[str]:
    """The emulator schedules a check of the case runs: `schedule`, and where the case copies
    with cp_async its eager twin as well. A GPU lands a copy any time between its issue and
    its wait; the emulator's default lands it at the wait, which catches a read before the
    wait, and eager lands it at issue, which catches a stage refilled while another warp
    still reads it."""
    if "cp_async" not in c.source or schedule.endswith(EAGER):
        return [schedule]
    return [schedule, schedule + EAGER]


def check(c: Case, device: Device, schedule: str = "forward") -> list[str]:
    """Runs every variant of a case on a device; the failures, one line each (a launch
    that failed in a device worker: one line for the case). On the emulator, under each of
    emu_schedules(c, schedule)."""
    if device.identity != "emu":
        return _check_once(c, device, {})
    schedules = emu_schedules(c, schedule)
    failures = []
    for s in schedules:
        found = _check_once(c, device, {"schedule": s})
        failures += found if len(schedules) == 1 else [f"{s}: {line}" for line in found]
    return failures


def _check_once(c: Case, device: Device, options: dict[str, str]) -> list[str]:
    buffers = {n: a.copy() for n, a in c.buffers.items()}
    runner = isolated(device)
    try:
        runner.run(c.source, c.launches, buffers, timeout=600, **options)
    except KernelLaunchError as error:
        if not isinstance(runner, DeviceWorker):
            raise  # the emulator in place: its errors are the caller's, as they always were
        return [f"{c.family} {c.dtype}: {error}"]
    finally:
        if isinstance(runner, DeviceWorker) and runner is not device:
            runner.close()
    failures = []
    for output, want in c.expected.items():
        torch_dtype = dtypes.torch_dtype(c.output_dtypes.get(output, c.dtype))
        rtol, atol = tolerance(c.family, c.configs[output]["key"], torch_dtype)
        actual = from_storage(buffers[output], torch_dtype).double().reshape(want.shape)
        want = want.to(torch_dtype).double()
        close = torch.isclose(actual, want, rtol=rtol, atol=atol, equal_nan=True)
        if not bool(close.all()):
            where = tuple(int(i) for i in torch.nonzero(~close)[0])
            failures.append(
                f"{c.configs[output]}: first wrong at {list(where)}: {float(actual[where])} vs {float(want[where])}"
            )
    return failures
