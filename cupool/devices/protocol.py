"""The device protocol: the few things cupool's runtime needs from a GPU.

A :class:`Device` gives out device memory (:meth:`~Device.reserve`), pinned host
memory (:meth:`~Device.alloc_pinned`), streams and events, and moves bytes between
them with asynchronous copies. Two backends implement it: ``emulated`` (host
memory and worker threads; runs everywhere) and ``cuda`` (CuPy's CUDA runtime).

Units: sizes and byte counts are ``int`` bytes; pointers are ``int`` addresses;
bandwidths are GB/s with 1 GB = 10**9 bytes (as links are specified); latencies are
microseconds.

Ordering contract (the same on both backends)::

    stream A:  copy_h2d(x) ── record(e) ── copy_d2h(y)
    stream B:  wait_event(e) ── host_callback(f)       f runs after copy_h2d(x) finished

- Work on one stream runs in the order it was enqueued (FIFO).
- ``event.record(stream)`` marks the point *now* at the end of ``stream``'s queue;
  the event completes when the stream reaches that point. Recording again moves the
  mark; ``stream.wait_event(event)`` waits for the mark as it was when
  ``wait_event`` was called (later records do not affect it). An event never
  recorded counts as complete, as in CUDA.
- Streams made by :meth:`Device.create_stream` do not synchronise with each other
  or with :attr:`Device.default_stream`; only events order them.
- Work on :attr:`Device.default_stream` is ordered after earlier default-stream
  work. It may run asynchronously (cuda) or in the caller (emulated): call
  ``default_stream.synchronize()`` before reading results either way.
- Work that fails on a stream (a host callback raising) does not stop the stream;
  the first failure is raised as :class:`~cupool.devices.errors.StreamTaskError`
  by the next ``synchronize()`` of that stream or of the device; until then later
  work can see it with ``stream.pending_failure()``.

Arrays: :meth:`Device.array_at` gives an array of any dtype and shape over reserved bytes,
of the backend's type (a ``cupy.ndarray`` on ``cuda``; a NumPy view on ``emulated``, or a
``cupy.ndarray`` there too when it was opened with ``cupy_arrays=True``).

Ownership: the caller owns what it reserved and returns it with :meth:`Device.release`
/ :meth:`Device.free_pinned`; :meth:`Device.close` returns whatever is still out.
A :class:`~cupool.devices.memory.Memory` never frees anything by being garbage-collected.
The blocks themselves (:class:`~cupool.devices.memory.Memory`, the registry of live ones,
:func:`~cupool.devices.memory.host_view`) live in :mod:`cupool.devices.memory`, the argument
checks every operation runs in :mod:`cupool.devices.checks`.

Statistics (:meth:`Device.stats`) are one flat ``dict[str, int]``; keys are
``<quantity>.<qualifier>``:

=============================  ===============================================
``copy_count.h2d|d2h|d2d``     copies done (emulated) / issued (cuda)
``copy_bytes.h2d|d2h|d2d``     bytes of those copies
``host_callbacks.count``       host callbacks enqueued (Python on a stream's timeline)
``launches.count``             host work launched as a stream's device work
                               (:meth:`Device.launch`: the emulated kernels)
``event_records.count``        events recorded on a stream
``stream_waits.count``         stream waits for an event enqueued
``reserved_bytes.current``     device bytes reserved and not released
``reserved_bytes.peak``        maximum of ``reserved_bytes.current``
``reservations.current``       number of live reservations
``pinned_bytes.current``       pinned host bytes allocated and not freed
``pinned_bytes.peak``          maximum of ``pinned_bytes.current``
=============================  ===============================================

After ``synchronize()`` the copy counters are exact on both backends.
"""

from __future__ import annotations

import functools
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from cupool.devices.checks import check_layout, check_pointer, check_size
from cupool.devices.errors import (
    DeviceClosedError,
    DeviceError,
    InvalidPointerError,
    StreamTaskError,
)
from cupool.devices.memory import DEVICE_MEMORY, PINNED_MEMORY, LiveBlocks, Memory, host_view

H2D = "h2d"
D2H = "d2h"
D2D = "d2d"
COPY_KINDS = (H2D, D2H, D2D)
"""Copy directions: host→device, device→host, device→device."""


def callable_name(fn: Callable[[], object]) -> str:
    """A short name for ``fn`` in error messages: its ``__name__``, through
    ``functools.partial`` layers; never its ``repr`` (which can be as large as the data
    the callable holds, and is paid on every enqueue)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__name__", None) or type(fn).__name__


class StreamFailures:
    """The first failure of a stream's work, kept until ``synchronize`` reports it
    (a helper for backends: both run every task through :meth:`run`)."""

    def __init__(self, stream_name: str) -> None:
        self.stream_name = stream_name
        self.lock = threading.Lock()  # guards first
        self.first: tuple[str, BaseException] | None = None

    def run(self, task: str, fn: Callable[[], object]) -> None:
        """Run ``fn``; remember its exception if it is the stream's first."""
        try:
            fn()
        except BaseException as exc:
            with self.lock:
                if self.first is None:
                    self.first = (task, exc)

    def raise_first(self) -> None:
        with self.lock:
            first, self.first = self.first, None
        if first is not None:
            task, exc = first
            raise StreamTaskError(self.stream_name, task, repr(exc)) from exc


class Stream(ABC):
    """An ordered queue of device work (see the module's ordering contract).

    Streams live as long as their device; create a few and reuse them.
    """

    def __init__(self, device: Device, name: str) -> None:
        self.device = device
        self.name = name

    def wait_event(self, event: Event) -> None:
        """Make later work on this stream wait until ``event``'s current mark completes.
        Does not block the caller (except on the emulated default stream)."""
        self.device._check_open(f"stream {self.name!r}.wait_event()")
        self.device._check_own(event, Event, "wait_event")
        self._wait_event(event)
        self.device._add_stat("stream_waits.count", 1)

    def synchronize(self) -> None:
        """Block until all work enqueued so far on this stream has run; raise the
        first :class:`StreamTaskError` of the stream, if any."""
        self.device._check_open(f"stream {self.name!r}.synchronize()")
        self._synchronize()

    def query(self) -> bool:
        """True when all work enqueued so far on this stream has run."""
        self.device._check_open(f"stream {self.name!r}.query()")
        return self._query()

    def pending_failure(self) -> str | None:
        """``"task failed: error"`` for the first failure of this stream's work that no
        ``synchronize()`` has reported yet, else ``None``; does not clear it. Work on the
        stream (a host callback) can ask whether what ran before it failed."""
        failures = self._failures
        with failures.lock:
            first = failures.first
        return None if first is None else f"{first[0]} failed: {first[1]!r}"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} of {self.device.name!r}>"

    @abstractmethod
    def _wait_event(self, event: Event) -> None: ...

    @abstractmethod
    def _synchronize(self) -> None: ...

    @abstractmethod
    def _query(self) -> bool: ...


class Event(ABC):
    """A mark in a stream's queue (see the module's ordering contract)."""

    def __init__(self, device: Device) -> None:
        self.device = device

    def record(self, stream: Stream) -> None:
        """Put this event's mark at the current end of ``stream``'s queue."""
        self.device._check_open("event.record()")
        self.device._check_own(stream, Stream, "event.record")
        self._record(stream)
        self.device._add_stat("event_records.count", 1)

    def query(self) -> bool:
        """True when the stream has reached the last recorded mark (or none was recorded)."""
        self.device._check_open("event.query()")
        return self._query()

    def synchronize(self) -> None:
        """Block the caller until :meth:`query` would return True."""
        self.device._check_open("event.synchronize()")
        self._synchronize()

    def seconds_since(self, start: Event) -> float:
        """Seconds from ``start``'s mark to this event's, as the stream(s) reached them
        (both made with ``timing=True``, recorded and complete: synchronize first); what
        a host callback at each mark would read from a clock, without one. Raises
        :class:`DeviceError` for an event never recorded or not yet complete."""
        self.device._check_open("event.seconds_since()")
        self.device._check_own(start, Event, "seconds_since")
        return self._seconds_since(start)

    @abstractmethod
    def _record(self, stream: Stream) -> None: ...

    @abstractmethod
    def _query(self) -> bool: ...

    @abstractmethod
    def _synchronize(self) -> None: ...

    @abstractmethod
    def _seconds_since(self, start: Event) -> float: ...


class Device(ABC):
    """One device: memory, streams, events and copies. Thread-safe.

    The public methods check arguments and state, keep the statistics and the
    registry of live blocks, and call the backend's ``_hooks``; backends never
    repeat those checks. Use as a context manager, or call :meth:`close`.
    """

    kind: ClassVar[str] = "abstract"

    def __init__(self, name: str) -> None:
        self.name = name
        self.reason = ""  # why open_device("auto") chose this backend; set by open_device
        # _lock guards _closed, _blocks and _stats (workers update copy stats under it).
        self._lock = threading.Lock()
        self._closed = False
        self._blocks = {DEVICE_MEMORY: LiveBlocks(), PINNED_MEMORY: LiveBlocks()}
        self._stats: dict[str, int] = {key: 0 for key in _STAT_KEYS}

    # -- memory ---------------------------------------------------------------------
    def reserve(self, size: int) -> Memory:
        """Reserve ``size`` bytes of device memory (uninitialised, 256-byte aligned).

        Raises :class:`InvalidSizeError` for ``size <= 0`` and
        :class:`DeviceOutOfMemoryError` when the device cannot supply it.
        """
        size = check_size("reserve", "size", size)
        self._check_open(f"reserve(size={size})")
        memory = self._reserve(size)
        self._register(memory, "reserved_bytes", "reservations")
        return memory

    def release(self, memory: Memory) -> None:
        """Return a reservation. Work already enqueued that touches it must be done
        (synchronize first): the cuda backend frees it at once."""
        self._unregister("release", memory, DEVICE_MEMORY, "reserved_bytes", "reservations")
        self._release(memory)

    def alloc_pinned(self, size: int) -> Memory:
        """Allocate ``size`` bytes of pinned (page-locked) host memory, uninitialised."""
        size = check_size("alloc_pinned", "size", size)
        self._check_open(f"alloc_pinned(size={size})")
        memory = self._alloc_pinned(size)
        self._register(memory, "pinned_bytes", None)
        return memory

    def free_pinned(self, memory: Memory) -> None:
        """Free a pinned allocation (same rule as :meth:`release`)."""
        self._unregister("free_pinned", memory, PINNED_MEMORY, "pinned_bytes", None)
        self._free_pinned(memory)

    def pinned_array(self, memory: Memory) -> np.ndarray:
        """A ``uint8`` NumPy view of a pinned allocation (host-addressable on every
        backend). The view does not keep the bytes alive: drop it before freeing."""
        self._check_live(memory, PINNED_MEMORY, "pinned_array", "pinned allocation")
        return host_view(memory.ptr, memory.size)

    def _check_live(self, memory: Memory, kind: str, operation: str, what: str) -> None:
        """:class:`InvalidPointerError` unless ``memory`` is a live block of ``kind``."""
        with self._lock:
            live = self._blocks[kind].containing(memory.ptr)
        if live is not memory:
            raise InvalidPointerError(operation, memory.ptr, memory.size,
                                      f"{memory!r} is not a live {what} of device "
                                      f"{self.name!r}")

    def array_at(self, ptr: int, nbytes: int, dtype: object = "uint8",
                 shape: tuple[int, ...] | None = None, owner: object = None):
        """An array of ``dtype`` and ``shape`` over device bytes ``[ptr, ptr + nbytes)``,
        which must lie inside one live reservation of this device.

        ``shape=None`` means flat: ``nbytes // itemsize`` elements (``nbytes`` must then be a
        multiple of the item size); a given shape may use fewer than ``nbytes`` bytes, never
        more. The backend decides the array type: ``cuda`` gives a ``cupy.ndarray`` over
        ``MemoryPointer(UnownedMemory(ptr, nbytes, owner), 0)`` (``owner``, e.g. the
        :class:`Memory` or a pool's ``MemoryPointer``, is kept alive by the array);
        ``emulated`` gives a NumPy view of its host-backed bytes, or the same
        ``cupy.ndarray`` when opened with ``cupy_arrays=True``. Making one costs
        microseconds (CuPy's constructor): make it when the bytes arrive, not per access.
        Raises :class:`InvalidSizeError` for a bad dtype, shape or size and
        :class:`InvalidPointerError` for bytes outside every live reservation.
        """
        nbytes = check_size("array_at", "nbytes", nbytes, allow_zero=True)
        ptr = check_pointer("array_at", "ptr", ptr)
        dtype, shape = check_layout("array_at", nbytes, dtype, shape)
        self._check_open(f"array_at(ptr={ptr:#x}, nbytes={nbytes})")
        with self._lock:
            block = self._blocks[DEVICE_MEMORY].containing(ptr)
        if block is None or ptr + nbytes > block.end:
            raise InvalidPointerError("array_at", ptr, nbytes,
                                      f"{nbytes} bytes at {ptr:#x} are not inside one live "
                                      f"reservation of device {self.name!r}")
        return self._array_at(ptr, nbytes, dtype, shape, block if owner is None else owner, block)

    def mem_info(self) -> tuple[int, int]:
        """``(free_bytes, total_bytes)`` of device memory, like ``cudaMemGetInfo``."""
        self._check_open("mem_info()")
        return self._mem_info()

    # -- streams, events, copies ----------------------------------------------------
    @property
    @abstractmethod
    def default_stream(self) -> Stream:
        """The default stream (see the module's ordering contract)."""

    def create_stream(self, name: str | None = None) -> Stream:
        """A new stream that synchronises only through events."""
        self._check_open("create_stream()")
        return self._create_stream(name)

    def create_event(self, timing: bool = False) -> Event:
        """A new event, never recorded (so complete). ``timing=True``: it can be asked
        :meth:`Event.seconds_since` another timing event (CUDA events are made without
        timing otherwise: they are cheaper to wait for)."""
        self._check_open("create_event()")
        return self._create_event(bool(timing))

    def copy_h2d_async(self, dst_ptr: int, src_ptr: int, nbytes: int, stream: Stream) -> None:
        """Enqueue a copy of ``nbytes`` from pinned host ``src_ptr`` to device ``dst_ptr``."""
        self._copy(H2D, dst_ptr, src_ptr, nbytes, stream)

    def copy_d2h_async(self, dst_ptr: int, src_ptr: int, nbytes: int, stream: Stream) -> None:
        """Enqueue a copy of ``nbytes`` from device ``src_ptr`` to pinned host ``dst_ptr``."""
        self._copy(D2H, dst_ptr, src_ptr, nbytes, stream)

    def copy_d2d_async(self, dst_ptr: int, src_ptr: int, nbytes: int, stream: Stream) -> None:
        """Enqueue a copy of ``nbytes`` between two device ranges (which must not overlap)."""
        self._copy(D2D, dst_ptr, src_ptr, nbytes, stream)

    def host_callback(self, stream: Stream, fn: Callable[[], object]) -> None:
        """Enqueue ``fn()`` on ``stream``: it runs on a host thread when the stream
        reaches it, and later work on the stream waits for it to return. On the cuda
        backend ``fn`` must not call CUDA (a ``cudaLaunchHostFunc`` rule)."""
        self._host_work("host_callback", stream, fn, self._host_callback, "host_callbacks")

    def launch(self, stream: Stream, fn: Callable[[], object]) -> None:
        """Enqueue ``fn()`` on ``stream`` as the stream's own device work: what a kernel
        does on a GPU, done by a host function where the device is emulated (its kernels'
        NumPy twins, an op's callable over emulated memory, an op's duration spent).
        Unlike :meth:`host_callback` it is not bookkeeping on the device's timeline: a
        backend whose streams run only kernels (``cuda``) refuses it with
        :class:`DeviceError` (run the callable with the stream current instead)."""
        self._host_work("launch", stream, fn, self._launch, "launches")

    def _host_work(self, operation: str, stream: Stream, fn, enqueue, counter: str) -> None:
        """Check ``operation``'s arguments, ``enqueue(stream, fn)``, count it."""
        self._check_open(f"{operation}()")
        self._check_own(stream, Stream, operation)
        if not callable(fn):
            raise DeviceError(f"{operation}(fn={fn!r}): fn must be callable")
        enqueue(stream, fn)
        self._add_stat(f"{counter}.count", 1)

    def synchronize(self) -> None:
        """Block until all work on all streams of this device has run; raise the first
        :class:`StreamTaskError` of any stream."""
        self._check_open("synchronize()")
        self._synchronize()

    # -- statistics, lifetime -------------------------------------------------------
    def stats(self) -> dict[str, int]:
        """A snapshot of the counters (key grammar in the module docstring)."""
        with self._lock:
            return dict(self._stats)

    def describe(self) -> dict:
        """Plain facts about this device (kind, name, memory, options, reason)."""
        free, total = self.mem_info()
        return {"kind": self.kind, "name": self.name, "free_bytes": free,
                "total_bytes": total, "reason": self.reason, **self._options()}

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Finish enqueued work, stop the streams and return every block still out.
        Idempotent; after it every other method raises :class:`DeviceClosedError`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            leftovers = {kind: blocks.all() for kind, blocks in self._blocks.items()}
            self._blocks = {DEVICE_MEMORY: LiveBlocks(), PINNED_MEMORY: LiveBlocks()}
            for prefix in ("reserved_bytes", "pinned_bytes"):
                self._stats[f"{prefix}.current"] = 0
            self._stats["reservations.current"] = 0
        self._close(leftovers[DEVICE_MEMORY], leftovers[PINNED_MEMORY])

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} {self.name!r} {state}>"

    # -- helpers for backends ---------------------------------------------------------
    def _check_open(self, operation: str) -> None:
        if self._closed:
            raise DeviceClosedError(self.name, operation)

    def _check_own(self, thing: object, cls: type, operation: str) -> None:
        if not isinstance(thing, cls) or thing.device is not self:
            raise DeviceError(f"{operation}: {thing!r} is not a {cls.__name__} of device "
                              f"{self.name!r}")

    def _add_stat(self, key: str, amount: int) -> None:
        with self._lock:
            self._stats[key] += amount

    def _register(self, memory: Memory, bytes_key: str, count_key: str | None) -> None:
        with self._lock:
            self._blocks[memory.kind].add(memory)
            current = self._stats[f"{bytes_key}.current"] + memory.size
            self._stats[f"{bytes_key}.current"] = current
            self._stats[f"{bytes_key}.peak"] = max(self._stats[f"{bytes_key}.peak"], current)
            if count_key is not None:
                self._stats[f"{count_key}.current"] += 1

    def _unregister(self, operation: str, memory: Memory, kind: str, bytes_key: str,
                    count_key: str | None) -> None:
        with self._lock:
            if self._closed:
                raise DeviceClosedError(self.name, f"{operation}({memory!r})")
            if not isinstance(memory, Memory) or memory.kind != kind \
                    or not self._blocks[kind].remove(memory):
                ptr = getattr(memory, "ptr", 0)
                size = getattr(memory, "size", 0)
                raise InvalidPointerError(operation, ptr, size,
                                          f"{memory!r} is not a live {kind} block of device "
                                          f"{self.name!r} (freed twice, or not from here?)")
            self._stats[f"{bytes_key}.current"] -= memory.size
            if count_key is not None:
                self._stats[f"{count_key}.current"] -= 1

    def _copy(self, kind: str, dst_ptr: int, src_ptr: int, nbytes: int, stream: Stream) -> None:
        operation = f"copy_{kind}_async"
        nbytes = check_size(operation, "nbytes", nbytes, allow_zero=True)
        dst_ptr = check_pointer(operation, "dst_ptr", dst_ptr)
        src_ptr = check_pointer(operation, "src_ptr", src_ptr)
        self._check_open(f"{operation}(nbytes={nbytes})")
        self._check_own(stream, Stream, operation)
        self._enqueue_copy(kind, dst_ptr, src_ptr, nbytes, stream)

    def _options(self) -> dict:
        """Backend options for :meth:`describe`."""
        return {}

    # -- backend hooks ----------------------------------------------------------------
    @abstractmethod
    def _reserve(self, size: int) -> Memory: ...

    @abstractmethod
    def _release(self, memory: Memory) -> None: ...

    @abstractmethod
    def _alloc_pinned(self, size: int) -> Memory: ...

    @abstractmethod
    def _free_pinned(self, memory: Memory) -> None: ...

    @abstractmethod
    def _mem_info(self) -> tuple[int, int]: ...

    @abstractmethod
    def _array_at(self, ptr: int, nbytes: int, dtype: np.dtype, shape: tuple[int, ...],
                  owner: object, block: Memory):
        """The array (checked arguments; ``block`` is the live reservation holding it)."""

    @abstractmethod
    def _create_stream(self, name: str | None) -> Stream: ...

    @abstractmethod
    def _create_event(self, timing: bool) -> Event: ...

    @abstractmethod
    def _enqueue_copy(self, kind: str, dst_ptr: int, src_ptr: int, nbytes: int,
                      stream: Stream) -> None: ...

    @abstractmethod
    def _host_callback(self, stream: Stream, fn: Callable[[], object]) -> None: ...

    def _launch(self, stream: Stream, fn: Callable[[], object]) -> None:
        raise DeviceError(f"launch(): device {self.name!r} ({self.kind}) runs kernels on "
                          f"its streams, not Python; call {callable_name(fn)} with the "
                          f"stream current instead")

    @abstractmethod
    def _synchronize(self) -> None: ...

    @abstractmethod
    def _close(self, device_blocks: list[Memory], pinned_blocks: list[Memory]) -> None:
        """Stop streams and free the blocks still out (the registry is already cleared)."""


_STAT_KEYS = (
    *(f"copy_count.{k}" for k in COPY_KINDS),
    *(f"copy_bytes.{k}" for k in COPY_KINDS),
    "host_callbacks.count", "launches.count", "event_records.count", "stream_waits.count",
    "reserved_bytes.current", "reserved_bytes.peak", "reservations.current",
    "pinned_bytes.current", "pinned_bytes.peak",
)
