"""The settings of the check: its defaults on a GPU, budgets, sweep sizes and targets."""

from __future__ import annotations

#: the models part's default on a GPU: RECIPE[:CONFIG], no config being the recipe's own
MODELS_ON_GPU = "mlp:tiny,gpt2:tiny,llama:tiny,gpt2"
#: the test files with tests marked `gpu` (tests/test_gpu_check.py checks the list against
#: the marks), the ones that tell most first: the tensor-core intrinsics, the device, a
#: bound program
GPU_TESTS = (
    "tests/test_tensor_core_intrinsics.py",
    "tests/test_cuda_device.py",
    "tests/test_runtime_drivers.py",
    "tests/test_bound_program.py",
    "tests/test_bench_worker.py",
    "tests/test_matmul_paths.py",
    "tests/test_conv_paths.py",
)
#: the decode part's default on a GPU
DECODE_ON_GPU = "gpt2:small,llama:1b"
#: the GPT-2 recipe config whose training step the training part times on a GPU
TRAINING_ON_GPU = "small"
#: the pins that run emmy's own matmul and attention kernels where a GPU's default is the
#: vendor library: the matmul_path fork `matmul` and the attention_path (and
#: attention_backward_path) fork `path`
EMMY_KERNELS = ("matmul=kernel", "path=fused")
#: the runtime part's default on a GPU
RUNTIME_ON_GPU = "gpt2:small:1:1,gpt2:small:1:128"
#: the whole check's default time budget, seconds (the issue's: 8 minutes on one H100/H200)
BUDGET = 480.0
#: timing windows per measurement on a GPU (on the emulator, whose times mean little, 3);
#: the median is reported
REPETITIONS = 10
#: the share of a speed part's time its first shape's sweep may take; the rest is shared by
#: the other shapes, so that a slow sweep still leaves every target a figure
FIRST_SHARE = 0.5
#: the share of the time left that a one-shape part's sweep may take: the rest reports
SWEEP_SHARE = 0.85
#: configs compiled to one source in a sweep: fewer compiler starts, and a sweep cut at its
#: deadline between two such chunks
CHUNK = 8
#: fastest configs of a part's first shape timed again at each later shape
CARRIED = 3
#: the issue's targets: what the ratio is of, and the least it should reach
GOALS = {"copy": 0.90, "kernel vs torch.matmul": 0.55, "pick vs torch.matmul": 0.98,
         "kernel vs SDPA flash": 0.70, "pick vs SDPA flash": 1.00}  # fmt: skip
#: how many times the default limits and budget are on the emulator, which runs kernels on
#: the CPU
EMU_SLOWER = 10
#: what the probe part reports at the report's top
PROBED = ("device", "card", "torch", "torch_cuda", "gpu")
#: the figures' units, by their names in the report's keys
UNITS = {"gb_s": "GB/s", "tflops": "TFLOP/s", "tokens_s": "tokens/s"}
#: host seconds per call, as a share of the GPU's, from which a figure is the host's pace
HOST_BOUND = 0.8
#: why a check part named by --parts did not run
WHY_NOT = {"correctness": "--speed-only skips it", "models": "no --models",
           "real_models": "no --real-models", "runtime": "no --runtime", "decode": "no --decode",
           "training": "no --training",
           "gpu_tests": "it runs on cuda, without --speed-only or --no-gpu-tests",
           "campaign": "it runs on cuda, without --speed-only"}  # fmt: skip
#: a part's exit status when a fault left its CUDA context unusable
STOPPED = 3
#: seconds before its limit at which a part starts nothing more that it can leave for later
#: (a family's case, a test), so that it ends with its report rather than being cut
LAST_SECONDS = 5.0
