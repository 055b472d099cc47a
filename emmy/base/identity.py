"""Device identity: the one place that turns a device into the slug its choices are filed under.

A slug is the device name as the driver reports it, lowercased with every run of other
characters turned into '-', followed by `-sm<major><minor>`: ("NVIDIA H200", 9, 0) gives
"nvidia-h200-sm90". The emulator is "emu". The slug carries the arch so that a target can
be compiled for without the device being present.
"""

from __future__ import annotations

import re

from emmy.base.errors import EmmyError

EMU = "emu"

_SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*-sm(\d{2,3})")


def slug(name: str, major: int, minor: int) -> str:
    """The identity of a CUDA device from its name and compute capability."""
    base = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"
    return f"{base}-sm{major}{minor}"


def is_well_formed(identity: str) -> bool:
    """Whether `identity` is "emu" or a slug as `slug` makes them."""
    return identity == EMU or _SLUG.fullmatch(identity) is not None


#: the classes of device a target default is declared for (emmy.families' `target_defaults`)
DEVICE_CLASSES = ("emu", "gpu")


def device_class(identity: str) -> str:
    """ "emu" for the emulator, "gpu" for every CUDA device."""
    return "emu" if identity == EMU else "gpu"


def arch_of(identity: str) -> str:
    """The arch NVRTC compiles for on the device `identity`, e.g. "sm_90"."""
    if identity == EMU:
        raise EmmyError("the emulator 'emu' has no GPU arch: it compiles with g++, not NVRTC")
    m = _SLUG.fullmatch(identity)
    if m is None:
        raise EmmyError(
            f"device identity {identity!r} is malformed: expected a lowercase slug ending in"
            " '-sm<major><minor>', e.g. 'nvidia-h200-sm90'"
        )
    return f"sm_{m.group(1)}"


#: well-known targets (slug -> the name the driver reports), for --target help only:
#: any well-formed slug is accepted
KNOWN_TARGETS: dict[str, str] = {
    slug(name, major, minor): name
    for name, major, minor in (
        ("NVIDIA H200", 9, 0),
        ("NVIDIA H100 80GB HBM3", 9, 0),
        ("NVIDIA A100-SXM4-80GB", 8, 0),
        ("NVIDIA L4", 8, 9),
        ("NVIDIA L40S", 8, 9),
        ("NVIDIA GeForce RTX 4090", 8, 9),
        ("NVIDIA B200", 10, 0),
    )
}
