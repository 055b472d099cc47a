"""The vendor library's convolution weight gradient (cuDNN's through torch on a GPU, the
CPU's on the emulator), a host call with no kernel; offer-paths offers it beside
conv_weight. It is checked as conv_weight is."""

from __future__ import annotations

from collections.abc import Mapping

from emmy.base.device_records import BufferArg, VendorConvWeight
from emmy.base.problem_key import KeyValue, ProblemKey
from emmy.families import conv_weight
from emmy.families.family import HostCallFamily

NAME = "vendor_conv_weight"


def vendor_key(key: Mapping[str, KeyValue]) -> ProblemKey:
    """The weight gradient's key, as conv_weight's."""
    return ProblemKey.of((name, key[name]) for name in conv_weight.KEY)


def host_call(key: Mapping[str, int | str], args: tuple[BufferArg, ...]) -> VendorConvWeight:
    """torch's convolution weight gradient at a key on buffers dy, x, dw."""
    size = {name: int(key[name]) for name in ("batch", "cin", "h", "w", "cout", "oh", "ow")}
    shapes = (
        (size["batch"], size["cout"], size["oh"], size["ow"]),
        (size["batch"], size["cin"], size["h"], size["w"]),
        (size["cout"], int(key["cpg"]), int(key["kh"]), int(key["kw"])),
    )
    return VendorConvWeight(
        args,
        shapes,
        str(key["T"]),
        stride=(int(key["sh"]), int(key["sw"])),
        padding=(int(key["ph"]), int(key["pw"])),
        dilation=(int(key["dh"]), int(key["dw"])),
        groups=int(key["groups"]),
    )


FAMILY = HostCallFamily(
    NAME,
    reference=conv_weight.reference,
    extra_atol=conv_weight.depth_atol,
    host_key=vendor_key,
    host_call=host_call,
    runs_by="the vendor library through torch (cuDNN on a GPU, the CPU's on emu)",
)
