"""Every option of the recipes' kernel sites compiles with NVRTC for sm_80 and sm_90 without
spills, and launches (non-zero occupancy, emmy/backend/occupancy.py) on each device of the
arch in the occupancy table.

The sites are the distinct (family, key) kernel sites of mlp, gpt2 and llama at their
default and tiny configs, size 0, compiled for nvidia-h200-sm90: those
tests/data/recipe-site-keys.json pins, read from there because test_recipe_site_keys checks
that the compiler still makes exactly them, and six recipe compiles would cost ~15 s of the
budget. Host-level choices (matmul_path, attention_path) and host calls (vendor_matmul) have
no kernel of their own; their options' kernels are sites of the list.

What is cut, and why: pairwise per site (every pair of options at every site) is ~1900
kernels, and each option at each site with every pair at some site of the family ~490,
which cost 100 s and 74 s of the CI's time for sm_80 and sm_90. The options are covered
over the family's sites, its forks and the archs together: every site of a family at least
once, every option and every pair of options of two forks at some site, every option on
each arch (the greedy cover prefers the configs that bring the most new pairs, at whichever
site allows them); each arch compiles its share. A fork's effect on
registers and shared memory comes from its tiles, which are the same at every site, while a
site changes mostly sizes the kernel reads as constants; the families' own checks
(test_library_families) compile every option pairwise at their ragged check keys too.
Each arch's variants are one source, built once: one NVRTC call per arch.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from emmy.backend.emit_cuda import CudaProgram, KernelInfo
from emmy.backend.nvrtc import compile_cuda
from emmy.backend.occupancy import devices_of, occupancy
from emmy.base.problem_key import parse_key
from emmy.compiler import Variant, compile_sites
from emmy.dsl.library import declaration, declarations
from emmy.sites.fork_space import ForkSpace

SITES = Path(__file__).parent / "data" / "recipe-site-keys.json"
TARGET = "nvidia-h200-sm90"


def recipe_sites() -> dict[str, list[str]]:
    """The kernel families of the recipes' sites and each family's keys, sorted."""
    pinned = json.loads(SITES.read_text())
    sites = {
        (family_name, key)
        for case, listed in pinned.items()
        if case.endswith(f":{TARGET}")
        for family_name, key in listed
    }
    kernels = declarations()
    by_family: dict[str, list[str]] = {}
    for family_name, key in sorted(sites):
        if family_name in kernels:
            by_family.setdefault(family_name, []).append(key)
    return by_family


#: the archs compiled for, each taking its share of the cover
ARCHS = ("sm_80", "sm_90")


@cache
def program(arch: str) -> CudaProgram:
    """One source with a kernel per variant of `arch`'s share: each family's pairwise cover
    over its sites, its forks and the archs together (every site once, every option and
    every pair of options at some site, every option on each arch)."""
    variants = []
    for family_name, keys in recipe_sites().items():
        parsed = [parse_key(k) for k in keys]
        chosen = ForkSpace.of(declaration(family_name)).pairwise(
            parsed * len(ARCHS),
            key_labels=[index for _ in ARCHS for index in range(len(parsed))],
            key_forks=[{"arch": each} for each in ARCHS for _ in parsed],
        )
        for n, (at, config) in enumerate(chosen):
            site, on = at % len(parsed), ARCHS[at // len(parsed)]
            if on == arch:
                variants.append(
                    Variant(f"{family_name}_s{site}_{n}", family_name, parsed[site], config)
                )
    return compile_sites(variants)


def describe(info: KernelInfo, arch: str) -> str:
    config = " ".join(f"{k}={v}" for k, v in info.config.items())
    return f"{info.site.family} [{info.site.key}] {config} at {arch}"


@pytest.mark.parametrize("arch", ARCHS)
def test_every_option_of_the_recipes_sites_fits_without_spilling(arch: str) -> None:
    found = program(arch)
    devices = devices_of(arch)
    assert devices, f"no {arch} device in the occupancy table"
    resources = compile_cuda(found.source, arch).resources
    failures = []
    for name, variant in found.kernels.items():
        used = resources.get(name)
        where = describe(variant, arch)
        if used is None:
            failures.append(f"{where}: ptxas reported no resources for {name}")
            continue
        if used.spill_stores or used.spill_loads:
            failures.append(
                f"{where}: spills {used.spill_stores} B stored, {used.spill_loads} B loaded"
                f" at {used.registers} registers"
            )
        for device in devices:
            fit = occupancy(
                device, variant.block, used.registers, used.shared_static + variant.smem
            )
            if not fit.blocks_per_sm:
                failures.append(f"{where}: zero occupancy on {device.identity}: {fit.reason}")
    assert not failures, (
        f"{len(failures)} failures in {len(found.kernels)} variants:\n" + "\n".join(failures[:20])
    )
