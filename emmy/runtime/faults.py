"""Which launch errors leave a device context unusable, and which are timeouts, in the driver's
wording, torch's, and the emulator's: one place that every caller asks.

A fault inside a kernel is sticky on a GPU: every later call on that context fails. It
surfaces as the driver's enum name where emmy's driver saw it, and in torch's wording
("CUDA error: an illegal memory access was encountered") where a torch op on the same stream
saw it first (a fallback or a vendor call after the faulting kernel).
"""

from __future__ import annotations

#: the CUDA driver's sticky errors, by enum name
DRIVER_FAULTS = (
    "CUDA_ERROR_ILLEGAL_ADDRESS",
    "CUDA_ERROR_MISALIGNED_ADDRESS",
    "CUDA_ERROR_LAUNCH_FAILED",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    "CUDA_ERROR_HARDWARE_STACK_ERROR",
    "CUDA_ERROR_INVALID_PC",
    "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    "CUDA_ERROR_ASSERT",
    "CUDA_ERROR_LAUNCH_TIMEOUT",
    "CUDA_ERROR_CONTEXT_IS_DESTROYED",
)
#: the same faults as the CUDA runtime describes them, which torch prints after "CUDA error: "
RUNTIME_FAULTS = (
    "an illegal memory access was encountered",
    "misaligned address",
    "unspecified launch failure",
    "an illegal instruction was encountered",
    "hardware stack error",
    "invalid program counter",
    "operation not supported on global/shared address space",
    "device-side assert triggered",
    "the launch timed out and was terminated",
    "context is destroyed",
)
#: emmy's own words for a context that is gone: the drivers' sticky state, the emulator's
#: dead runner
EMMY_FAULTS = (
    "CUDA context unusable",
    "the device context is unusable after a fault",
    "the emulator died of",
)
#: text of a launch error that is a timeout (the emulator's, the drivers' and the worker's)
TIMEOUT_MARKS = ("timed out", "did not finish in time")


def is_timeout(message: str) -> bool:
    """Whether a launch error's text says the launch ran out of time."""
    return any(mark in message for mark in TIMEOUT_MARKS)


def is_fault(message: str) -> bool:
    """Whether a launch error's text is a fault that leaves its context unusable."""
    return any(mark in message for mark in (*DRIVER_FAULTS, *RUNTIME_FAULTS, *EMMY_FAULTS))


def ends_worker(message: str) -> bool:
    """Whether a launch error leaves the process that ran it unfit for the next launch."""
    return is_timeout(message) or is_fault(message)
