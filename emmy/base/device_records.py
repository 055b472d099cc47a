"""The records a launch plan and a device exchange: kernel launches and their arguments, host
calls, timings, and the device's own counts. Plain data, below every driver and the runtime."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, TypedDict

from emmy.base import dtypes

#: the buffer that holds every temporary of a program, each at its offset
ARENA = "arena"
#: offsets in the arena are multiples of this, as cudaMalloc aligns buffers
ARENA_ALIGNMENT = 256


@dataclass(frozen=True)
class TensorSpec:
    """A tensor of a launch plan: its name, shape and storage type."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # a storage type's name (emmy.base.dtypes)


@dataclass(frozen=True)
class Call:
    """A call of a launch plan: a site's kernel or host call, or an op torch runs."""

    kernel: str
    buffers: tuple[str, ...]  # one per kernel parameter, in order


def nbytes(spec: TensorSpec) -> int:
    return math.prod(spec.shape) * dtypes.lookup(spec.dtype).bytes


@dataclass(frozen=True)
class BufferArg:
    """A kernel parameter bound to the named buffer, `offset` bytes in (passed as a device
    pointer): a launch plan places its temporaries at offsets of one arena."""

    name: str
    offset: int = 0


@dataclass(frozen=True)
class ScalarArg:
    """A kernel parameter passed by value; dtype is one of "i32", "i64", "f32"."""

    dtype: str
    value: int | float


Arg = BufferArg | ScalarArg


@dataclass(frozen=True)
class Launch:
    """One kernel launch: the kernel's symbol, its geometry and its arguments in order."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    args: tuple[Arg, ...]


@dataclass(frozen=True)
class VendorMatmul:
    """The vendor library's matmul (cuBLAS on a GPU, the CPU's BLAS on the emulator),
    c = a · b, or a · bᵀ with `transpose_b`, aᵀ for a with `transpose_a`; b is shared by
    the batch when it has one matrix. `args` are a, b, c; `shapes` their shapes; `dtype`
    their storage type."""

    args: tuple[BufferArg, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtype: str
    transpose_b: bool = False
    transpose_a: bool = False

    #: the step's name in a failure message
    kernel: ClassVar[str] = "vendor matmul"


@dataclass(frozen=True)
class VendorAttention:
    """torch's scaled_dot_product_attention (FlashAttention-2, cuDNN or the memory-efficient
    kernel on a GPU), o = softmax(q kᵀ · scale [+ mask] [causal]) v: `args` are q, k, v,
    [mask], o, `shapes` theirs as SDPA takes them ([groups, heads, len, d]), `dtype` their
    storage type."""

    args: tuple[BufferArg, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtype: str
    causal: bool
    scale: float

    kernel: ClassVar[str] = "vendor attention"


@dataclass(frozen=True)
class VendorAttentionBackward:
    """torch's scaled_dot_product_attention backward (FlashAttention-2, cuDNN or the
    memory-efficient kernel on a GPU), the gradients of q, k and v from the output's: `args`
    are q, k, v, dO, [mask], dq, dk, dv, `shapes` theirs as SDPA takes them ([groups,
    heads, len, d]), `dtype` their storage type."""

    args: tuple[BufferArg, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtype: str
    causal: bool
    scale: float

    kernel: ClassVar[str] = "vendor attention backward"


@dataclass(frozen=True)
class VendorConv:
    """torch's 2-D convolution (cuDNN on a GPU) of x, filters and [bias] (`args`, then y)
    into y, in torch's shapes, with torch's geometry (height, width pairs); a transposed
    convolution where `output_padding` is given."""

    args: tuple[BufferArg, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtype: str
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    groups: int
    output_padding: tuple[int, int] | None = None

    kernel: ClassVar[str] = "vendor conv"


@dataclass(frozen=True)
class VendorConvWeight:
    """torch's 2-D convolution weight gradient (cuDNN's on a GPU) from dy and x (`args`,
    then dw) into dw, in torch's shapes, with the convolution's geometry (height, width
    pairs)."""

    args: tuple[BufferArg, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtype: str
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    groups: int

    kernel: ClassVar[str] = "vendor conv weight gradient"


@dataclass(frozen=True)
class FallbackTensor:
    """A tensor argument of a fallback: a strided view of its input `operand`, `offset`
    elements from the input's start; `dtype` "bool" marks a mask stored as bytes."""

    operand: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    dtype: str


@dataclass(frozen=True)
class FallbackEnum:
    """A torch enum argument of a fallback: `kind` "dtype", "layout", "memory_format" or
    "device" (the device the call runs on, whatever its name), `name` its value's."""

    kind: str
    name: str


#: an argument of a fallback's torch op: a number, a string or None as itself, a tensor, an
#: enum, or a list of arguments (a tuple here, so that a step can be hashed)
FallbackValue = (
    None | bool | int | float | str | FallbackTensor | FallbackEnum | tuple["FallbackValue", ...]
)


class FallbackEntry(TypedDict):
    """An op torch runs (emmy.dialects.host.FallbackAttr.entry): its target, its arguments as
    emmy.dialects.fallback.to_json writes them, how many of its buffers are inputs, why
    it fell back and where the model calls it."""

    target: str
    arguments: list[object]
    kwargs: dict[str, object]
    inputs: int
    reason: str
    source: str


@dataclass(frozen=True)
class TorchFallback:
    """An op emmy has no kernel for, run by torch (emmy.program.Program.fallback_call):
    `args` its input buffers then its output buffers, `shapes` and `dtypes` theirs; the op
    `target` (`aten.cumsum.default`) called with `arguments` and `kwargs`, which name the
    first `inputs` buffers."""

    args: tuple[BufferArg, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    target: str
    arguments: tuple[FallbackValue, ...]
    kwargs: tuple[tuple[str, FallbackValue], ...]
    inputs: int

    @property
    def kernel(self) -> str:
        return f"torch {self.target}"


#: a step of a launch plan that the device runs through torch rather than as an emitted
#: kernel (emmy.runtime.vendor reads them): the vendor library's matmul, attention or
#: convolution, or a fallback
HostCall = (
    VendorMatmul
    | VendorAttention
    | VendorAttentionBackward
    | VendorConv
    | VendorConvWeight
    | TorchFallback
)


Step = Launch | HostCall


#: a window whose host enqueue time is at least this share of it is bounded by the host: the
#: device may have waited for launches, so the window measured Python, not the kernels
HOST_BOUND_SHARE = 0.5


@dataclass(frozen=True)
class Timing:
    """What a device's time() measured: seconds of one pass of the launch list, one per
    repetition, each the mean of `batch` passes run back to back inside one timed window
    (short kernels are batched until the window is long enough to time honestly, replayed
    from one captured graph where the steps allow); `host_seconds` beside each, the host's
    time to enqueue that window's passes, per pass."""

    seconds: tuple[float, ...]
    batch: int = 1
    host_seconds: tuple[float, ...] = ()
    #: whether the batch was replayed from a captured graph (else issued launch by launch)
    graphed: bool = False

    @property
    def host_bound(self) -> bool:
        """Whether the host's enqueueing, not the device, bounds the median window."""
        if not self.host_seconds or not self.seconds:
            return False
        device = sorted(self.seconds)[len(self.seconds) // 2]
        host = sorted(self.host_seconds)[len(self.host_seconds) // 2]
        return host >= HOST_BOUND_SHARE * device


@dataclass
class DeviceCounters:
    """What a device did, counted by the device itself, so that a test can check that a
    program's later calls allocate nothing and copy nothing to the host."""

    #: device memory the device allocated itself (arenas, workspaces, staging, graphs'
    #: static buffers), not outputs drawn from torch's caching allocator
    allocations: int = 0
    allocated_bytes: int = 0
    #: host-to-device copies (weights uploaded, a CPU tensor staged into device memory)
    uploads: int = 0
    #: device-to-host copies
    host_copies: int = 0
    #: kernel launches issued (a graph replay counts its launches once, at capture)
    launches: int = 0
    #: graph replays of a program's launch list
    replays: int = 0
    #: requests to the emulator's runner process
    requests: int = 0
    #: emulator runner processes started
    runner_starts: int = 0
    #: device tensors copied because their address broke the kernels' alignment
    realigned: int = 0
