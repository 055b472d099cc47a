"""A launch list loaded on a driver and called on tensors bound by name: written once for
every device (emmy.runtime.driver says what differs).

Its kernels are loaded and every launch's arguments packed once. A call binds each slot to a
tensor: the caller's own where the kernels can use it in place (device memory, contiguous,
aligned as the kernels assume), else a staging copy kept for the next call (an upload when
the tensor was on the host, a realignment when it was device memory at an address the
kernels cannot use), written back afterwards where the steps write that slot.

The first call issues the steps one by one (and warms up what torch loads lazily: the vendor
library's handle, a fallback's kernels); the second captures them as one graph, and every
later call replays it. A graph reads and writes the addresses it captured. It is captured in
place on the tensors the caller passes again: the fixed slots (weights, the arena), the
mutated inputs (a KV cache) and every read input whose tensor was the same at the first two
calls (an AOTAutograd graph's parameters). Every other slot gets a static buffer, as torch's
CUDA-graph trees keep them: an input is copied into its buffer before the replay, an output
out of its buffer after. A call whose in-place tensors moved replays the graph captured on
those (captured then, at most MAX_GRAPHS kept), so a graph never runs on addresses that
moved; a read input that moved is copied from then on. A launch list that cannot be captured
(a fallback op that synchronises) runs step by step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from emmy.base.device_records import BufferArg, HostCall, Launch, Step
from emmy.base.errors import KernelLaunchError
from emmy.runtime.driver import Driver, PackedLaunch

if TYPE_CHECKING:
    import torch

#: graphs an executable keeps, one per set of addresses of the tensors it reads in place
#: (a KV cache per concurrent generation); the oldest goes first
MAX_GRAPHS = 8


@dataclass(frozen=True)
class Roles:
    """The slots' roles: `fixed` are bound to the same tensors at every call (weights, the
    arena), `mutated` are inputs the steps write (a KV cache), `outputs` are bound to each
    call's fresh outputs; the others are inputs the steps only read."""

    fixed: frozenset[str] = frozenset()
    mutated: frozenset[str] = frozenset()
    outputs: frozenset[str] = frozenset()

    @property
    def written(self) -> frozenset[str]:
        return self.fixed | self.mutated | self.outputs


class RunOptions(TypedDict, total=False):
    """The keyword options of a call of an executable (see `Executable.__call__`)."""

    sync_each_launch: bool
    timeout: float
    schedule: str


class Executable:
    """`steps` loaded on `driver`, called on one tensor per slot."""

    def __init__(
        self,
        driver: Driver,
        source: str,
        steps: Sequence[Step],
        slots: Sequence[str],
        *,
        cuda_graphs: bool = True,
        roles: Roles = Roles(),
    ) -> None:
        self.driver = driver
        self.slots = tuple(slots)
        known = set(self.slots)
        for step in steps:
            for arg in step.args:
                if isinstance(arg, BufferArg) and arg.name not in known:
                    raise KernelLaunchError(
                        f"{step.kernel} uses buffer {arg.name!r}, which is not a slot"
                    )
        module = driver.load_module(source) if any(isinstance(s, Launch) for s in steps) else None
        self.steps: list[PackedLaunch | HostCall] = [
            step
            if isinstance(step, HostCall)
            else PackedLaunch(driver.function(module, step), step)
            for step in steps
        ]
        self.roles = roles
        self.cuda_graphs = cuda_graphs
        self._staging: dict[str, torch.Tensor] = {}
        self._bound: dict[str, int] = {}
        self._previous: dict[str, int] = {}
        #: the slots graphs are captured on in place, chosen at the first capture
        self.in_place: frozenset[str] | None = None
        self.graphs: dict[tuple[int, ...], _Graph] = {}
        #: why the launch list runs step by step, once capture failed
        self.uncapturable: str | None = None

    # -- a call ----------------------------------------------------------------------------

    def __call__(
        self,
        tensors: Mapping[str, torch.Tensor],
        *,
        sync_each_launch: bool = False,
        timeout: float = 120.0,
        schedule: str = "forward",
    ) -> None:
        """Runs the steps on `tensors` (one per slot), in place. `sync_each_launch` waits
        after every step, so that a fault is reported against the launch that made it
        (asynchronous launches otherwise surface it at a later one): a check's or a bench's
        way, never a served model's. `schedule` orders the emulator's threads."""
        driver = self.driver
        driver.check_fault()
        with driver.order(schedule):
            bound, staged = self._staged(tensors)
            pointers = {name: bound[name].data_ptr() for name in self.slots}
            if sync_each_launch or not self._graph_call(bound, pointers):
                self.issue(bound, pointers, sync_each_launch=sync_each_launch, timeout=timeout)
            written = [name for name in staged if name in self.roles.written]
            if written:
                driver.host_call(lambda: self._write_back(tensors, bound, written))
            if sync_each_launch:
                driver.synchronize(timeout, "the launches")
            driver.end_call(timeout)

    def issue(
        self,
        tensors: Mapping[str, torch.Tensor],
        pointers: Mapping[str, int],
        *,
        sync_each_launch: bool = False,
        timeout: float = 120.0,
    ) -> None:
        """Queues every step once on the bound `tensors`, whose addresses are `pointers`."""
        driver = self.driver
        count = len(self.steps)
        for index, step in enumerate(self.steps):
            if isinstance(step, HostCall):
                driver.host_call(lambda step=step: _run_host_call(step, tensors, driver))
            else:
                if any(self._bound.get(name) != pointers[name] for name in step.buffers):
                    step.bind(pointers)  # type: ignore[arg-type]
                driver.launch(step)
                driver.counters.launches += 1
            if sync_each_launch:
                self._wait_for(step, f"launch {index + 1} of {count}", timeout)
        self._bound = dict(pointers)

    def _wait_for(self, step: PackedLaunch | HostCall, which: str, timeout: float) -> None:
        """Waits for one step; its failure names it."""
        kernel = step.kernel if isinstance(step, HostCall) else step.launch.kernel
        try:
            self.driver.synchronize(timeout, "the launch")
        except KernelLaunchError as error:
            raise KernelLaunchError(f"{which}, {kernel!r}: {error}") from None

    # -- binding ---------------------------------------------------------------------------

    def bind(self, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Per slot the tensor the kernels use: the given one, or its staging copy."""
        return self._staged(tensors)[0]

    def _staged(
        self, tensors: Mapping[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], list[str]]:
        """Per slot the tensor the kernels use, and the slots that are staging copies."""
        driver = self.driver
        bound: dict[str, torch.Tensor] = {}
        staged: list[str] = []
        for name in self.slots:
            if name not in tensors:
                raise KernelLaunchError(f"no tensor for slot {name!r}")
            tensor = tensors[name]
            on_device = driver.owns(tensor)
            aligned = tensor.data_ptr() % driver.alignment == 0 or not tensor.numel()
            if on_device and aligned and tensor.is_contiguous():
                bound[name] = tensor
                continue
            copy = self._staging_for(name, tensor)
            driver.host_call(lambda copy=copy, tensor=tensor: copy.copy_(tensor))
            if not on_device:
                driver.counters.uploads += 1
            elif not aligned:
                driver.counters.realigned += 1
            bound[name] = copy
            staged.append(name)
        return bound, staged

    def _staging_for(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        copy = self._staging.get(name)
        if copy is None or copy.shape != tensor.shape or copy.dtype != tensor.dtype:
            copy = self._staging[name] = self.driver.empty(tuple(tensor.shape), tensor.dtype)
        return copy

    def _write_back(
        self,
        tensors: Mapping[str, torch.Tensor],
        bound: Mapping[str, torch.Tensor],
        names: list[str],
    ) -> None:
        for name in names:
            tensors[name].copy_(bound[name])
            if not self.driver.owns(tensors[name]):
                self.driver.counters.host_copies += 1

    # -- graphs ----------------------------------------------------------------------------

    def _graph_call(self, tensors: Mapping[str, torch.Tensor], pointers: dict[str, int]) -> bool:
        """Replays (capturing first where needed) a graph of the steps; False where this call
        issues them one by one instead (the first call, no graphs, uncapturable steps)."""
        first = not self._previous
        previous, self._previous = self._previous, pointers
        if not self.cuda_graphs or self.uncapturable or first:
            return False
        if self.in_place is None:
            read = set(self.slots) - self.roles.written
            again = {name for name in read if pointers[name] == previous[name]}
            self.in_place = self.roles.fixed | self.roles.mutated | frozenset(again)
        graph = self.graphs.get(self._key(pointers))
        if graph is None:
            graph = self._recapture(tensors, pointers)
            if graph is None:
                return False
        graph.replay(self.driver, tensors)
        self.driver.counters.replays += 1
        return True

    def _key(self, pointers: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(pointers[name] for name in sorted(self.in_place or ()))

    def _recapture(
        self, tensors: Mapping[str, torch.Tensor], pointers: Mapping[str, int]
    ) -> _Graph | None:
        """A graph for this call's in-place tensors; read inputs that moved since the last
        capture are copied from now on (their graphs would differ at every call)."""
        in_place = self.in_place or frozenset()
        if self.graphs:
            last = next(reversed(self.graphs.values()))
            pinned = self.roles.fixed | self.roles.mutated
            moved = {
                name for name in in_place - pinned if last.static[name].data_ptr() != pointers[name]
            }
            if moved:
                self.in_place = in_place - moved
                self.graphs.clear()
        while len(self.graphs) >= MAX_GRAPHS:
            self.graphs.pop(next(iter(self.graphs)))
        graph = self._capture(tensors)
        if graph is not None:
            self.graphs[self._key(pointers)] = graph
        return graph

    def _capture(self, tensors: Mapping[str, torch.Tensor]) -> _Graph | None:
        driver = self.driver
        in_place = self.in_place or frozenset()
        static: dict[str, torch.Tensor] = {}
        for name in self.slots:
            given = tensors[name]
            static[name] = given if name in in_place else driver.empty(given.shape, given.dtype)
        copied = [name for name in self.slots if name not in in_place]
        inputs = [name for name in copied if name not in self.roles.outputs]
        driver.host_call(lambda: [static[name].copy_(tensors[name]) for name in inputs])
        try:
            with driver.capture() as graph:
                self.issue(static, {name: static[name].data_ptr() for name in self.slots})
        except RuntimeError as error:  # a fallback op that cannot be captured
            self.uncapturable = str(error).splitlines()[0] if str(error) else type(error).__name__
            self._bound = {}
            return None
        outputs = [name for name in copied if name in self.roles.outputs]
        return _Graph(graph, static, inputs, outputs)


class _Graph:
    """One captured graph and the static buffers it reads and writes."""

    def __init__(
        self,
        graph: Any,
        static: dict[str, torch.Tensor],
        copied_in: list[str],
        copied_out: list[str],
    ) -> None:
        self.graph = graph
        self.static = static
        self.copied_in = copied_in
        self.copied_out = copied_out

    def replay(self, driver: Driver, tensors: Mapping[str, torch.Tensor]) -> None:
        def copy_in() -> None:
            for name in self.copied_in:
                if tensors[name].data_ptr() != self.static[name].data_ptr():
                    self.static[name].copy_(tensors[name])

        def copy_out() -> None:
            for name in self.copied_out:
                tensors[name].copy_(self.static[name])

        driver.host_call(copy_in)
        driver.replay(self.graph)
        driver.host_call(copy_out)


def _run_host_call(call: HostCall, tensors: Mapping[str, torch.Tensor], driver: Driver) -> None:
    """A host call on the bound tensors themselves, in stream order."""
    # the vendor library runs through torch, loaded by a program's first host call alone
    from emmy.runtime.vendor import run_host_call, tensor_view

    def view(arg: BufferArg, shape: tuple[int, ...], dtype: str) -> torch.Tensor:
        if arg.name not in tensors:
            raise KernelLaunchError(f"{call.kernel} names unknown buffer {arg.name!r}")
        return tensor_view(tensors[arg.name], arg, shape, dtype)

    run_host_call(call, view, driver.torch_device)
