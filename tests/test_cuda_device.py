import numpy as np
import pytest
from cuda.bindings import driver as cu

from emmy.base.errors import KernelLaunchError, NoDeviceError
from emmy.base.identity import arch_of
from emmy.runtime import cuda as cuda_module
from emmy.runtime.cuda import CudaDevice, cuda_available
from emmy.runtime.device import BufferArg, Launch, ScalarArg

HAVE_GPU = cuda_available()
needs_no_gpu = pytest.mark.skipif(HAVE_GPU, reason="a CUDA device is present")

SOURCE = """
extern "C" __global__ void add(float* out, const float* a, const float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}
extern "C" __global__ void big_smem(int* out, int n) {
  extern __shared__ int tile[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) tile[i] = i;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = tile[n - 1 - i];
}
"""


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMMY_CACHE_DIR", str(tmp_path))


@needs_no_gpu
def test_no_device_is_a_one_line_error():
    with pytest.raises(NoDeviceError, match="^no CUDA device: ") as info:
        CudaDevice()
    assert "\n" not in str(info.value)


def test_driver_without_a_device(monkeypatch):
    # the path a machine with a driver but no GPU takes, whatever this machine has
    monkeypatch.setattr(cu, "cuInit", lambda flags: (cu.CUresult.CUDA_ERROR_NO_DEVICE,))
    assert not cuda_available()
    with pytest.raises(NoDeviceError, match="^no CUDA device: CUDA_ERROR_NO_DEVICE"):
        cuda_module.CudaDevice()


@pytest.fixture(scope="module")
def device():
    with CudaDevice() as dev:
        yield dev


def add_launch(n: int) -> Launch:
    args = (BufferArg("out"), BufferArg("a"), BufferArg("b"), ScalarArg("i32", n))
    return Launch("add", ((n + 255) // 256, 1, 1), (256, 1, 1), 0, args)


@pytest.mark.gpu
def test_identity(device):
    assert arch_of(device.identity) == device.arch
    assert device.regime.is_deployable


@pytest.mark.gpu
def test_vector_add(device):
    n = 1000
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    buffers = {"out": np.zeros(n, np.float32), "a": a, "b": b}
    device.run(SOURCE, [add_launch(n)], buffers)
    np.testing.assert_array_equal(buffers["out"], a + b)


@pytest.mark.gpu
def test_non_contiguous_buffer_is_written_in_place(device):
    n = 64
    backing = np.zeros((n, 2), np.float32)
    out = backing[:, 0]  # a strided view
    buffers = {"out": out, "a": np.ones(n, np.float32), "b": np.full(n, 2, np.float32)}
    device.run(SOURCE, [add_launch(n)], buffers)
    assert (backing[:, 0] == 3).all() and (backing[:, 1] == 0).all()


@pytest.mark.gpu
def test_large_dynamic_shared_memory(device):
    n = 20_000  # 80 KB of shared memory: needs the opt-in
    buffers = {"out": np.zeros(n, np.int32)}
    launch = Launch(
        "big_smem", (1, 1, 1), (256, 1, 1), n * 4, (BufferArg("out"), ScalarArg("i32", n))
    )
    device.run(SOURCE, [launch], buffers)
    np.testing.assert_array_equal(buffers["out"], np.arange(n, dtype=np.int32)[::-1])


@pytest.mark.gpu
def test_time(device):
    n = 1 << 20
    buffers = {k: np.ones(n, np.float32) for k in ("out", "a", "b")}
    seconds = device.time(SOURCE, [add_launch(n)], buffers, warmup=1, repetitions=3).seconds
    assert len(seconds) == 3 and all(0 < s < 1 for s in seconds)


@pytest.mark.gpu
def test_unknown_kernel(device):
    launch = Launch("missing", (1, 1, 1), (1, 1, 1), 0, ())
    with pytest.raises(KernelLaunchError, match="'missing' is not in the compiled source"):
        device.run(SOURCE, [launch], {})


@pytest.mark.gpu
def test_bad_geometry_is_a_launch_error(device):
    launch = add_launch(16)
    launch = Launch("add", (1, 1, 1), (4096, 1, 1), 0, launch.args)  # over 1024 threads
    buffers = {k: np.zeros(16, np.float32) for k in ("out", "a", "b")}
    with pytest.raises(KernelLaunchError, match="launch of 'add'"):
        device.run(SOURCE, [launch], buffers)
