"""Blocks of memory a device gives out: :class:`Memory` (device or pinned bytes
``[ptr, ptr + size)``), the registry of the live ones that finds a block by any address inside
it, and :func:`host_view`, a NumPy view over host bytes.

Ownership: the caller owns what it reserved and returns it through the device; a
:class:`Memory` never frees anything by being garbage-collected.
"""

from __future__ import annotations

import bisect
import ctypes
from dataclasses import dataclass, field

import numpy as np

DEVICE_MEMORY = "device"
PINNED_MEMORY = "pinned"


@dataclass(frozen=True, eq=False)
class Memory:
    """A block the device gave out: bytes ``[ptr, ptr + size)``.

    ``kind`` is ``"device"`` or ``"pinned"``. ``keepalive`` is the backend's own
    handle on the bytes (the emulated device's NumPy buffer); holding the ``Memory``
    keeps those bytes addressable, which makes it a suitable ``owner`` for
    ``cupy.cuda.UnownedMemory(ptr, size, owner)``. Identity is equality: two
    reservations are never the same block.
    """

    ptr: int
    size: int
    kind: str
    keepalive: object = field(default=None, repr=False)

    @property
    def end(self) -> int:
        """One past the last byte (``ptr + size``)."""
        return self.ptr + self.size

    def __repr__(self) -> str:
        return f"Memory({self.kind}, ptr={self.ptr:#x}, size={self.size})"


class LiveBlocks:
    """Live blocks of one kind, findable by any address inside them (bisect on starts).

    Not thread-safe by itself: the device's ``_lock`` guards it.
    """

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._by_ptr: dict[int, Memory] = {}

    def add(self, memory: Memory) -> None:
        bisect.insort(self._starts, memory.ptr)
        self._by_ptr[memory.ptr] = memory

    def remove(self, memory: Memory) -> bool:
        """Forget ``memory``; ``False`` if it is not this very live block."""
        if self._by_ptr.get(memory.ptr) is not memory:
            return False
        del self._by_ptr[memory.ptr]
        del self._starts[bisect.bisect_left(self._starts, memory.ptr)]
        return True

    def containing(self, ptr: int) -> Memory | None:
        """The live block with ``block.ptr <= ptr < block.end``, or ``None``."""
        i = bisect.bisect_right(self._starts, ptr) - 1
        if i < 0:
            return None
        block = self._by_ptr[self._starts[i]]
        return block if ptr < block.end else None

    def all(self) -> list[Memory]:
        return list(self._by_ptr.values())


def host_view(ptr: int, nbytes: int) -> np.ndarray:
    """A writable ``uint8`` NumPy array over host bytes ``[ptr, ptr + nbytes)``.

    Unchecked: the caller guarantees the range is live host memory for as long as
    the view is used (:meth:`Device.pinned_array
    <cupool.devices.protocol.Device.pinned_array>` is the checked form).
    """
    if nbytes == 0:
        return np.zeros(0, dtype=np.uint8)
    return np.frombuffer((ctypes.c_uint8 * nbytes).from_address(ptr), dtype=np.uint8)
