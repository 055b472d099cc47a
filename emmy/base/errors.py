"""Every exception type of emmy, in one place.

An EmmyError is a failure caused by the user's input or environment: the CLI prints it as one
line. The others are emmy's own signals between its layers.
"""

from __future__ import annotations


class EmmyError(Exception):
    """A failure caused by the user's input or environment, reported without a traceback."""


class DslError(EmmyError):
    """An error in a .emmy file, reported as `file:line:column: message`."""

    def __init__(self, path: str, line: int, column: int, message: str):
        super().__init__(f"{path}:{line}:{column}: {message}")
        self.path, self.line, self.column = path, line, column


class ConversionError(EmmyError):
    """A node of a model's graph the frontend cannot convert; `reason` is the message
    without the node's place, what a fallback to torch records (its op and place are its
    own)."""

    def __init__(self, message: str, reason: str | None = None):
        super().__init__(message)
        self.reason = message if reason is None else reason


class EvaluationError(Exception):
    """An expression of the kernel language cannot be evaluated; `at` is the line and
    column of the node it failed at, so the caller can report it as a DslError there."""

    def __init__(self, at: tuple[int, int], message: str):
        super().__init__(message)
        self.at = at


class NarrowIndexError(EmmyError):
    """A kernel asked for 64-bit indices that one of its statements cannot take (a 32-bit
    intrinsic): the compile keeps the op in torch."""


class EmitError(EmmyError):
    """The IR cannot be printed as CUDA (unresolved forks, unsupported ops)."""


class NoDeviceError(EmmyError):
    """The requested device is not present on this machine."""


class KernelCompileError(EmmyError):
    """The kernel source did not compile; the message carries the compiler's log."""


class KernelLaunchError(EmmyError):
    """A launch failed: a crash, a deadlock, a timeout, or resources the device lacks."""
