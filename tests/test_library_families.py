"""Every option of every library family on the emulator under two thread orders, against
float64 references, and compiled with NVRTC for sm_80 and sm_90 without spills. Pairwise over
the storage types, the shapes and the forks together (emmy.check.checked_variants; the
NVRTC programs emmy.check.register_program, over the archs too): each option runs at each
shape and in each storage type, each compiles for each arch, and each pair of options
runs and compiles somewhere. The shapes are the families' own
(emmy/families/: ragged edges; softmax inputs with overflowing magnitudes and -inf);
emmy.check builds the cases, which scripts/gpu-check runs on a GPU (tests/test_gpu_check.py
runs the script itself on emu)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from emmy.backend.nvrtc import compile_cuda
from emmy.check import (
    REGISTER_ARCHS,
    case,
    case_configs,
    check,
    checked_families,
    dtypes_of,
    register_program,
)
from emmy.dsl.library import declaration
from emmy.runtime.emu import EmuDevice

FAMILIES = checked_families()


def _emu_cases() -> list:
    return [
        pytest.param(family_name, dtype, schedule, id=f"{family_name}-{dtype}-{schedule}")
        for family_name in FAMILIES
        for dtype in dtypes_of(family_name)
        for schedule in ("forward", "reverse")
    ]


@pytest.mark.parametrize(("family_name", "dtype", "schedule"), _emu_cases())
def test_every_option_on_emu(family_name: str, dtype: str, schedule: str) -> None:
    """Each option in the threads' order and in the reverse order (a kernel that reads what
    another thread has not written yet differs between the two)."""
    failures = check(case(family_name, dtype), EmuDevice(), schedule)
    assert not failures, "\n".join(failures[:8])


@pytest.mark.parametrize("family_name", FAMILIES)
def test_pairwise_runs_every_option(family_name: str) -> None:
    seen = {
        (n, v)
        for d in dtypes_of(family_name)
        for config in case_configs(family_name, d)
        for n, v in config.items()
        if n != "shape"
    }
    for fork in declaration(family_name).forks:
        for option in fork.options:
            assert (fork.name, option) in seen, f"{family_name} {fork.name}={option} never runs"


@pytest.mark.parametrize("arch", REGISTER_ARCHS)
@pytest.mark.parametrize("family_name", FAMILIES)
def test_every_option_compiles_with_nvrtc_without_spills(family_name: str, arch: str) -> None:
    program = register_program(family_name, arch)
    compiled = compile_cuda(program.source, arch)
    assert set(compiled.resources) == set(program.kernels)
    spilling = {
        f"{name} [{program.kernels[name].site.key}] {program.kernels[name].config}": used
        for name, used in compiled.resources.items()
        if used.spill_stores or used.spill_loads
    }
    assert not spilling, f"{family_name} {arch} spills: {spilling}"


def test_a_wrong_kernel_is_caught() -> None:
    """The check is not vacuous: a softmax that forgets part of its normalisation fails."""
    c = case("softmax", "f32")
    broken = replace(c, source=c.source.replace(" * v", " * 0.5f * v", 1))
    assert broken.source != c.source
    assert check(broken, EmuDevice())
