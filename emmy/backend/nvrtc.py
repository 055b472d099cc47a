"""NVRTC: compile emitted CUDA C++ to a cubin for one arch under one regime, with a disk cache.

The emmy headers (every file under INCLUDE_DIR) are handed to NVRTC in memory, so nothing
depends on include paths. ptxas always runs verbosely so that each kernel's registers,
spills and shared memory can be read back from the log (`CompiledCuda.resources`).

Results are cached under cache_dir()/nvrtc/<key>/, keyed by everything that can change the
cubin: the source, the header contents, the regime, the arch and the NVRTC version.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import cuda.bindings.nvrtc as nvrtc

from emmy.base.errors import KernelCompileError
from emmy.base.paths import INCLUDE_DIR, cache_dir
from emmy.base.regime import Regime, normalise_flags

#: passed on every compile; part of the cache key through _CACHE_FORMAT. `--split-compile=0`
#: optimises the kernels of a program on all cores at once (GPT-2's 13 kernels: 2.2 s -> 1.4 s
#: of NVRTC on 2 cores)
FIXED_OPTIONS = ("-std=c++17", "--ptxas-options=-v", "-default-device", "--split-compile=0")
#: bump when FIXED_OPTIONS or the entry layout change, so old entries are not reused
_CACHE_FORMAT = "emmy-nvrtc-2"
#: lines of the compile log kept in a KernelCompileError message
_LOG_LINES = 30

# NVRTC can return success while its log reports an error (e.g. from libnvvm)
_LOG_ERROR = re.compile(r"\berror\b\s*(?:#[\w-]+\s*)?:|\bfatal\b\s*:", re.IGNORECASE)
_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGISTERS = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[\d+\]")

_invocations = 0


def nvrtc_invocations() -> int:
    """How many times this process has run the NVRTC compiler (cache hits do not count)."""
    return _invocations


@functools.cache
def nvrtc_version() -> str:
    """The NVRTC version, e.g. "13.0"."""
    major, minor = _check(nvrtc.nvrtcVersion(), "nvrtcVersion")
    return f"{major}.{minor}"


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reports for one kernel; sizes are bytes."""

    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    shared_static: int = 0
    stack_frame: int = 0
    constant: int = 0  # summed over the constant banks ptxas lists (kernel params included)


@dataclass(frozen=True)
class CompiledCuda:
    """A compiled source: the cubin and what is known about it."""

    cubin: bytes
    ptx: str
    log: str
    arch: str
    regime: Regime
    nvrtc_version: str
    source_hash: str  # sha256 of the source text alone
    key: str  # the cache key: sha256 of everything that can change the cubin
    resources: dict[str, KernelResources] = field(default_factory=dict)
    compile_seconds: float = 0.0  # NVRTC time of the compile that made the cubin
    cache_hit: bool = False


def compile_cuda(
    source: str,
    arch: str,
    flags: str | Sequence[str] = (),
    *,
    name: str = "emmy.cu",
    use_cache: bool = True,
) -> CompiledCuda:
    """Compile `source` to a cubin for `arch` ("sm_90") under the regime `flags` normalise to.

    Raises KernelCompileError with the start of the log when NVRTC reports an error.
    """
    regime = Regime(normalise_flags(flags), arch)
    headers = _headers()
    key = _key(source, name, headers, regime)
    entry = cache_dir() / "nvrtc" / key
    if use_cache:
        hit = _load(entry, regime)
        if hit is not None:
            return hit
    options = [f"--gpu-architecture={arch}", *FIXED_OPTIONS, *regime.flags]
    start = time.perf_counter()
    cubin, ptx, log = _run_nvrtc(source, name, headers, options, regime)
    seconds = time.perf_counter() - start
    result = CompiledCuda(
        cubin=cubin,
        ptx=ptx,
        log=log,
        arch=arch,
        regime=regime,
        nvrtc_version=nvrtc_version(),
        source_hash=hashlib.sha256(source.encode()).hexdigest(),
        key=key,
        resources=parse_resources(log),
        compile_seconds=seconds,
    )
    if use_cache:
        _store(entry, result)
    return result


def parse_resources(log: str) -> dict[str, KernelResources]:
    """Per-kernel resources from a `ptxas -v` log, keyed by the kernel's symbol."""
    found: dict[str, dict[str, int]] = {}
    entry: str | None = None  # the kernel the "Used ..." lines belong to
    properties: str | None = None  # the function the next stack frame line belongs to
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            symbol: str = m.group(1)
            entry = properties = symbol
            found[symbol] = {}
        elif m := _PROPERTIES.search(line):
            properties = m.group(1)
        elif m := _FRAME.search(line):
            # non-inlined device functions get their own frame lines: keep only the kernel's
            if entry is not None and properties == entry:
                frame, stores, loads = (int(g) for g in m.groups())
                found[entry].update(stack_frame=frame, spill_stores=stores, spill_loads=loads)
        elif (m := _REGISTERS.search(line)) and entry is not None:
            smem = _SMEM.search(line)
            found[entry].update(
                registers=int(m.group(1)),
                shared_static=int(smem.group(1)) if smem else 0,
                constant=sum(int(c) for c in _CMEM.findall(line)),
            )
    return {k: KernelResources(**v) for k, v in found.items()}


def log_reports_error(log: str) -> bool:
    """Whether a compile log reports an error (NVRTC can say success while libnvvm failed)."""
    return _LOG_ERROR.search(log) is not None


def _check(result: tuple, what: str) -> tuple:
    """Unwrap a cuda-bindings (status, *values) tuple; NVRTC API misuse is a bug, not input."""
    status, *values = result
    if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"{what} failed: {status.name}")
    return tuple(values)


def _headers() -> tuple[tuple[str, bytes], ...]:
    """(include name, contents) of every emmy header; read each time, as they are small."""
    if not INCLUDE_DIR.is_dir():
        return ()
    files = sorted(p for p in INCLUDE_DIR.rglob("*") if p.is_file())
    return tuple((p.relative_to(INCLUDE_DIR).as_posix(), p.read_bytes()) for p in files)


def _key(source: str, name: str, headers: tuple[tuple[str, bytes], ...], regime: Regime) -> str:
    h = hashlib.sha256()
    for part in (_CACHE_FORMAT, nvrtc_version(), regime.canonical, name, source):
        h.update(part.encode() + b"\0")
    for rel, data in headers:
        h.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


def _run_nvrtc(
    source: str,
    name: str,
    headers: tuple[tuple[str, bytes], ...],
    options: list[str],
    regime: Regime,
) -> tuple[bytes, str, str]:
    global _invocations
    _invocations += 1
    (prog,) = _check(
        nvrtc.nvrtcCreateProgram(
            source.encode(),
            name.encode(),
            len(headers),
            [data for _, data in headers],
            [rel.encode() for rel, _ in headers],
        ),
        "nvrtcCreateProgram",
    )
    try:
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
        (size,) = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        buf = b" " * size
        _check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log = buf.rstrip(b"\0").decode(errors="replace").strip()
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS or log_reports_error(log):
            raise KernelCompileError(_failure(name, regime, status.name, log))
        (size,) = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = b" " * size
        _check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        (size,) = _check(nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
        ptx = b" " * size
        _check(nvrtc.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return cubin, ptx.rstrip(b"\0").decode(), log


def _failure(name: str, regime: Regime, status: str, log: str) -> str:
    lines = log.splitlines() or [status]
    shown = "\n".join(lines[:_LOG_LINES])
    more = f"\n... ({len(lines) - _LOG_LINES} more lines)" if len(lines) > _LOG_LINES else ""
    return f"NVRTC could not compile {name} for {regime.arch} [{regime.words}]:\n{shown}{more}"


# -- the disk cache: one directory per key, published whole by a rename -----------------------


def _load(entry: Path, regime: Regime) -> CompiledCuda | None:
    if not entry.is_dir():
        return None
    try:
        meta = json.loads((entry / "meta.json").read_text())
        resources = json.loads((entry / "resources.json").read_text())
        return CompiledCuda(
            cubin=(entry / "kernel.cubin").read_bytes(),
            ptx=(entry / "kernel.ptx").read_text(),
            log=(entry / "log.txt").read_text(),
            arch=meta["arch"],
            regime=regime,
            nvrtc_version=meta["nvrtc_version"],
            source_hash=meta["source_hash"],
            key=entry.name,
            resources={k: KernelResources(**v) for k, v in resources.items()},
            compile_seconds=meta["compile_seconds"],
            cache_hit=True,
        )
    except (OSError, ValueError, KeyError, TypeError):
        # a damaged entry (entries are published whole, so only by outside hands): rebuild it
        shutil.rmtree(entry, ignore_errors=True)
        return None


def _store(entry: Path, result: CompiledCuda) -> None:
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; a shared EMMY_CACHE_DIR should stay readable
    try:
        (tmp / "kernel.cubin").write_bytes(result.cubin)
        (tmp / "kernel.ptx").write_text(result.ptx)
        (tmp / "log.txt").write_text(result.log)
        resources = {k: asdict(v) for k, v in result.resources.items()}
        (tmp / "resources.json").write_text(json.dumps(resources, indent=1, sort_keys=True))
        meta = {
            "arch": result.arch,
            "flags": list(result.regime.flags),
            "regime": result.regime.id,
            "nvrtc_version": result.nvrtc_version,
            "source_hash": result.source_hash,
            "compile_seconds": result.compile_seconds,
            "created": time.time(),
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
        try:
            os.replace(tmp, entry)
        except OSError:
            pass  # another process published the same key first; its entry is as good
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
