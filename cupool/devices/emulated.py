"""The emulated device: the device protocol on host memory and worker threads.

It is the default wherever no GPU is present, and the whole runtime runs on it, so
it is faithful where that matters and strict where a real GPU would be silent:

- **Memory.** Each reservation and each pinned allocation is its own NumPy ``uint8``
  buffer, 256-byte aligned; ``Memory.ptr`` is its real address, so
  ``cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(m.ptr, m.size, m), 0)`` points
  into it and ``cupy.ndarray`` objects can be built over it (no kernel can run on it,
  but the allocator protocol, views and pointer arithmetic are real). The bytes stay
  addressable while the :class:`~cupool.devices.memory.Memory` object lives, even
  after ``release`` (which only returns the capacity), so no use of this device can
  crash the process.
- **Capacity.** ``mem_info()`` reports ``capacity`` minus the bytes reserved. The
  default capacity is 80% of the host's *available* memory when the device is
  opened, rounded down to a MiB (buffers are committed lazily by the OS, so this is
  a ceiling, not a reservation). Pinned memory is not limited beyond what the host
  gives.
- **Checked ranges.** Every copy must lie inside one live block of the right kind
  (host side: a pinned allocation of this device; device side: a reservation);
  anything else raises :class:`~cupool.devices.errors.InvalidPointerError` quoting
  the addresses, instead of corrupting memory. Overlapping device→device copies are
  refused too (undefined behaviour in CUDA).
- **Streams.** Each stream made by ``create_stream`` is a daemon worker thread
  draining a FIFO queue. ``default_stream`` runs its work synchronously in the
  calling thread (callers are serialised); ``wait_event`` on it blocks the caller.
- **Copies** really move the bytes with ``ctypes.memmove`` (a ctypes foreign call,
  which releases the GIL, so streams copy in parallel with Python code). A copy can
  be paced: it then takes ``max(actual, latency_us + nbytes / bandwidth)`` of wall
  time, measured from when it starts; paced copies of one direction run one at a
  time, like one copy engine per direction sharing one link. A copy's start is when its
  stream thread reached it, except that a copy reached at most ``LINK_CATCH_UP_S`` after
  it could have started -- after the previous copy on its link was due to end and after
  the events its stream waited for were recorded -- starts then: a copy engine takes the
  next copy at once, a woken thread does not, and those wake-up delays would otherwise
  add up along a queue of copies.
- **Launches** (``launch``) run a host function on the stream's thread as the
  stream's device work: the kernels' NumPy twins, op callables, op durations. **Host
  callbacks** (``host_callback``) run the same way; they stand for Python on a GPU
  stream's timeline (bookkeeping), which the runtime avoids, and are counted apart.
- **Gates** (``hold_streams``). Work enqueued behind a :class:`StreamGate` waits until
  the gate is released; the release counts as a recorded event for the pacing above: a
  copy first in line starts at the release, not when its woken thread reaches it.
- **Close.** ``close()`` lets enqueued work finish (up to ``close_timeout`` seconds,
  then it stops honouring waits and pacing), joins the threads and returns every
  block. Garbage-collecting an unclosed device stops its threads without joining.
"""

from __future__ import annotations

import ctypes
import itertools
import queue
import threading
import time
from collections.abc import Callable

import numpy as np
import psutil

from cupool.core.units import parse_bytes
from cupool.devices.emulated_sync import Shared, StreamGate, Token, wait_token
from cupool.devices.errors import (
    DeviceClosedError,
    DeviceError,
    DeviceOutOfMemoryError,
    InvalidPointerError,
    InvalidSizeError,
    StreamTaskError,
)
from cupool.devices.memory import DEVICE_MEMORY, PINNED_MEMORY, Memory
from cupool.devices.protocol import (
    COPY_KINDS,
    D2D,
    D2H,
    H2D,
    Device,
    Event,
    Stream,
    StreamFailures,
    callable_name,
)

ALIGNMENT = 256
"""Bytes every emulated block is aligned to (what ``cudaMalloc`` guarantees)."""

_STOP = object()


def default_capacity() -> int:
    """80% of the host's available memory, rounded down to a MiB."""
    return int(psutil.virtual_memory().available * 0.8) // (1 << 20) * (1 << 20)


LINK_CATCH_UP_S = 0.0005
"""How late (wall seconds) a paced copy's thread may reach it and still start it where it
could have started (module docstring): above thread wake-up delays, below a real wait."""

class _Worker:
    """A stream's FIFO queue and the daemon thread draining it."""

    def __init__(self, failures: StreamFailures, thread_name: str) -> None:
        self.failures = failures
        self.queue: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self.run, name=thread_name, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while True:
            item = self.queue.get()
            try:
                if item is _STOP:
                    return
                self.failures.run(*item)
            finally:
                self.queue.task_done()


class EmulatedStream(Stream):
    """A stream of the emulated device: a worker thread, or the caller for the default
    stream (``synchronous=True``)."""

    def __init__(self, device: EmulatedDevice, name: str, synchronous: bool = False) -> None:
        super().__init__(device, name)
        self._shared = device._shared
        self._failures = StreamFailures(name)
        self._worker = None if synchronous else _Worker(self._failures,
                                                        f"cupool-{device.name}-{name}")
        self._caller_lock = threading.Lock()  # serialises callers of a synchronous stream
        self._ready_at = 0.0  # when the last event this stream waited for was recorded
        self._held: list | None = None  # work kept back while a gate holds the stream

    def _submit(self, task: str, fn: Callable[[], object]) -> None:
        if self._worker is None:
            with self._caller_lock:
                self._failures.run(task, fn)
        elif self._held is not None:  # held: kept back, without waking the thread
            self._held.append((task, fn))
        else:
            self._worker.queue.put((task, fn))

    def _release_held(self, released_at: float, here: bool = False) -> None:
        """Hand the work kept back while held to the thread, as one task that runs each
        piece as its own (paced copies count ``released_at`` as their earliest start).
        ``here``: run it on the calling thread instead, where the stream's thread has
        nothing queued or running (work enqueued meanwhile joins it, in order)."""
        held = self._held
        if not held:
            self._held = None
            return
        failures = self._failures

        def held_work() -> None:
            self._ready_at = max(self._ready_at, released_at)
            k = 0
            while k < len(held):  # run here: work enqueued meanwhile is appended
                failures.run(*held[k])
                k += 1

        if here and self._worker.queue.unfinished_tasks == 0:
            held_work()
            self._held = None
            return
        self._held = None
        self._worker.queue.put(("held work", held_work))

    def _wait_event(self, event: Event) -> None:
        if event._token is not None:
            self._wait_for(event._token, "wait_event")

    def _wait_for(self, token: Token, task: str) -> None:
        """Enqueue a wait for ``token`` (an event's record, a gate's release); paced
        copies after it may start from when it was set (its ``recorded_at``)."""
        shared = self._shared

        def wait() -> None:
            wait_token(token, shared)
            self._ready_at = max(self._ready_at, token.recorded_at)

        self._submit(task, wait)

    def _synchronize(self) -> None:
        self._wait_reached(self._mark_reached())

    def _mark_reached(self) -> Token | None:
        """Enqueue a token the stream sets when it reaches it; ``None`` when nothing
        enqueued is still to run (the default stream, an idle worker): then there is
        nothing to wait for, and no thread to wake."""
        if self._worker is None or self._query():
            return None
        reached = Token()
        self._submit("synchronize", reached.set)
        return reached

    def _wait_reached(self, reached: Token | None) -> None:
        """Block until the stream set ``reached`` (if any); raise its first failure."""
        if reached is not None:
            wait_token(reached, self._shared)
        self._failures.raise_first()

    def _query(self) -> bool:
        if self._worker is None:
            return True
        if self._held:  # work kept back by a gate has not run
            return False
        with self._worker.queue.mutex:
            return self._worker.queue.unfinished_tasks == 0

    def _stop(self) -> None:
        if self._worker is not None:
            self._worker.queue.put(_STOP)


class EmulatedEvent(Event):
    """An event of the emulated device: each record makes a new token the stream sets."""

    def __init__(self, device: EmulatedDevice) -> None:
        super().__init__(device)
        self._token: Token | None = None

    def _record(self, stream: Stream) -> None:
        token = Token()
        self._token = token

        def record() -> None:
            token.recorded_at = time.perf_counter()
            token.set()

        stream._submit("event.record", record)

    def _query(self) -> bool:
        token = self._token
        return token is None or token.is_set()

    def record_in_work(self) -> Callable[[], None]:
        """Record this event from inside work already launched on a stream: returns the
        function that completes the mark when that work calls it, at its place in the
        stream's order (what :meth:`record` enqueues as its own task, without the
        hand-off: the op work of a batch stamps its timing marks as it goes)."""
        self.device._check_open("event.record_in_work()")
        token = Token()
        self._token = token

        def record() -> None:
            token.recorded_at = time.perf_counter()
            token.set()

        self.device._add_stat("event_records.count", 1)
        return record

    def wait_in_work(self) -> Callable[[], None]:
        """Wait for this event from inside work already launched on a stream: returns the
        function that blocks its stream until the event's current mark completes (the
        mark as it is now, as :meth:`Stream.wait_event` takes it), at its place in the
        stream's order, without a hand-off of its own."""
        self.device._check_open("event.wait_in_work()")
        token, shared = self._token, self.device._shared
        self.device._add_stat("stream_waits.count", 1)

        def wait() -> None:
            if token is not None:
                wait_token(token, shared)

        return wait

    @property
    def recorded_at(self) -> float:
        """When the stream reached the last recorded mark (``time.perf_counter`` s; 0.0
        when never recorded or not yet reached): for work on the emulated streams that
        keeps a clock, as a GPU kernel reads ``%globaltimer``."""
        token = self._token
        return token.recorded_at if token is not None and token.is_set() else 0.0

    def _synchronize(self) -> None:
        token = self._token
        if token is not None:
            wait_token(token, self.device._shared)

    def _seconds_since(self, start: Event) -> float:
        marks = []
        for event in (start, self):
            token = event._token
            if token is None or not token.is_set():
                raise DeviceError(f"seconds_since: {event!r} was never recorded or its "
                                  f"stream has not reached the mark")
            marks.append(token.recorded_at)
        return marks[1] - marks[0]


class EmulatedDevice(Device):
    """The device protocol on the host (see the module docstring).

    ``capacity``: device bytes (int or ``"4GiB"``), default :func:`default_capacity`.
    ``h2d_gbps``/``d2h_gbps``/``d2d_gbps``: link bandwidth per direction in GB/s
    (10**9 bytes/s); ``None`` = as fast as ``memmove``. ``latency_us``: fixed cost
    added to every copy's pacing (µs). ``close_timeout``: seconds ``close()`` waits for
    enqueued work before aborting waits. ``cupy_arrays``: :meth:`array_at` returns
    ``cupy.ndarray`` objects over the emulated bytes (as the cuda backend does; no kernel
    can run on them here) instead of NumPy views.
    """

    kind = "emulated"
    _stream_class = EmulatedStream  # the class of its streams (a subclass may inject faults)

    def __init__(self, capacity: int | str | None = None, *, h2d_gbps: float | None = None,
                 d2h_gbps: float | None = None, d2d_gbps: float | None = None,
                 latency_us: float = 0.0, close_timeout: float = 10.0,
                 cupy_arrays: bool = False, name: str = "emulated") -> None:
        super().__init__(name)
        self.cupy_arrays = bool(cupy_arrays)
        self.capacity = default_capacity() if capacity is None else parse_bytes(capacity,
                                                                                 "capacity")
        self.bandwidth_gbps = {H2D: h2d_gbps, D2H: d2h_gbps, D2D: d2d_gbps}
        for kind, gbps in self.bandwidth_gbps.items():
            if gbps is not None and not gbps > 0:
                raise InvalidSizeError("EmulatedDevice", f"{kind}_gbps", gbps,
                                       "must be > 0 GB/s (or None for unpaced)")
        if not latency_us >= 0:
            raise InvalidSizeError("EmulatedDevice", "latency_us", latency_us, "must be >= 0")
        self.latency_us = float(latency_us)
        self.close_timeout = float(close_timeout)
        self._shared = Shared()
        self._committed = 0  # device bytes reserved (guarded by _lock), for mem_info
        self._links = {kind: threading.Lock() for kind in COPY_KINDS}
        self._link_free_at = {kind: 0.0 for kind in COPY_KINDS}  # last paced copy's end
        self._streams: list[EmulatedStream] = []
        self._stream_numbers = itertools.count(1)
        self._default = self._stream_class(self, "default", synchronous=True)

    # -- memory -----------------------------------------------------------------------
    def _new_block(self, operation: str, size: int, kind: str) -> Memory:
        try:
            raw = np.empty(size + ALIGNMENT - 1, dtype=np.uint8)
        except MemoryError:
            free, total = self._mem_info()
            raise DeviceOutOfMemoryError(operation, size, free, total) from None
        skip = -raw.ctypes.data % ALIGNMENT
        buffer = raw[skip:skip + size]
        return Memory(ptr=buffer.ctypes.data, size=size, kind=kind, keepalive=buffer)

    def _reserve(self, size: int) -> Memory:
        with self._lock:
            free = self.capacity - self._committed
            if size > free:
                raise DeviceOutOfMemoryError("reserve", size, free, self.capacity)
            self._committed += size
        try:
            return self._new_block("reserve", size, DEVICE_MEMORY)
        except BaseException:
            with self._lock:
                self._committed -= size
            raise

    def _release(self, memory: Memory) -> None:
        # The buffer itself lives on while anyone (a queued copy, a CuPy array) holds it.
        with self._lock:
            self._committed -= memory.size

    def _alloc_pinned(self, size: int) -> Memory:
        return self._new_block("alloc_pinned", size, PINNED_MEMORY)

    def _free_pinned(self, memory: Memory) -> None:
        pass

    def _mem_info(self) -> tuple[int, int]:
        with self._lock:
            return self.capacity - self._committed, self.capacity

    def _array_at(self, ptr: int, nbytes: int, dtype: np.dtype, shape: tuple[int, ...],
                  owner: object, block: Memory):
        used = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if not self.cupy_arrays:
            # A slice of the block's own buffer: the view keeps the bytes addressable.
            start = ptr - block.ptr
            return block.keepalive[start:start + used].view(dtype).reshape(shape)
        import cupy  # CuPy's allocator objects work without a driver

        memory = cupy.cuda.UnownedMemory(ptr, nbytes, owner, 0)
        return cupy.ndarray(shape, dtype=dtype, memptr=cupy.cuda.MemoryPointer(memory, 0))

    def device_array(self, memory: Memory) -> np.ndarray:
        """A ``uint8`` NumPy view of a live reservation (emulated only: for tests and
        for emulated kernels). Keeps the bytes alive."""
        self._check_live(memory, DEVICE_MEMORY, "device_array", "reservation")
        return memory.keepalive

    # -- streams, events ----------------------------------------------------------------
    @property
    def default_stream(self) -> EmulatedStream:
        return self._default

    def _create_stream(self, name: str | None) -> EmulatedStream:
        number = next(self._stream_numbers)
        stream = self._stream_class(self, name or f"stream-{number}")
        with self._lock:
            closed = self._closed
            if not closed:
                self._streams.append(stream)
        if closed:  # close() ran meanwhile: this stream's thread would never be joined
            stream._stop()
            raise DeviceClosedError(self.name, "create_stream()")
        return stream

    def _create_event(self, timing: bool) -> EmulatedEvent:  # every record is stamped
        return EmulatedEvent(self)

    def hold_streams(self, streams) -> StreamGate:
        """A gate holding ``streams`` (made by ``create_stream``): work enqueued on them
        from now on runs after :meth:`StreamGate.release`, which paced copies count as
        their earliest start (module docstring)."""
        self._check_open("hold_streams()")
        gate = StreamGate()
        for stream in streams:
            self._check_own(stream, Stream, "hold_streams")
            if stream._worker is None:
                raise DeviceError(f"hold_streams: {stream!r} runs on the caller's thread "
                                  f"(the default stream) and cannot be held")
            gate._hold(stream)
        return gate

    def _host_callback(self, stream: Stream, fn: Callable[[], object]) -> None:
        stream._submit(f"host_callback {callable_name(fn)}", fn)

    def _launch(self, stream: Stream, fn: Callable[[], object]) -> None:
        stream._submit(f"launch {callable_name(fn)}", fn)

    # -- copies ---------------------------------------------------------------------------
    def _enqueue_copy(self, kind: str, dst_ptr: int, src_ptr: int, nbytes: int,
                      stream: Stream) -> None:
        operation = f"copy_{kind}_async"
        if nbytes == 0:
            blocks: tuple[Memory, ...] = ()
        else:
            dst_kind = PINNED_MEMORY if kind == D2H else DEVICE_MEMORY
            src_kind = PINNED_MEMORY if kind == H2D else DEVICE_MEMORY
            with self._lock:
                dst = self._find(operation, "to", dst_ptr, nbytes, dst_kind)
                src = self._find(operation, "from", src_ptr, nbytes, src_kind)
            if kind == D2D and dst_ptr < src_ptr + nbytes and src_ptr < dst_ptr + nbytes:
                raise InvalidPointerError(
                    operation, dst_ptr, nbytes,
                    f"copy of {nbytes} bytes from {src_ptr:#x} to {dst_ptr:#x}: source and "
                    f"destination overlap")
            blocks = (dst, src)
        gbps = self.bandwidth_gbps[kind]
        paced_seconds = None
        if gbps is not None or self.latency_us > 0:
            paced_seconds = self.latency_us * 1e-6 + (nbytes / (gbps * 1e9) if gbps else 0.0)
        link = self._links[kind]
        shared = self._shared
        free_at = self._link_free_at

        def copy() -> None:
            keep = blocks  # the buffers stay alive until the copy has run
            if paced_seconds is None:
                ctypes.memmove(dst_ptr, src_ptr, nbytes)
            else:
                with link:
                    now = time.perf_counter()
                    ready = max(free_at[kind], stream._ready_at)
                    start = ready if ready <= now <= ready + LINK_CATCH_UP_S else now
                    deadline = start + paced_seconds
                    free_at[kind] = deadline
                    ctypes.memmove(dst_ptr, src_ptr, nbytes)
                    remaining = deadline - time.perf_counter()
                    while remaining > 0 and not shared.abort.wait(remaining):
                        remaining = deadline - time.perf_counter()
            del keep
            self._add_stat(f"copy_count.{kind}", 1)
            self._add_stat(f"copy_bytes.{kind}", nbytes)

        stream._submit(f"{operation} of {nbytes} bytes", copy)

    def reservation_containing(self, operation: str, ptr: int, nbytes: int) -> Memory:
        """The live device reservation holding ``[ptr, ptr + nbytes)``, or
        :class:`InvalidPointerError` naming the operation and the bytes (what ``kernels/``
        checks before touching emulated memory)."""
        with self._lock:
            return self._find(operation, "at", ptr, nbytes, DEVICE_MEMORY)

    def _find(self, operation: str, role: str, ptr: int, nbytes: int, kind: str) -> Memory:
        """The live block of ``kind`` holding ``[ptr, ptr + nbytes)``; caller holds _lock."""
        what = "device reservation" if kind == DEVICE_MEMORY else "pinned allocation"
        block = self._blocks[kind].containing(ptr)
        if block is None:
            raise InvalidPointerError(operation, ptr, nbytes,
                                      f"copy of {nbytes} bytes {role} {ptr:#x}: {ptr:#x} is not "
                                      f"inside any {what} of device {self.name!r}")
        if ptr + nbytes > block.end:
            raise InvalidPointerError(
                operation, ptr, nbytes,
                f"copy of {nbytes} bytes {role} {ptr:#x} runs past the end of {what} "
                f"{block.ptr:#x}+{block.size} by {ptr + nbytes - block.end} bytes")
        return block

    # -- lifetime ---------------------------------------------------------------------
    def _synchronize(self) -> None:
        with self._lock:
            streams = [self._default, *self._streams]
        # every busy stream gets its token before any is waited for: they reach them in
        # parallel, and idle ones (every stream a closed engine left) cost nothing
        tokens = [stream._mark_reached() for stream in streams]
        failures = []
        for stream, reached in zip(streams, tokens, strict=True):
            try:
                stream._wait_reached(reached)
            except StreamTaskError as exc:
                failures.append(exc)
        if failures:
            raise failures[0]

    def _close(self, device_blocks: list[Memory], pinned_blocks: list[Memory]) -> None:
        with self._lock:
            streams = list(self._streams)
            self._committed = 0
        for stream in streams:
            stream._stop()
        deadline = time.monotonic() + self.close_timeout
        for stream in streams:
            stream._worker.thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [s for s in streams if s._worker.thread.is_alive()]
        if stuck:
            self._shared.abort.set()
            for stream in stuck:
                stream._worker.thread.join(1.0)
            still = [s.name for s in stuck if s._worker.thread.is_alive()]
            if still:
                raise DeviceError(f"close(): streams {still} still run a task after "
                                  f"{self.close_timeout + 1.0:.1f} s (a host callback that "
                                  f"never returns?)")

    def _options(self) -> dict:
        return {"capacity": self.capacity, "cupy_arrays": self.cupy_arrays,
                "h2d_gbps": self.bandwidth_gbps[H2D],
                "d2h_gbps": self.bandwidth_gbps[D2H], "d2d_gbps": self.bandwidth_gbps[D2D],
                "latency_us": self.latency_us}

    def __del__(self) -> None:
        try:
            if not self._closed:
                for stream in self._streams:
                    stream._stop()
        except Exception:  # never raise in __del__
            pass
