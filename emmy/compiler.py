"""The compile pipeline: emmy.graph → sites → resolved forks → CUDA → a runnable program.

    lower-graph → resolve-forks → specialize-forks → emit-cuda → NVRTC (for a GPU target)

A `Program` keeps the emitted source, the kernels with their launch geometry and
decisions, the host's call list over named buffers, and the time each stage took.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType

from emmy.backend.emit_cuda import CudaProgram, KernelInfo, emit_module
from emmy.dialects import fork, kernel
from emmy.dialects.kernel import dtype_name
from emmy.errors import EmmyError
from emmy.passes.lower_graph import LowerGraph
from emmy.passes.resolve_forks import ResolveForks
from emmy.passes.specialize_forks import SpecializeForks
from emmy.runtime.device import BufferArg, Device, Launch
from emmy.runtime.identity import EMU, arch_of

NUMPY_STORAGE = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str  # f32 | f16 | bf16


@dataclass(frozen=True)
class Call:
    kernel: str
    buffers: tuple[str, ...]  # one per kernel parameter, in order


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
    provenance: dict[str, dict]
    timings: dict[str, float] = field(default_factory=dict)
    resources: dict[str, dict[str, int]] = field(default_factory=dict)
    cubin: bytes | None = None
    ptx: str | None = None
    regime: str | None = None

    def launches(self) -> list[Launch]:
        launches = []
        for call in self.calls:
            info = self.kernels[call.kernel]
            launches.append(
                Launch(
                    call.kernel,
                    (info.grid, 1, 1),
                    (info.block, 1, 1),
                    info.smem,
                    tuple(BufferArg(b) for b in call.buffers),
                )
            )
        return launches

    def buffers(self, inputs: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        """Input arrays bound by name, outputs and temporaries poisoned with NaN."""
        if len(inputs) != len(self.inputs):
            raise EmmyError(f"the program takes {len(self.inputs)} input(s), got {len(inputs)}")
        buffers: dict[str, np.ndarray] = {}
        for spec, array in zip(self.inputs, inputs, strict=True):
            expected = np.dtype(NUMPY_STORAGE[spec.dtype])
            if tuple(array.shape) != spec.shape or array.dtype != expected:
                raise EmmyError(
                    f"input {spec.name} must be {spec.dtype}{list(spec.shape)}, got "
                    f"{array.dtype}{list(array.shape)}"
                )
            buffers[spec.name] = np.ascontiguousarray(array)
        for spec in [*self.outputs, *self.temporaries]:
            buffers[spec.name] = poisoned(spec)
        return buffers

    def run(self, device: Device, inputs: Sequence[np.ndarray], **options) -> list[np.ndarray]:
        buffers = self.buffers(inputs)
        device.run(self.source, self.launches(), buffers, **options)
        return [buffers[spec.name] for spec in self.outputs]

    def report(self) -> dict:
        kernels = []
        for name, info in self.kernels.items():
            entry = asdict(info)
            entry["provenance"] = self.provenance.get(name, {})
            entry["resources"] = self.resources.get(name)
            kernels.append(entry)
        return {
            "target": self.target,
            "regime": self.regime,
            "kernels": kernels,
            "inputs": [asdict(s) for s in self.inputs],
            "outputs": [asdict(s) for s in self.outputs],
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


def poisoned(spec: TensorSpec) -> np.ndarray:
    """A buffer of all-ones bits (NaN in every float type), so a missed element shows."""
    array = np.empty(spec.shape, dtype=NUMPY_STORAGE[spec.dtype])
    array.reshape(-1).view(np.uint8).fill(0xFF)
    return array


def _spec(name: str, typ: TensorType) -> TensorSpec:
    return TensorSpec(name, tuple(typ.get_shape()), dtype_name(typ.element_type))


def host_plan(
    module: ModuleOp,
) -> tuple[list[TensorSpec], list[TensorSpec], list[TensorSpec], list[Call]]:
    """Names every tensor of `@main` and lists its kernel calls in order."""
    main = next((op for op in module.ops if isinstance(op, func.FuncOp)), None)
    if main is None:
        raise EmmyError("the module has no function to run")
    names: dict = {}
    inputs = []
    for i, arg in enumerate(main.body.block.args):
        names[arg] = f"in{i}"
        inputs.append(_spec(f"in{i}", arg.type))
    temporaries, calls = [], []
    for op in main.body.block.ops:
        if isinstance(op, kernel.CallOp):
            for result in op.outputs:
                names[result] = f"t{len(names)}"
                temporaries.append(_spec(names[result], result.type))
            buffers = tuple(names[v] for v in [*op.inputs, *op.outputs])
            calls.append(Call(op.site.root_reference.data, buffers))
        elif isinstance(op, func.ReturnOp):
            returned = [names[v] for v in op.arguments]
        else:
            raise EmmyError(f"the host function still has {op.name} after lowering")
    outputs = [t for t in temporaries if t.name in returned]
    temporaries = [t for t in temporaries if t.name not in returned]
    if len(outputs) != len(returned):
        raise EmmyError("a returned value is not computed by a kernel (an input returned as is?)")
    return inputs, outputs, temporaries, calls


def _provenance(module: ModuleOp) -> dict[str, dict]:
    """Per site: the source of each fork, and the decision's oracle, evidence, runner-up."""
    result = {}
    for site in module.ops:
        if not isinstance(site, fork.SiteOp) or "provenance" not in site.attributes:
            continue
        forks = {
            name: str(value.data["oracle"].data)
            for name, value in site.attributes["provenance"].data.items()
        }
        entry: dict = {"forks": forks}
        decision = site.attributes.get("decision")
        if decision is not None:
            entry["oracle"] = decision.data["oracle"].data
            entry["evidence"] = json.loads(decision.data["evidence"].data)
            entry["runner_up"] = json.loads(decision.data["runner_up"].data)
        result[site.sym_name.data] = entry
    return result


def compile_graph(
    module: ModuleOp,
    *,
    target: str = EMU,
    pins: str = "",
    flags: Sequence[str] = (),
    oracles: str = "",
    db: str = "",
    golden: str = "",
) -> Program:
    """Compiles a graph module for a device identity (a GPU slug, or "emu"); forks are
    decided by the oracle stack (`oracles`, default pins→golden→db→prior→default) from
    the tuning database `db` ("" the default, "none" none) and golden files in scope."""
    timings: dict[str, float] = {}
    start = time.perf_counter()
    ctx = Context()
    resolve = ResolveForks(pin=pins, target=target, oracles=oracles, db=db, golden=golden)
    for compile_pass in (LowerGraph(), resolve, SpecializeForks()):
        compile_pass.apply(ctx, module)
    module.verify()
    cuda: CudaProgram = emit_module(module)
    inputs, outputs, temporaries, calls = host_plan(module)
    timings["passes"] = time.perf_counter() - start
    program = Program(
        target=target,
        source=cuda.source,
        kernels=cuda.kernels,
        inputs=inputs,
        outputs=outputs,
        temporaries=temporaries,
        calls=calls,
        ir=str(module),
        provenance=_provenance(module),
        timings=timings,
    )
    if target == EMU:
        from emmy.runtime.emu import compile_emu

        start = time.perf_counter()
        compile_emu(cuda.source)
        timings["g++"] = time.perf_counter() - start
    else:
        from emmy.backend.nvrtc import compile_cuda

        start = time.perf_counter()
        compiled = compile_cuda(cuda.source, arch_of(target), flags)
        timings["nvrtc"] = time.perf_counter() - start
        timings["nvrtc_cache_hit"] = float(compiled.cache_hit)
        program.cubin, program.ptx = compiled.cubin, compiled.ptx
        program.regime = compiled.regime.id
        program.resources = {name: asdict(r) for name, r in compiled.resources.items()}
    return program


def compile_variants(
    family_name: str,
    key: dict[str, int | str],
    configs: Sequence[dict[str, int | str]],
    prefix: str | None = None,
) -> CudaProgram:
    """One source holding a kernel per config of one site (`<prefix><i>`, by default
    `<family>_<i>`), so many options compile in a single compiler invocation."""
    from xdsl.dialects.builtin import StringAttr

    from emmy.dsl.library import family, instantiate

    decl = family(family_name)
    sites = []
    for i, config in enumerate(configs):
        site = instantiate(decl, key, f"{prefix or family_name + '_'}{i}")
        for knob in site.knobs():
            knob.resolve(config[knob.knob_name.data], {"oracle": StringAttr("forced")})
        sites.append(site)
    module = ModuleOp(sites)
    SpecializeForks().apply(Context(), module)
    return emit_module(module)
