"""The vendor library's product (cuBLAS through torch on a GPU, the CPU's BLAS on the
emulator), a host call with no kernel; offer-paths offers it, its epilogue a kernel of
its own. It is checked as a matmul without epilogue."""

from __future__ import annotations

from collections.abc import Mapping

from emmy.base.device_records import BufferArg, VendorMatmul
from emmy.base.problem_key import KeyValue, ProblemKey
from emmy.families import matmul
from emmy.families.family import HostCallFamily


def reference(key: dict, inputs: list):
    return matmul.reference({**key, "epilogue": "acc", "inputs": ""}, inputs)


#: a site with no kernel: the product by the vendor library, run by the device as a host call
NAME = "vendor_matmul"
KEY = ("batch", "m", "n", "k", "b_batch", "layout", "T")


def vendor_key(key: Mapping[str, KeyValue]) -> ProblemKey:
    """The vendor product's key: the matmul's, without its epilogue (A's layout named only
    where A is stored [k, m])."""
    key = {"layout": "kn", **key}
    names = (*KEY, "a_layout") if matmul.transposes_a(key) else KEY
    return ProblemKey.of((name, key[name]) for name in names)


def host_call(key: Mapping[str, int | str], args: tuple[BufferArg, ...]) -> VendorMatmul:
    """The vendor product at a key on buffers a, b, c: b [n, k] where the layout is nk, a
    [k, m] where a_layout is km."""
    batch, m, n, k, b_batch = (int(key[name]) for name in ("batch", "m", "n", "k", "b_batch"))
    transpose_b = key["layout"] == "nk"
    b_shape = (b_batch, n, k) if transpose_b else (b_batch, k, n)
    shapes = (matmul.a_shape(key), b_shape, (batch, m, n))
    return VendorMatmul(args, shapes, str(key["T"]), transpose_b, matmul.transposes_a(key))


FAMILY = HostCallFamily(
    NAME,
    reference=reference,
    extra_atol=matmul.depth_atol,
    host_key=vendor_key,
    host_call=host_call,
    runs_by="the vendor library through torch (cuBLAS on a GPU, the CPU's BLAS on emu)",
)
