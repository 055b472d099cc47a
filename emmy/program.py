"""A compiled program: emitted source and cubin, kernels with their launch geometry and
decisions, and the host's launch plan over named buffers: the inputs, the constants,
the outputs, and one arena in which temporaries whose lifetimes do not overlap share bytes.

This module imports neither xDSL nor torch, so a compile that finds its program in the
cache (emmy.program_cache) starts fast.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from emmy.base import dtypes
from emmy.base.device_records import (
    ARENA,
    BufferArg,
    Call,
    FallbackEntry,
    FallbackEnum,
    FallbackTensor,
    FallbackValue,
    HostCall,
    Launch,
    Step,
    TensorSpec,
    TorchFallback,
    nbytes,
)
from emmy.base.errors import EmmyError, KernelLaunchError
from emmy.base.problem_key import SiteRef
from emmy.recall.query import Config


class Runner(Protocol):
    """What `Program.run` needs of a device (emmy.runtime.device.Device, which sits above
    the program in the layers)."""

    def run(
        self, source: str, launches: Sequence[Step], buffers: dict[str, np.ndarray], **options
    ) -> None: ...


@dataclass(frozen=True)
class KernelInfo:
    """What the host needs to launch one emitted kernel."""

    name: str
    site: SiteRef
    config: Config
    arg_names: tuple[str, ...]
    arg_dtypes: tuple[str, ...]
    grid: int
    block: int
    smem: int

    def to_json(self) -> dict[str, object]:
        """As a report lists it, the site's family and key as text."""
        return {
            "name": self.name,
            **site_json(self.site),
            "config": self.config,
            "arg_names": self.arg_names,
            "arg_dtypes": self.arg_dtypes,
            "grid": self.grid,
            "block": self.block,
            "smem": self.smem,
        }


def site_json(site: SiteRef) -> dict[str, str]:
    """A site as a report or a campaign file writes it: its family and key as text."""
    return {"family": site.family, "key": str(site.key)}


#: what an oracle recorded of a decision, as it recorded it: JSON-like values by name, of
#: the fields each oracle has its own (emmy.recall.oracles), so of no one type
Evidence = dict[str, Any]


@dataclass(frozen=True)
class SiteProvenance:
    """How a site's config was decided: each fork's source ("pin", or the oracle that
    decided the site), and the decision's oracle, evidence and runner-up (None where no
    oracle decided: forks resolved by hand)."""

    forks: dict[str, str]
    oracle: str | None = None
    evidence: Evidence | None = None
    runner_up: Evidence | None = None

    def to_json(self) -> dict[str, object]:
        if self.oracle is None:
            return {"forks": self.forks}
        return {
            "forks": self.forks,
            "oracle": self.oracle,
            "evidence": self.evidence,
            "runner_up": self.runner_up,
        }


#: a tensor of a path's call: its shape and storage type's name
PathTensor = tuple[tuple[int, ...], str]


@dataclass(frozen=True)
class PathCall:
    """One kernel call of an option of a host-level choice: its site and config, and its
    tensors, as a bench runs it alone."""

    site: SiteRef
    config: Config
    inputs: tuple[PathTensor, ...]
    outputs: tuple[PathTensor, ...]

    def to_json(self) -> dict[str, object]:
        # keys in sorted order, as the report and a campaign file's `paths` have always had them
        return {
            "config": self.config,
            "family": self.site.family,
            "inputs": [[list(shape), dtype] for shape, dtype in self.inputs],
            "key": str(self.site.key),
            "outputs": [[list(shape), dtype] for shape, dtype in self.outputs],
        }

    @classmethod
    def from_json(cls, record: Mapping) -> PathCall:
        def tensors(kind: str) -> tuple[PathTensor, ...]:
            return tuple((tuple(shape), dtype) for shape, dtype in record[kind])

        return cls(
            SiteRef.parse(record["family"], record["key"]),
            dict(record["config"]),
            tensors("inputs"),
            tensors("outputs"),
        )


@dataclass(frozen=True)
class Choice:
    """A host-level choice (attention's fused or unfused path): its site, its chosen config,
    and the kernel calls of every option."""

    site: SiteRef
    config: Config
    paths: dict[str, tuple[PathCall, ...]]

    def paths_json(self) -> dict[str, list[dict[str, object]]]:
        return {option: [c.to_json() for c in calls] for option, calls in self.paths.items()}

    def to_json(self) -> dict[str, object]:
        return {**site_json(self.site), "config": self.config, "paths": self.paths_json()}


@dataclass
class Program:
    target: str
    source: str
    kernels: dict[str, KernelInfo]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    temporaries: list[TensorSpec]
    calls: list[Call]
    ir: str
    #: per decided site (kernels and choices alike)
    provenance: dict[str, SiteProvenance]
    #: host-level choices, by site
    choices: dict[str, Choice] = field(default_factory=dict)
    #: sites the device runs as host calls (the vendor library's matmul), by site name
    host_calls: dict[str, SiteRef] = field(default_factory=dict)
    #: the ops torch runs, emmy having no kernel for them, by call name
    fallbacks: dict[str, FallbackEntry] = field(default_factory=dict)
    #: where the graph's ops run (emmy.frontend.torch_fallback.Coverage's counts; the ops counted
    #: one FLOP per element by name under "per_element_ops"), {} if unknown
    coverage: dict[str, int | dict[str, int]] = field(default_factory=dict)
    constants: list[TensorSpec] = field(default_factory=list)
    #: the inputs the program writes in place (a mutated input: a KV cache), by name: the
    #: caller's own tensors are bound to them and see the writes; nothing is returned for them
    mutated_inputs: list[str] = field(default_factory=list)
    arena: dict[str, int] = field(default_factory=dict)
    arena_bytes: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    resources: dict[str, dict[str, int]] = field(default_factory=dict)
    cubin: bytes | None = None
    ptx: str | None = None
    regime: str | None = None
    #: what the compile's golden step did, one line per golden file in scope: the rows it
    #: imported into the tuning database, or that they were there (for --explain)
    golden_imports: list[str] = field(default_factory=list)

    def launches(self) -> list[Step]:
        launches: list[Step] = []
        for call in self.calls:
            if call.kernel in self.host_calls:
                launches.append(self.host_call(call))
                continue
            if call.kernel in self.fallbacks:
                launches.append(self.fallback_call(call))
                continue
            info = self.kernels[call.kernel]
            launches.append(
                Launch(
                    call.kernel,
                    (info.grid, 1, 1),
                    (info.block, 1, 1),
                    info.smem,
                    tuple(self.buffer_arg(b) for b in call.buffers),
                )
            )
        return launches

    def host_call(self, call: Call) -> HostCall:
        """The vendor library's operation of the call's site, at the shapes of its key."""
        args = tuple(self.buffer_arg(b) for b in call.buffers)
        return host_call_of(self.host_calls[call.kernel], args)

    def fallback_call(self, call: Call) -> TorchFallback:
        """A torch op on the call's buffers: its inputs, then its outputs."""
        entry = self.fallbacks[call.kernel]
        specs = {
            s.name: s for s in [*self.inputs, *self.constants, *self.temporaries, *self.outputs]
        }
        buffers = [specs[name] for name in call.buffers]
        return TorchFallback(
            tuple(self.buffer_arg(b) for b in call.buffers),
            tuple(b.shape for b in buffers),
            tuple(b.dtype for b in buffers),
            entry["target"],
            tuple(fallback_value(value) for value in entry["arguments"]),
            tuple((name, fallback_value(value)) for name, value in entry["kwargs"].items()),
            entry["inputs"],
        )

    def buffer_arg(self, name: str) -> BufferArg:
        if name in self.arena:
            return BufferArg(ARENA, self.arena[name])
        return BufferArg(name)

    def buffers(
        self, inputs: Sequence[np.ndarray], constants: Mapping[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """Input and constant arrays bound by name; outputs and the arena of temporaries
        poisoned with NaN."""
        if len(inputs) != len(self.inputs):
            raise EmmyError(f"the program takes {len(self.inputs)} input(s), got {len(inputs)}")
        constants = constants or {}
        missing = [spec.name for spec in self.constants if spec.name not in constants]
        if missing:
            raise EmmyError(f"the program needs the constant(s) {', '.join(missing[:3])}")
        bound = [
            *zip(self.inputs, inputs, strict=True),
            *((s, constants[s.name]) for s in self.constants),
        ]
        buffers: dict[str, np.ndarray] = {}
        for spec, array in bound:
            expected = np.dtype(dtypes.lookup(spec.dtype).numpy)
            if tuple(array.shape) != spec.shape or array.dtype != expected:
                raise EmmyError(
                    f"{spec.name} must be {spec.dtype}{list(spec.shape)}, got "
                    f"{array.dtype}{list(array.shape)}"
                )
            buffers[spec.name] = np.ascontiguousarray(array)
        for spec in self.outputs:
            buffers[spec.name] = poisoned(spec)
        for spec in self.temporaries:
            if spec.name not in self.arena:
                buffers[spec.name] = poisoned(spec)
        if self.arena:
            buffers[ARENA] = np.full(max(1, self.arena_bytes), 0xFF, dtype=np.uint8)  # as poisoned
        return buffers

    def run(
        self,
        device: Runner,
        inputs: Sequence[np.ndarray],
        constants: Mapping[str, np.ndarray] | None = None,
        **options,
    ) -> list[np.ndarray]:
        buffers = self.buffers(inputs, constants)
        try:
            device.run(self.source, self.launches(), buffers, **options)
        except KernelLaunchError as error:
            raise KernelLaunchError(self.naming_sites(str(error))) from None
        return [buffers[spec.name].reshape(spec.shape) for spec in self.outputs]

    def naming_sites(self, message: str) -> str:
        """A device's failure message with the family and key of each kernel it names
        (`kernel 'gather_3'`, as the emulator names the kernel that crashed)."""
        named = [
            f"{name} is {info.site}"
            for name, info in self.kernels.items()
            if f"'{name}'" in message
        ]
        return f"{message} ({'; '.join(named)})" if named else message

    def memory(self) -> dict[str, int]:
        """Device bytes of the plan: the arena that holds every temporary at its offset,
        beside the sum of the temporaries as if each had its own buffer."""

        def total(specs: list[TensorSpec]) -> int:
            return sum(nbytes(s) for s in specs)

        return {
            "inputs": total(self.inputs),
            "constants": total(self.constants),
            "outputs": total(self.outputs),
            "arena": self.arena_bytes,
            "temporaries_unshared": total(self.temporaries),
        }

    def report(self) -> dict:
        kernels = []
        for name, info in self.kernels.items():
            entry = info.to_json()
            provenance = self.provenance.get(name)
            entry["provenance"] = provenance.to_json() if provenance is not None else {}
            entry["resources"] = self.resources.get(name)
            kernels.append(entry)
        return {
            "target": self.target,
            "regime": self.regime,
            "kernels": kernels,
            "inputs": [asdict(s) for s in self.inputs],
            "outputs": [asdict(s) for s in self.outputs],
            "constants": len(self.constants),
            "calls": [asdict(c) for c in self.calls],
            "choices": {name: choice.to_json() for name, choice in self.choices.items()},
            "host_calls": {name: site_json(site) for name, site in self.host_calls.items()},
            "fallbacks": self.fallbacks,
            "mutated_inputs": self.mutated_inputs,
            "coverage": self.coverage,
            "memory_bytes": self.memory(),
            "timings_s": self.timings,
        }

    def write(self, directory: Path) -> list[Path]:
        directory.mkdir(parents=True, exist_ok=True)
        written = [directory / "kernels.cu", directory / "program.mlir", directory / "report.json"]
        written[0].write_text(self.source)
        written[1].write_text(self.ir)
        written[2].write_text(json.dumps(self.report(), indent=2) + "\n")
        if self.cubin is not None:
            (directory / "kernels.cubin").write_bytes(self.cubin)
            (directory / "kernels.ptx").write_text(self.ptx or "")
            written += [directory / "kernels.cubin", directory / "kernels.ptx"]
        return written


def compile_summary(program: Program) -> str:
    """One line of a compiled graph: its ops by where they run, its compile's stages."""
    stages = ", ".join(
        f"{k} {v * 1000:.0f} ms" for k, v in program.timings.items() if k != "nvrtc_cache_hit"
    )
    return f"compiled a graph for {program.target}: {coverage_line(program)}; {stages}"


def coverage_line(program: Program) -> str:
    """How many ops and what share of the FLOPs ran in emmy's kernels, and which fell back."""
    counts = program.coverage
    if not counts:
        return f"{len(program.kernels)} kernels, {len(program.fallbacks)} ops through torch"
    flops, native = counts["flops"], counts["native_flops"]
    assert isinstance(flops, int) and isinstance(native, int)
    share = 100.0 * native / flops if flops else 100.0
    line = (
        f"{counts['native_ops']} of {counts['ops']} ops in emmy kernels ({share:.1f}% of "
        f"{flops:,} FLOPs), {counts['folded_ops']} computed at compile time, "
        f"{len(program.fallbacks)} through torch"
    )
    fell_back: dict[str, int] = {}
    for entry in program.fallbacks.values():
        fell_back[entry["target"]] = fell_back.get(entry["target"], 0) + 1
    if fell_back:
        line += " (" + ", ".join(f"{op} x{n}" for op, n in sorted(fell_back.items())) + ")"
    return line


def per_element_line(program: Program) -> str:
    """The ops whose FLOPs were counted one per output element, no formula knowing better
    (elementwise ops; any other op here makes the FLOP share less than it seems)."""
    if not program.coverage:
        return "FLOPs not counted (the graph came as text)"
    counts = program.coverage.get("per_element_ops") or {}
    assert isinstance(counts, dict)
    if not counts:
        return "FLOPs by formula for every op"
    ops = ", ".join(f"{op} x{n}" for op, n in sorted(counts.items(), key=lambda c: -c[1]))
    return f"FLOPs one per output element (no formula): {ops}"


def host_call_of(site: SiteRef, args: tuple[BufferArg, ...]) -> HostCall:
    """The host call a site of a host-call family runs on `args`: its registry entry's."""
    # the registry loads xDSL and the kernel language (lark), which a program-cache hit,
    # running no host call, does not need
    from emmy.families.family import HostCallFamily
    from emmy.families.registry import FAMILIES

    entry = FAMILIES.get(site.family)
    if not isinstance(entry, HostCallFamily):
        raise EmmyError(f"no host call runs family {site.family!r} (HostCallFamily.host_call)")
    return entry.host_call(site.values, args)


def fallback_value(value: object) -> FallbackValue:
    """A fallback's argument as the plan keeps it (emmy.dialects.fallback.to_json) as a
    TorchFallback holds it: a list as a tuple, a tensor or an enum as its record."""
    match value:
        case list() | tuple():
            return tuple(fallback_value(item) for item in value)
        case {"tensor": [operand, shape, strides, offset, dtype]}:
            return FallbackTensor(operand, tuple(shape), tuple(strides), offset, dtype)
        case {"enum": [kind, name]}:
            return FallbackEnum(kind, name)
        case None | bool() | int() | float() | str():
            return value
    raise EmmyError(f"a fallback's argument {value!r} is none the launch plan writes")


def poisoned(spec: TensorSpec) -> np.ndarray:
    """A buffer of all-ones bits (NaN in every float type), so a missed element shows."""
    array = np.empty(spec.shape, dtype=dtypes.lookup(spec.dtype).numpy)
    array.reshape(-1).view(np.uint8).fill(0xFF)
    return array
