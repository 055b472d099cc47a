"""The vendor library's product (cuBLAS through torch on a GPU, the CPU's BLAS on the
emulator), a host call with no kernel; matmul-paths offers it, its epilogue a kernel of
its own. It is checked as a matmul without epilogue."""

from __future__ import annotations

from collections.abc import Mapping

from emmy.dsl.keys import KeyValue, format_key
from emmy.families import matmul
from emmy.families.family import Family, FamilyKind


def reference(key: dict, inputs: list):
    return matmul.reference({**key, "epilogue": "acc", "inputs": ""}, inputs)


#: a site with no kernel: the product by the vendor library, run by the device as a host call
NAME = "vendor_matmul"
KEY = ("batch", "m", "n", "k", "b_batch", "layout", "T")


def vendor_key(key: Mapping[str, KeyValue]) -> str:
    """The vendor product's key: the matmul's, without its epilogue."""
    return format_key(KEY, {"layout": "kn", **key})


FAMILY = Family(
    NAME,
    FamilyKind.HOST_CALL,
    reference=reference,
    extra_atol=matmul.depth_atol,
    host_key=vendor_key,
    runs_by="the vendor library through torch (cuBLAS on a GPU, the CPU's BLAS on emu)",
)
