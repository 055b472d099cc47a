from concurrent.futures import ThreadPoolExecutor

import pytest

from emmy.backend import nvrtc
from emmy.backend.nvrtc import (
    CompiledCuda,
    compile_cuda,
    log_reports_error,
    nvrtc_invocations,
    parse_resources,
)
from emmy.base.errors import EmmyError, KernelCompileError
from emmy.base.paths import INCLUDE_DIR

ELF_MAGIC = b"\x7fELF"

ADD = """
extern "C" __global__ void add(float* out, const float* a, const float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}
"""

MANY = """
extern "C" __global__ void scale(float* x, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}
extern "C" __global__ void reverse(float* x) {
  __shared__ float tile[256];
  tile[threadIdx.x] = x[threadIdx.x];
  __syncthreads();
  x[threadIdx.x] = tile[255 - threadIdx.x];
}
extern "C" __global__ void fill(int* x, int v) { x[threadIdx.x] = v; }
"""


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMMY_CACHE_DIR", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_compiles_to_a_cubin_with_resources(arch):
    result = compile_cuda(ADD, arch)
    assert result.cubin.startswith(ELF_MAGIC)
    assert ".entry add" in result.ptx
    assert result.arch == arch and result.regime.is_deployable
    assert result.nvrtc_version == nvrtc.nvrtc_version()
    assert list(result.resources) == ["add"]
    add = result.resources["add"]
    assert add.registers > 0
    assert add.spill_stores == add.spill_loads == add.stack_frame == 0


def test_nvrtc_version():
    major, minor = nvrtc.nvrtc_version().split(".")
    assert major.isdigit() and minor.isdigit()


def test_many_kernels_in_one_source():
    resources = compile_cuda(MANY, "sm_90").resources
    assert set(resources) == {"scale", "reverse", "fill"}
    assert resources["reverse"].shared_static == 256 * 4
    assert resources["scale"].shared_static == 0
    assert all(r.registers > 0 for r in resources.values())


def test_syntax_error_reports_the_line():
    source = ADD + 'extern "C" __global__ void broken(int* x) {\n  x[0] = ;\n}\n'
    with pytest.raises(KernelCompileError, match=r"bad\.cu\(7\): error") as info:
        compile_cuda(source, "sm_90", name="bad.cu")
    assert "x[0] = ;" in str(info.value)


def test_a_bad_nvvm_option_is_a_compile_error():
    with pytest.raises(KernelCompileError, match="error"):
        compile_cuda(ADD, "sm_90", "-Xnvvm -not-an-nvvm-option")


@pytest.mark.parametrize(
    ("log", "error"),
    [
        ("libnvvm : error: -opt=9 is an unsupported option", True),
        ('x.cu(3): error #20-D: identifier "y" is undefined', True),
        ("ptxas error   : Entry function 'k' uses too much shared data", True),
        ("ptxas fatal   : Unresolved extern function 'f'", True),
        ('x.cu(3): warning #177-D: variable "error" was declared but never referenced', False),
        ("ptxas info    : Compiling entry function 'error_kernel' for 'sm_90'", False),
        ("", False),
    ],
)
def test_log_reports_error(log, error):
    assert log_reports_error(log) is error


def test_second_compile_is_a_cache_hit():
    first = compile_cuda(ADD, "sm_90")
    before = nvrtc_invocations()
    second = compile_cuda(ADD, "sm_90")
    assert nvrtc_invocations() == before
    assert not first.cache_hit and second.cache_hit
    assert second.cubin == first.cubin and second.ptx == first.ptx
    assert second.resources == first.resources
    assert second.key == first.key and second.compile_seconds == first.compile_seconds


@pytest.mark.parametrize(
    ("arch", "flags"), [("sm_80", ()), ("sm_90", "-Xnvvm -opt=1"), ("sm_90", "-DUNUSED")]
)
def test_other_arch_or_flags_miss(arch, flags):
    base = compile_cuda(ADD, "sm_90")
    before = nvrtc_invocations()
    other = compile_cuda(ADD, arch, flags)
    assert nvrtc_invocations() == before + 1
    assert not other.cache_hit and other.key != base.key


def test_equivalent_flags_hit():
    compile_cuda(ADD, "sm_90", "-Xnvvm -opt=1 -DA -DB")
    before = nvrtc_invocations()
    assert compile_cuda(
        ADD, "sm_90", ["-DB", "-Xnvvm=-opt=1", "-DA", "--ptxas-options=-v"]
    ).cache_hit
    assert nvrtc_invocations() == before


def test_cache_entries_are_whole(private_cache):
    result = compile_cuda(ADD, "sm_90")
    root = private_cache / "nvrtc"
    assert [p.name for p in root.iterdir()] == [result.key]  # no temporary left behind
    entry = root / result.key
    assert {p.name for p in entry.iterdir()} == {
        "kernel.cubin",
        "kernel.ptx",
        "log.txt",
        "resources.json",
        "meta.json",
    }
    # publishing a key that already exists keeps the first entry and cleans up
    nvrtc._store(entry, result)
    assert [p.name for p in root.iterdir()] == [result.key]


def test_concurrent_compiles_publish_one_entry(private_cache):
    source = ADD + "// concurrent\n"
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: compile_cuda(source, "sm_90"), range(4)))
    assert len({r.cubin for r in results}) == 1
    assert [p.name for p in (private_cache / "nvrtc").iterdir()] == [results[0].key]


def test_damaged_entry_is_rebuilt(private_cache):
    result = compile_cuda(ADD, "sm_90")
    (private_cache / "nvrtc" / result.key / "meta.json").write_text("{")
    again = compile_cuda(ADD, "sm_90")
    assert not again.cache_hit and again.cubin.startswith(ELF_MAGIC)
    assert compile_cuda(ADD, "sm_90").cache_hit


def test_lower_nvvm_level_is_its_own_regime():
    default = compile_cuda(ADD, "sm_90")
    lower = compile_cuda(ADD, "sm_90", "-Xnvvm -opt=1")
    assert lower.cubin.startswith(ELF_MAGIC)
    assert lower.regime.id != default.regime.id
    assert lower.regime.flags == ("-Xnvvm=-opt=1",)


def test_o3_is_a_clear_error():
    with pytest.raises(EmmyError, match="already optimises at O3"):
        compile_cuda(ADD, "sm_90", "-O3")


def test_uncached_compile_does_nvrtc_work():
    before = nvrtc_invocations()
    assert not compile_cuda(ADD, "sm_90", use_cache=False).cache_hit
    assert not compile_cuda(ADD, "sm_90", use_cache=False).cache_hit
    assert nvrtc_invocations() == before + 2


def test_parse_resources_ignores_device_function_frames():
    log = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k' for 'sm_80'
ptxas info    : Function properties for k
ptxas         .     256 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, 1024 bytes smem, 360 bytes cmem[0], 8 bytes cmem[2]
ptxas info    : Function properties for _Z1fPfi
ptxas         .     16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
"""
    (k,) = parse_resources(log).values()
    assert (k.registers, k.stack_frame, k.spill_stores, k.spill_loads) == (40, 256, 8, 4)
    assert (k.shared_static, k.constant) == (1024, 368)


@pytest.mark.skipif(
    not (INCLUDE_DIR / "emmy_device.cuh").exists(), reason="emmy_device.cuh not written yet"
)
def test_kernel_including_the_emmy_header():
    source = """
#include "emmy_device.cuh"
EMMY_KERNEL void copy(float* out, const float* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i];
}
"""
    result: CompiledCuda = compile_cuda(source, "sm_90")
    assert result.cubin.startswith(ELF_MAGIC)
    assert "copy" in result.resources
