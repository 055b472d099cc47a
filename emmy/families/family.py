"""A family's entry in the registry: what lowering, the bench, the checks, golden files
and the prior read of it. References and check inputs need torch: they import it when
called, so that the registry (what lowering reads) imports without it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, NamedTuple

from xdsl.ir import Operation, SSAValue

from emmy.base import dtypes
from emmy.base.device_records import BufferArg, HostCall
from emmy.base.problem_key import ProblemKey

if TYPE_CHECKING:
    import torch

    from emmy.dsl.keys import KeyValue

#: storage types a family's checks run in unless it names its own
FLOATS = dtypes.FLOAT_NAMES


class Fuses(StrEnum):
    """The elementwise chains fuse-graph puts into a family's kernel."""

    NOTHING = "nothing"
    #: the chain that alone reads its result (a matmul's epilogue)
    EPILOGUE = "epilogue"
    #: the chain computing its first operand, and the chain that alone reads its result
    #: (a row kernel: softmax, the norms)
    PROLOGUE_AND_EPILOGUE = "prologue_and_epilogue"


class Site(NamedTuple):
    """A site of `family` at `key`, called on `inputs` (in the order of its parameters)."""

    family: str
    key: dict[str, int | str]
    inputs: list[SSAValue]


class WritesOver(StrEnum):
    """Which input a family's kernel may write its result over, each element read and
    written at one place by one thread: a mutated input's new value computed by it goes
    straight into the input's buffer (else into a temporary, copied into the input)."""

    NOTHING = "nothing"
    #: any input it reads (index_copy)
    INPUT = "input"
    #: an input of its output's shape, read element by element by the thread that writes the
    #: same element of the output (elementwise: a counter's `add_`)
    SAME_SHAPE_INPUT = "same_shape_input"


@dataclass(frozen=True)
class Fusion:
    """The chains fuse-graph put around a kernel's op (inside one `graph.fused`): the root of
    the chain computing its first operand, the root of the chain reading its result, and
    whether the first operand is also written out (it has uses outside)."""

    prologue: Operation | None = None
    epilogue: Operation | None = None
    stores_input: bool = False


#: the site of a graph op, with the chains fused around it
SiteBuilder = Callable[[Any, Fusion], Site]
#: the expected output in float64 from a key and the input tensors (a tuple where the
#: kernel has several outputs, in the order of its out parameters)
Reference = Callable[[dict, list["torch.Tensor"]], Any]
#: the keys a check runs, for one storage type
CheckKeys = Callable[[str], list[dict]]
#: random inputs of one key: (key, storage type, generator)
CheckInputs = Callable[[dict, str, "torch.Generator"], list["torch.Tensor"]]
#: a host-call family's step from its site's key and buffers (in the order of its inputs,
#: then its outputs): what the device runs and how it views each buffer
HostCallBuilder = Callable[[Mapping[str, int | str], tuple[BufferArg, ...]], HostCall]
#: one-site PyTorch expressions of the dataset's key grid, each with the pins of its compile
GridKeys = Callable[[], list[tuple[str, str]]]


def no_extra_atol(key: dict) -> float:
    return 0.0


def no_input_ranges(key: dict) -> dict[int, tuple[int, int]]:
    return {}


def key_int(key: Mapping[str, KeyValue], name: str) -> int:
    """The value of `name` in a typed key as an integer (a flag as 0 or 1)."""
    value = key[name]
    if not isinstance(value, int | str):
        raise TypeError(f"the key's {name} is {value}, not an integer")
    return int(value)


@dataclass(frozen=True)
class OpSites:
    """The graph ops whose sites a family builds, and `site`, the builder of each one's (it
    may pick a sibling family, as matmul picks matmul_tc where tensor cores apply)."""

    ops: tuple[type[Operation], ...]
    site: SiteBuilder


@dataclass(frozen=True, kw_only=True)
class MeasuredFamily:
    """What a check and a bench read of a family whose sites compute outputs (a kernel or a
    host call): its float64 reference, the tolerance, and the inputs a bench draws."""

    name: str = field(kw_only=False)
    reference: Reference
    #: the graph ops whose sites it builds; none where its sites come from another family's
    #: builder or from a pass (transpose, split_sum, matmul_tc)
    lowers: OpSites | None = None
    #: absolute error a check allows beyond the storage type's rounding (f32 accumulation
    #: that grows with a key's depth or row length)
    extra_atol: Callable[[dict], float] = no_extra_atol
    #: the integer inputs (by index among the inputs) whose values must lie in a range,
    #: lowest and highest included, at a key (a cache's length): a bench's random inputs
    #: draw them there; other integers are indices a kernel clamps
    input_ranges: Callable[[dict], dict[int, tuple[int, int]]] = no_input_ranges
    #: the inputs a bench recomputes from its random others at a key, where the kernel's
    #: contract ties them (an attention backward's statistics are its q and k's): the
    #: inputs, those replaced
    derive_inputs: Callable[[dict, list[torch.Tensor]], list[torch.Tensor]] | None = None


@dataclass(frozen=True, kw_only=True)
class KernelFamily(MeasuredFamily):
    """A `.emmy` kernel the compiler emits: `emmy/families/<name>/<name>.emmy`'s kernel
    `name`, checked on every option at its check keys."""

    check_keys: CheckKeys
    check_inputs: CheckInputs
    check_dtypes: tuple[str, ...] = FLOATS
    fuses: Fuses = Fuses.NOTHING
    #: which input its kernel may write its result over (a mutated input's new value)
    writes_over: WritesOver = WritesOver.NOTHING
    #: its keys in the prior's dataset (`emmy campaign plan --grid`): from tiny shapes to
    #: what the emulator runs in well under a second, ragged and round
    grid: GridKeys | None = None
    #: the name of its group in the grid (`--family`) where not the family's
    grid_group: str = ""


@dataclass(frozen=True, kw_only=True)
class HostCallFamily(MeasuredFamily):
    """A site the device runs as a host call (the vendor library): no emitted kernel."""

    #: its key text from a site's key (a kernel family's is its declaration's canonical text)
    host_key: Callable[[dict], ProblemKey]
    #: its step at a key (emmy.program.Program.launches, the bench)
    host_call: HostCallBuilder
    #: what runs its sites, as --explain says it
    runs_by: str


@dataclass(frozen=True, kw_only=True)
class ChoiceFamily:
    """A host-level choice between paths: a site with one fork and no kernel of its own."""

    name: str = field(kw_only=False)
    #: its forks and their options
    forks: Mapping[str, tuple[str, ...]]
    #: per device class (emmy.base.identity.DEVICE_CLASSES), the options a site with no evidence
    #: takes before the declared default (the target-default oracle): on a GPU, the vendor
    #: library, which a fresh machine must never start below
    target_defaults: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


#: one family of the registry: the type checker knows each kind's parts
Family = KernelFamily | HostCallFamily | ChoiceFamily
