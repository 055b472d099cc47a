"""The emulator's device memory: regions, each a file in /dev/shm (else the temporary folder)
mapped both here and by the runner process, so that a kernel reads and writes the very bytes
of a CPU torch tensor or numpy array over the region, with no copy either way.

One region per allocation, with the buffer placed at its end: the runner maps each region
between guard pages, so a kernel that runs past the end of its buffer faults, as it would on
a GPU (a shared arena would let it scribble over a neighbour). A region is handed back when
the last view of its buffer dies (a weakref.finalize on the memoryview that the tensor or
array holds) and cached by its size in pages: a model allocates the same sizes call after
call, so the regions, and the runner's mappings of them, are reused as they are. Past
FREE_BYTES_CACHED of free regions the oldest free ones are removed; `take_removed` tells the
runner client which mappings to drop.
"""

from __future__ import annotations

import bisect
import contextlib
import mmap
import os
import tempfile
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from emmy.runtime.device import DeviceCounters

PAGE = mmap.PAGESIZE
#: the alignment of every buffer (as cudaMalloc's, and as wide vector accesses need)
ALIGN = 256
#: free regions kept for reuse, in bytes
FREE_BYTES_CACHED = 256 << 20


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


@dataclass
class Region:
    """A file of `size` bytes (whole pages) and this process's mapping of it."""

    id: int
    path: str
    size: int
    map: mmap.mmap
    view: memoryview
    start: int  # the mapping's address here


def _remove_files(paths: dict[int, str]) -> None:
    for path in paths.values():
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


class EmuMemory:
    """The regions of one emulated device; `counters` counts the buffers it allocates."""

    def __init__(self, counters: DeviceCounters, directory: str | None = None) -> None:
        shm = "/dev/shm"
        self.directory = directory or (shm if os.access(shm, os.W_OK) else tempfile.gettempdir())
        self.counters = counters
        self.regions: dict[int, Region] = {}
        self._free: OrderedDict[int, int] = OrderedDict()  # region id -> size, oldest first
        self._free_bytes = 0
        self._removed: list[int] = []
        self._starts: list[int] = []  # the regions' addresses, sorted, and their ids
        self._ids_by_start: list[int] = []
        self._next_id = 0
        self._paths: dict[int, str] = {}
        # the files go when the device does, or at exit at the latest
        weakref.finalize(self, _remove_files, self._paths)

    def _allocate(self, nbytes: int, counted: bool = True) -> tuple[memoryview, int, int]:
        """A buffer of at least one byte: a memoryview of it, its region and byte offset; the
        caller ties the region's release to the object that holds the buffer."""
        body = _round_up(max(nbytes, 1), ALIGN)
        size = _round_up(body, PAGE)
        region = self._reuse(size) or self._create(size)
        offset = size - body
        if counted:
            self.counters.allocations += 1
            self.counters.allocated_bytes += nbytes
        return region.view[offset : offset + max(nbytes, 1)], region.id, offset

    def _owned(self, holder: object, region: int) -> None:
        weakref.finalize(holder, self._release, region).atexit = False

    def array(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[np.ndarray, int, int]:
        """A numpy array in device memory (uninitialised), its region and byte offset."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        view, region, offset = self._allocate(nbytes)
        # numpy keeps a memoryview of its own, not `view`: every array over the buffer has
        # this one as its base
        base = np.frombuffer(view, np.uint8)
        self._owned(base, region)
        return base[:nbytes].view(dtype).reshape(shape), region, offset

    def tensor(self, shape: tuple[int, ...], dtype, counted: bool = True):
        """A CPU torch tensor of `shape` and torch `dtype` in device memory (uninitialised);
        `counted`: as an allocation of the device (not a call's output)."""
        # torch is heavy, and only a program run on torch tensors allocates them
        import torch

        count = 1
        for n in shape:
            count *= int(n)
        nbytes = count * dtype.itemsize
        view, region, _ = self._allocate(nbytes, counted)
        self._owned(view, region)  # the tensor's storage holds `view` itself
        raw = torch.frombuffer(view, dtype=torch.uint8)[:nbytes]
        return raw.view(dtype).reshape(tuple(shape))

    def resolve(self, address: int, nbytes: int) -> tuple[int, int] | None:
        """(region id, byte offset) of the `nbytes` at `address` (a tensor's data_ptr()) when
        they lie inside one region, else None."""
        i = bisect.bisect_right(self._starts, address) - 1
        if i < 0:
            return None
        region = self.regions[self._ids_by_start[i]]
        offset = address - region.start
        if offset + nbytes > region.size:
            return None
        return region.id, offset

    def locate(self, tensor) -> tuple[int, int] | None:
        """(region id, byte offset) of a contiguous torch tensor in this memory, else None."""
        if not tensor.is_contiguous():
            return None
        return self.resolve(tensor.data_ptr(), tensor.numel() * tensor.element_size())

    def take_removed(self) -> list[int]:
        """The regions removed since the last call (their mappings elsewhere are stale)."""
        removed, self._removed = self._removed, []
        return removed

    def _reuse(self, size: int) -> Region | None:
        for rid, free_size in self._free.items():
            if free_size == size:
                del self._free[rid]
                self._free_bytes -= size
                return self.regions[rid]
        return None

    def _create(self, size: int) -> Region:
        rid = self._next_id
        self._next_id += 1
        fd, path = tempfile.mkstemp(prefix=f"emmy-emu-{os.getpid()}-", dir=self.directory)
        try:
            os.ftruncate(fd, size)
            mapped = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        start = np.frombuffer(mapped, np.uint8).ctypes.data
        region = Region(rid, path, size, mapped, memoryview(mapped), start)
        self.regions[rid] = region
        self._paths[rid] = path
        i = bisect.bisect(self._starts, start)
        self._starts.insert(i, start)
        self._ids_by_start.insert(i, rid)
        return region

    def _release(self, rid: int) -> None:
        region = self.regions[rid]
        self._free[rid] = region.size
        self._free_bytes += region.size
        while self._free_bytes > FREE_BYTES_CACHED:
            oldest, size = self._free.popitem(last=False)
            self._free_bytes -= size
            self._remove(self.regions[oldest])

    def _remove(self, region: Region) -> None:
        i = self._ids_by_start.index(region.id)
        del self._starts[i], self._ids_by_start[i]
        del self.regions[region.id]
        region.view.release()
        region.map.close()
        # at exit the device's files go first (_remove_files), then the tensors that die
        # with the interpreter release their regions
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._paths.pop(region.id))
        self._removed.append(region.id)
