"""A compiled program bound to a device (emmy.runtime.bound): weights uploaded once, the
arena allocated once, the caller's tensors used in place, nothing copied to the host; on
a GPU, the launch list replayed as one CUDA graph. The device counts what it does
(Device.counters), and the tests read those counts."""

from dataclasses import asdict

import numpy as np
import pytest
import torch
from torch import nn

import emmy
from emmy.base.errors import EmmyError, NoDeviceError
from emmy.runtime.cuda import CudaDevice, check_driver
from emmy.runtime.device import BufferArg, Launch, ScalarArg
from emmy.runtime.emu import EmuDevice


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)).eval()


def on_device(device, tensor: torch.Tensor) -> torch.Tensor:
    """The tensor in the device's own memory."""
    copy = device.empty(tuple(tensor.shape), tensor.dtype)
    copy.copy_(tensor)
    return copy


def test_later_calls_allocate_nothing_and_copy_nothing_to_the_host():
    device = EmuDevice()
    model = mlp()
    compiled = emmy.compile(model, torch.randn(4, 16), device=device)
    x = on_device(device, torch.randn(4, 16))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
        # the second call captures the graph, with static buffers for the input (it moved
        # between the two calls) and the output
        x = on_device(device, torch.randn(4, 16))
        torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
    first = asdict(device.counters)
    assert device.counters.replays == 1
    for _ in range(3):
        y = on_device(device, torch.randn(4, 16))
        before = asdict(device.counters)
        with torch.no_grad():
            torch.testing.assert_close(compiled(y), model(y), atol=1e-5, rtol=1e-5)
        after = asdict(device.counters)
        for what in ("allocations", "allocated_bytes", "uploads", "host_copies"):
            assert after[what] == before[what], (what, before, after)
    # the weights crossed once, at the first call's binding, and never again
    weights = len(compiled.program.constants)
    assert first["uploads"] == weights == device.counters.uploads


@pytest.mark.parametrize("kind", ["emu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_host_input_is_copied_over_and_counted(kind):
    device = CudaDevice() if kind == "cuda" else EmuDevice()
    compiled = emmy.compile(mlp(), torch.randn(4, 16), device=device)
    before = device.counters.uploads
    compiled(torch.randn(4, 16))
    assert device.counters.uploads == before + 1  # emu: staged into its shared memory


def test_a_wrong_input_is_a_one_line_error():
    compiled = emmy.compile(mlp(), torch.randn(4, 16), device=EmuDevice())
    with pytest.raises(EmmyError, match="must be f32, got torch.float16"):
        compiled.first.bound([torch.randn(4, 16, dtype=torch.float16)])
    with pytest.raises(EmmyError, match=r"in0 must have shape \[4, 16\], got \[4, 15\]"):
        compiled.first.bound([torch.randn(4, 15)])


def test_weights_elsewhere_than_the_inputs_are_a_one_line_error():
    """torch.export traces a model on its inputs' device: weights left on another one (a
    model moved to the GPU after its inputs, or not at all) fail deep inside it."""
    model = mlp().to("meta")
    with pytest.raises(EmmyError) as error:
        emmy.compile(model, torch.randn(4, 16), device=EmuDevice())
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("the model's weights are on meta and its inputs on cpu: ")


def test_a_driver_older_than_nvrtc_is_one_line_naming_both():
    with pytest.raises(NoDeviceError) as error:
        check_driver((12, 4), "13.0")
    message = str(error.value)
    assert "\n" not in message and "CUDA 12.4" in message and "CUDA 13.0" in message
    check_driver((13, 0), "13.0")
    check_driver((13, 1), "13.0")


@pytest.mark.gpu
@pytest.mark.parametrize("cuda_graphs", [True, False])
def test_cuda_program_replays_one_graph(cuda_graphs):
    device = CudaDevice()
    model = mlp().cuda()
    x = torch.randn(4, 16, device="cuda")
    compiled = emmy.compile(model, x, device=device, cuda_graphs=cuda_graphs)
    for _ in range(4):
        x = torch.randn(4, 16, device="cuda")
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    launches = device.counters.launches
    compiled(x)
    torch.cuda.synchronize()
    if cuda_graphs:
        assert device.counters.replays == 4 and device.counters.launches == launches
    else:
        assert device.counters.replays == 0 and device.counters.launches > launches


@pytest.mark.gpu
def test_cuda_program_orders_with_the_callers_stream():
    device = CudaDevice()
    model = mlp().cuda()
    compiled = emmy.compile(model, torch.randn(4, 16, device="cuda"), device=device)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            x = torch.randn(4, 16, device="cuda") * 2
            torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
def test_cuda_timing_batches_short_kernels_into_a_long_window():
    n = 1024
    source = """extern "C" __global__ void add(float* out, const float* a, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) out[i] = a[i] + 1.0f;
    }"""
    launch = Launch(
        "add", (4, 1, 1), (256, 1, 1), 0, (BufferArg("out"), BufferArg("a"), ScalarArg("i32", n))
    )
    with CudaDevice() as device:
        buffers = {k: np.ones(n, np.float32) for k in ("out", "a")}
        timing = device.time(source, [launch], buffers, warmup=1, repetitions=3)
    assert timing.batch > 1 and len(timing.seconds) == 3
    assert all(s * timing.batch >= 0.5e-3 for s in timing.seconds)


@pytest.mark.gpu
def test_a_model_on_the_gpu_compiles_through_both_apis_where_its_inputs_are():
    """GPT-2 (tiny) moved to the GPU with its inputs, as a user runs it: emmy.compile and
    torch.compile(backend=emmy) both match eager, at two calls with other inputs."""
    from emmy.frontend.recipes import build, resolve_case

    model, inputs = build(resolve_case("gpt2", "tiny", 0, None))
    model = model.cuda()
    device = CudaDevice()
    first = [t.cuda() for t in inputs]
    compiled = emmy.compile(model, *first, device=device)
    dynamo = torch.compile(model, backend=emmy.api.backend(device=device))
    for call in range(2):
        ids = first if call == 0 else [torch.randint_like(t, 0, 100) for t in first]
        with torch.no_grad():
            expected = model(*ids)
            for actual in (compiled(*ids), dynamo(*ids)):
                torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)
