"""The vendor library's convolution, or transposed convolution, (cuDNN through torch on a GPU, the CPU's convolution on
the emulator) with its bias, a host call with no kernel; offer-paths offers it, its epilogue
a kernel of its own. It is checked as a convolution without epilogue."""

from __future__ import annotations

from collections.abc import Mapping

from emmy.base.device_records import BufferArg, VendorConv
from emmy.base.problem_key import KeyValue, ProblemKey
from emmy.families import conv
from emmy.families.family import HostCallFamily, key_int


def reference(key: dict, inputs: list):
    return conv.reference({**key, "epilogue": "acc", "inputs": ""}, inputs)


#: a site with no kernel: the convolution by the vendor library, a host call
NAME = "vendor_conv"
#: the vendor convolution's key: the convolution's, without its epilogue
KEY = (
    "batch", "cin", "h", "w", "cout", "oh", "ow", "kh", "kw", "sh", "sw", "ph", "pw",
    "dh", "dw", "groups", "cpg", "kdim", "spatial", "has_bias", "T",
)  # fmt: skip


def vendor_key(key: Mapping[str, KeyValue]) -> ProblemKey:
    """The convolution's key less its epilogue (`transposed` only where it is)."""
    transposed = [("transposed", 1)] if "transposed" in key and key_int(key, "transposed") else []
    return ProblemKey.of([*((name, key[name]) for name in KEY), *transposed])


def host_call(key: Mapping[str, int | str], args: tuple[BufferArg, ...]) -> VendorConv:
    """torch's 2-D convolution, or transposed convolution, at a key on buffers x, filters,
    [bias], y."""
    size = {name: int(key[name]) for name in ("batch", "cin", "h", "w", "cout", "oh", "ow")}
    transposed = bool(int(key.get("transposed", 0)))
    filter_shape = (
        (size["cin"], size["cout"] // int(key["groups"]), int(key["kh"]), int(key["kw"]))
        if transposed
        else (size["cout"], int(key["cpg"]), int(key["kh"]), int(key["kw"]))
    )
    shapes = [(size["batch"], size["cin"], size["h"], size["w"]), filter_shape]
    shapes += [(size["cout"],)] if int(key["has_bias"]) else []
    shapes += [(size["batch"], size["cout"], size["oh"], size["ow"])]
    return VendorConv(
        args,
        tuple(shapes),
        str(key["T"]),
        stride=(int(key["sh"]), int(key["sw"])),
        padding=(int(key["ph"]), int(key["pw"])),
        dilation=(int(key["dh"]), int(key["dw"])),
        groups=int(key["groups"]),
        output_padding=conv.output_padding(key) if transposed else None,
    )


FAMILY = HostCallFamily(
    NAME,
    reference=reference,
    extra_atol=conv.depth_atol,
    host_key=vendor_key,
    host_call=host_call,
    runs_by="the vendor library through torch (cuDNN on a GPU, the CPU's convolution on emu)",
)
