"""The vendor library's product (cuBLAS through torch on a GPU, the CPU's BLAS on the
emulator), a host call with no kernel; matmul-paths offers it, its epilogue a kernel of
its own. It is checked as a matmul without epilogue."""

from __future__ import annotations

from emmy.families import matmul
from emmy.families.family import Family, FamilyKind
from emmy.passes import matmul_paths


def reference(key: dict, inputs: list):
    return matmul.reference({**key, "epilogue": "acc", "inputs": ""}, inputs)


FAMILY = Family(
    matmul_paths.VENDOR_FAMILY,
    FamilyKind.HOST_CALL,
    reference=reference,
    extra_atol=matmul.depth_atol,
    host_key=matmul_paths.vendor_key,
    runs_by="the vendor library through torch (cuBLAS on a GPU, the CPU's BLAS on emu)",
)
