"""The vendor library's convolution (cuDNN through torch on a GPU, the CPU's convolution on
the emulator) with its bias, a host call with no kernel; conv-paths offers it, its epilogue
a kernel of its own. It is checked as a convolution without epilogue."""

from __future__ import annotations

from emmy.families import conv
from emmy.families.family import Family, FamilyKind
from emmy.passes import conv_paths


def reference(key: dict, inputs: list):
    return conv.reference({**key, "epilogue": "acc", "inputs": ""}, inputs)


FAMILY = Family(
    conv_paths.VENDOR_FAMILY,
    FamilyKind.HOST_CALL,
    reference=reference,
    extra_atol=conv.depth_atol,
    host_key=conv_paths.vendor_key,
    runs_by="the vendor library through torch (cuDNN on a GPU, the CPU's convolution on emu)",
)
