"""Injected faults: an emulated device whose n-th reservation, pinned allocation, copy or
stream operation fails, and whose free memory another process can take between steps.

For tests and benchmarks only (nothing in the runtime makes one): a
:class:`FaultyDevice` is an :class:`~cupool.devices.emulated.EmulatedDevice` that behaves
exactly like one until :meth:`FaultyDevice.arm` is given :class:`Fault` s. Every call of
an operation in :data:`OPERATIONS` is counted from the last ``arm`` (in the caller's
program order: the runtime enqueues from one thread, so the n-th call is the same call in
every run), and the calls a fault names fail with the error the ``cuda`` backend raises
for that call when CUDA refuses it::

    reserve, alloc_pinned           DeviceOutOfMemoryError(operation, size, free, total)
                                    (cudaErrorMemoryAllocation, with mem_info's numbers)
    copy_h2d, copy_d2h, copy_d2d    DeviceError "copy_h2d_async of 4096 bytes on 'x': ..."
    create_stream, create_event,    DeviceError "<operation>() on 'x': ..."
    record, launch, host_callback,
    synchronize
    wait_event, stream_synchronize DeviceError "stream 's'.wait_event() on 'x': ..."
                                    (a stream's own synchronize, apart from the device's)

A fault at ``stage="run"`` (stream work only: copies, launches, host callbacks) lets the
enqueue succeed and fails the work when its stream reaches it, as a GPU reports an
asynchronous failure: nothing is copied (nothing launched), and the stream's next
``synchronize`` raises :class:`~cupool.devices.errors.StreamTaskError` naming the task.

:meth:`FaultyDevice.occupy` takes free device memory as another process would (its bytes
are not this device's reservations: the statistics do not count them, ``mem_info`` and
``reserve`` see them gone) and :meth:`FaultyDevice.vacate` gives it back.

``injected`` lists every fault that fired (:class:`Injected`: operation, call number,
message), so a test can tell an injected failure from a real one.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from cupool.devices.emulated import EmulatedDevice, EmulatedEvent, EmulatedStream
from cupool.devices.errors import DeviceError, DeviceOutOfMemoryError, InvalidSizeError
from cupool.devices.memory import Memory
from cupool.devices.protocol import Stream, callable_name
from cupool.errors import ArgumentError

ALLOCATIONS = ("reserve", "alloc_pinned")
COPIES = ("copy_h2d", "copy_d2h", "copy_d2d")
STREAM_WORK = ("launch", "host_callback")
STREAM_OPERATIONS = ("create_stream", "create_event", "record", "wait_event", *STREAM_WORK,
                     "synchronize", "stream_synchronize")
OPERATIONS = (*ALLOCATIONS, *COPIES, *STREAM_OPERATIONS)
"""Every operation a :class:`Fault` can name."""

STAGES = ("enqueue", "run")
"""When a fault fires: when the call is made, or (stream work) when its stream runs it."""


class FaultSpecError(ArgumentError, DeviceError):
    """A :class:`Fault` that names an unknown operation or a bad call number:
    ``"Fault(operation='cpy'): operation must be one of reserve, alloc_pinned, ..."``."""


@dataclass(frozen=True)
class Fault:
    """Calls ``nth`` .. ``nth + times - 1`` (1-based, counted from :meth:`FaultyDevice.arm`)
    of ``operation`` fail, when made (``stage="enqueue"``) or, for stream work, when their
    stream runs them (``stage="run"``)."""

    operation: str
    nth: int = 1
    times: int = 1
    stage: str = "enqueue"

    def __post_init__(self) -> None:
        if self.operation not in OPERATIONS:
            raise FaultSpecError("Fault", "operation", self.operation,
                                 f"must be one of {', '.join(OPERATIONS)}")
        for name in ("nth", "times"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise FaultSpecError("Fault", name, value, "must be an int >= 1")
        if self.stage not in STAGES:
            raise FaultSpecError("Fault", "stage", self.stage, f"must be one of {STAGES}")
        if self.stage == "run" and self.operation not in (*COPIES, *STREAM_WORK):
            raise FaultSpecError("Fault", "stage", self.stage,
                                 f"must be 'enqueue' for {self.operation!r} (only copies "
                                 f"and stream work run later)")

    @classmethod
    def drawn(cls, operation: str, calls: int, seed: int, stage: str = "enqueue") -> Fault:
        """A fault at one of the first ``calls`` calls of ``operation``, drawn with
        ``seed`` (the same seed, the same call)."""
        if isinstance(calls, bool) or not isinstance(calls, int) or calls < 1:
            raise FaultSpecError("Fault.drawn", "calls", calls, "must be an int >= 1")
        return cls(operation, random.Random(seed).randint(1, calls), stage=stage)

    def fires(self, call: int) -> bool:
        return self.nth <= call < self.nth + self.times


@dataclass(frozen=True)
class Injected:
    """A fault that fired: the ``call``-th ``operation`` since arming, and the message of
    the error it raised."""

    operation: str
    call: int
    stage: str
    message: str


class _FaultyStream(EmulatedStream):
    """An emulated stream whose ``wait_event`` and ``synchronize`` its device may fail (a
    failed ``synchronize`` still waits for the stream's work, as CUDA's returns only then
    with the error)."""

    def _wait_event(self, event) -> None:
        call = self.device._fault("wait_event")
        if call is not None:
            raise self.device._error("wait_event", call, "enqueue",
                                     f"stream {self.name!r}.wait_event()")
        super()._wait_event(event)

    def _synchronize(self) -> None:
        call = self.device._fault("stream_synchronize")
        super()._synchronize()
        if call is not None:
            raise self.device._error("stream_synchronize", call, "enqueue",
                                     f"stream {self.name!r}.synchronize()")


class FaultyDevice(EmulatedDevice):
    """An emulated device that fails the calls armed :class:`Fault` s name (module
    docstring). Takes :class:`~cupool.devices.emulated.EmulatedDevice`'s arguments.

    ``counts`` holds the calls of each operation since the last :meth:`arm` (a run with
    no fault armed counts them too: how a test finds the n-th call of a point of a step).
    """

    _stream_class = _FaultyStream

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("name", "faulty")
        super().__init__(*args, **kwargs)
        self._fault_lock = threading.Lock()  # guards counts, _faults, injected, occupied
        self.counts: Counter = Counter()
        self._faults: tuple[Fault, ...] = ()
        self.injected: list[Injected] = []
        self.occupied = 0

    # -- configuration ------------------------------------------------------------------
    def arm(self, *faults: Fault) -> None:
        """Count calls from zero again, and fail those ``faults`` name (none: count only)."""
        for fault in faults:
            if not isinstance(fault, Fault):
                raise FaultSpecError("arm", "fault", fault, "must be a Fault")
        with self._fault_lock:
            self.counts = Counter()
            self._faults = tuple(faults)

    def disarm(self) -> None:
        """No fault fires any more (the counts go on)."""
        with self._fault_lock:
            self._faults = ()

    def occupy(self, nbytes: int) -> None:
        """Another process takes ``nbytes`` of the free device memory (all of them, or
        :class:`DeviceOutOfMemoryError` as its own allocation would)."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
            raise InvalidSizeError("occupy", "nbytes", nbytes, "must be an int > 0")
        with self._lock:
            free = self.capacity - self._committed
            if nbytes > free:
                raise DeviceOutOfMemoryError("occupy", nbytes, free, self.capacity)
            self._committed += nbytes
        with self._fault_lock:
            self.occupied += nbytes

    def vacate(self) -> None:
        """The other process frees everything it took."""
        with self._fault_lock:
            taken, self.occupied = self.occupied, 0
        with self._lock:
            self._committed -= taken

    def pending_work(self) -> int:
        """How many streams have work enqueued that has not run yet (0 once every stream
        is idle: what a test checks after a failed step)."""
        with self._lock:
            streams = [self.default_stream, *self._streams]
        return sum(not stream.query() for stream in streams)

    # -- the check every hooked call makes ------------------------------------------------
    def _fault(self, operation: str) -> int | None:
        """Count one call of ``operation``; its call number when an armed fault names it
        (``None``: it runs)."""
        with self._fault_lock:
            self.counts[operation] += 1
            call = self.counts[operation]
            if any(f.operation == operation and f.fires(call) for f in self._faults):
                return call
        return None

    def _stage(self, operation: str, call: int) -> str:
        with self._fault_lock:
            return next(f.stage for f in self._faults
                        if f.operation == operation and f.fires(call))

    def _error(self, operation: str, call: int, stage: str, what: str) -> DeviceError:
        """The error a CUDA failure of ``what`` raises (cuda backend's wording), noted."""
        error = DeviceError(f"{what} on {self.name!r}: injected fault ({operation} call "
                            f"{call}, at {stage})")
        return self._note(operation, call, stage, error)

    def _note(self, operation: str, call: int, stage: str, error: DeviceError) -> DeviceError:
        with self._fault_lock:
            self.injected.append(Injected(operation, call, stage, str(error)))
        return error

    def _failing_task(self, operation: str, call: int, what: str) -> Callable[[], None]:
        """Stream work that fails when the stream runs it (a ``run``-stage fault)."""
        def fail() -> None:
            raise self._error(operation, call, "run", what)

        fail.__name__ = f"injected_{operation}_failure"
        return fail

    # -- memory -------------------------------------------------------------------------
    def _allocate_or_fail(self, operation: str, size: int, allocate) -> Memory:
        call = self._fault(operation)
        if call is not None:
            free, total = self._mem_info()
            raise self._note(operation, call, "enqueue",
                             DeviceOutOfMemoryError(operation, size, free, total))
        return allocate(size)

    def _reserve(self, size: int) -> Memory:
        return self._allocate_or_fail("reserve", size, super()._reserve)

    def _alloc_pinned(self, size: int) -> Memory:
        return self._allocate_or_fail("alloc_pinned", size, super()._alloc_pinned)

    # -- copies and stream work -----------------------------------------------------------
    def _enqueue_copy(self, kind: str, dst_ptr: int, src_ptr: int, nbytes: int,
                      stream: Stream) -> None:
        operation = f"copy_{kind}"
        what = f"copy_{kind}_async of {nbytes} bytes"
        call = self._fault(operation)
        if call is None:
            super()._enqueue_copy(kind, dst_ptr, src_ptr, nbytes, stream)
        elif self._stage(operation, call) == "enqueue":
            raise self._error(operation, call, "enqueue", what)
        else:
            stream._submit(what, self._failing_task(operation, call, what))

    def _stream_work(self, operation: str, stream: Stream, fn: Callable[[], object],
                     submit: Callable[[Stream, Callable[[], object]], None]) -> None:
        call = self._fault(operation)
        if call is None:
            submit(stream, fn)
        elif self._stage(operation, call) == "enqueue":
            raise self._error(operation, call, "enqueue", f"{operation}()")
        else:
            submit(stream, self._failing_task(operation, call,
                                              f"{operation} {callable_name(fn)}"))

    def _launch(self, stream: Stream, fn: Callable[[], object]) -> None:
        self._stream_work("launch", stream, fn, super()._launch)

    def _host_callback(self, stream: Stream, fn: Callable[[], object]) -> None:
        self._stream_work("host_callback", stream, fn, super()._host_callback)

    # -- streams, events, synchronize -------------------------------------------------------
    def _create_stream(self, name: str | None):
        call = self._fault("create_stream")
        if call is not None:
            raise self._error("create_stream", call, "enqueue", "create_stream()")
        return super()._create_stream(name)

    def _create_event(self, timing: bool) -> EmulatedEvent:
        call = self._fault("create_event")
        if call is not None:
            raise self._error("create_event", call, "enqueue", "create_event()")
        return _FaultyEvent(self)

    def _synchronize(self) -> None:
        call = self._fault("synchronize")
        super()._synchronize()  # the work finishes either way; the call reports a failure
        if call is not None:
            raise self._error("synchronize", call, "enqueue", "synchronize()")

    def _options(self) -> dict:
        with self._fault_lock:
            faults = [f"{f.operation}#{f.nth}" for f in self._faults]
        return {**super()._options(), "faults": faults, "occupied_bytes": self.occupied}


class _FaultyEvent(EmulatedEvent):
    """An emulated event whose ``record`` and waits its device may fail, the ones made
    inside launched work too (:meth:`record_in_work`, :meth:`wait_in_work`: the same
    operations, ``record`` and ``wait_event``, counted with the others)."""

    def _record(self, stream: Stream) -> None:
        call = self.device._fault("record")
        if call is not None:
            raise self.device._error("record", call, "enqueue", "event.record()")
        super()._record(stream)

    def record_in_work(self):
        call = self.device._fault("record")
        if call is not None:
            raise self.device._error("record", call, "enqueue", "event.record()")
        return super().record_in_work()

    def wait_in_work(self):
        call = self.device._fault("wait_event")
        if call is not None:
            raise self.device._error("wait_event", call, "enqueue", "wait_event()")
        return super().wait_in_work()


__all__ = ["ALLOCATIONS", "COPIES", "OPERATIONS", "STAGES", "STREAM_OPERATIONS",
           "STREAM_WORK", "Fault", "FaultSpecError", "FaultyDevice", "Injected"]
