"""The device protocol on a real GPU, through CuPy's CUDA runtime bindings. Thin.

Written from CuPy's documentation (``cupy.cuda.runtime``, ``cupy.cuda.Stream``,
``cupy.cuda.Event``); it cannot run where there is no GPU, so every CuPy name it
uses is listed once in :data:`CUPY_CALLS` with the number of arguments it passes,
and the unmarked tests check each against the installed CuPy (and that this file
uses no CuPy name outside the list). CuPy is imported in the constructor only.

Mapping:

=========================  ===========================================================
``reserve/release``        ``runtime.malloc(size)`` / ``runtime.free(ptr)``
``alloc_pinned/free``      ``runtime.hostAlloc(size, hostAllocPortable)`` / ``freeHost``
``create_stream``          ``cupy.cuda.Stream(non_blocking=True)``
``default_stream``         ``cupy.cuda.Stream.null`` (the legacy default stream)
``create_event``           ``cupy.cuda.Event(block=..., disable_timing=not timing,
                           interprocess=False)``
``event.record(s)``        ``Event.record(s)``; ``query`` = ``Event.done``
``seconds_since``          ``cupy.cuda.get_elapsed_time(start, end) / 1e3`` (ms → s)
``stream.wait_event(e)``   ``Stream.wait_event(e)``
``copy_*_async``           ``runtime.memcpyAsync(dst, src, n, memcpy<Kind>, stream.ptr)``
``host_callback``          ``Stream.launch_host_func(callback, arg)``
``mem_info``               ``runtime.memGetInfo()``
``synchronize``            ``runtime.deviceSynchronize()``
``array_at``               ``cupy.ndarray(shape, dtype, memptr=MemoryPointer(UnownedMemory(
                           ptr, nbytes, owner, device_id), 0))`` (no CUDA call)
=========================  ===========================================================

Every call runs with ``cupy.cuda.Device(device_id)`` current. Copy statistics count
copies when they are issued. CUDA errors become :class:`DeviceError`; an allocation
failure becomes :class:`DeviceOutOfMemoryError` with ``memGetInfo``'s numbers. Blocks
still out at ``close()`` are freed then; an unclosed device leaks them until exit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import NamedTuple

from cupool.devices.errors import DeviceError, DeviceOutOfMemoryError, DeviceUnavailableError
from cupool.devices.memory import DEVICE_MEMORY, PINNED_MEMORY, Memory
from cupool.devices.protocol import (
    D2D,
    D2H,
    H2D,
    Device,
    Event,
    Stream,
    StreamFailures,
    callable_name,
)

_CUDA_ERROR_MEMORY_ALLOCATION = 2  # cudaErrorMemoryAllocation in the CUDA runtime API


class CupyCall(NamedTuple):
    """One CuPy name this adapter uses.

    ``positional`` is the number of positional arguments the adapter passes (``self``
    excluded), ``keywords`` the keyword names it passes; ``positional=None`` means the
    name is read, not called (a constant, module, class or property). ``instance``
    marks attributes that exist on instances only (set in ``__init__``).
    """

    name: str
    positional: int | None
    keywords: tuple[str, ...] = ()
    instance: bool = False


CUPY_CALLS: tuple[CupyCall, ...] = (
    CupyCall("cupy.__version__", None),
    CupyCall("cupy.cuda", None),
    CupyCall("cupy.cuda.runtime", None),
    CupyCall("cupy.cuda.runtime.getDeviceCount", 0),
    CupyCall("cupy.cuda.runtime.malloc", 1),
    CupyCall("cupy.cuda.runtime.free", 1),
    CupyCall("cupy.cuda.runtime.hostAlloc", 2),
    CupyCall("cupy.cuda.runtime.hostAllocPortable", None),
    CupyCall("cupy.cuda.runtime.freeHost", 1),
    CupyCall("cupy.cuda.runtime.memcpyAsync", 5),
    CupyCall("cupy.cuda.runtime.memcpyHostToDevice", None),
    CupyCall("cupy.cuda.runtime.memcpyDeviceToHost", None),
    CupyCall("cupy.cuda.runtime.memcpyDeviceToDevice", None),
    CupyCall("cupy.cuda.runtime.memGetInfo", 0),
    CupyCall("cupy.cuda.runtime.deviceSynchronize", 0),
    CupyCall("cupy.cuda.runtime.CUDARuntimeError", None),
    CupyCall("cupy.cuda.runtime.CUDARuntimeError.status", None, instance=True),
    CupyCall("cupy.cuda.Device", 1),
    CupyCall("cupy.cuda.Stream", 0, ("non_blocking",)),
    CupyCall("cupy.cuda.Stream.null", None),
    CupyCall("cupy.cuda.Stream.ptr", None, instance=True),
    CupyCall("cupy.cuda.Stream.done", None),
    CupyCall("cupy.cuda.Stream.synchronize", 0),
    CupyCall("cupy.cuda.Stream.wait_event", 1),
    CupyCall("cupy.cuda.Stream.launch_host_func", 2),
    CupyCall("cupy.cuda.Event", 0, ("block", "disable_timing", "interprocess")),
    CupyCall("cupy.cuda.Event.done", None),
    CupyCall("cupy.cuda.Event.record", 1),
    CupyCall("cupy.cuda.Event.synchronize", 0),
    CupyCall("cupy.cuda.get_elapsed_time", 2),
    CupyCall("cupy.cuda.UnownedMemory", 4),
    CupyCall("cupy.cuda.MemoryPointer", 2),
    CupyCall("cupy.ndarray", 1, ("dtype", "memptr")),
)
"""Every CuPy name :mod:`cupool.devices.cuda` touches. In the code, CuPy is reached
only through ``device._cupy``, ``device._cuda`` (``cupy.cuda``), ``device._rt``
(``cupy.cuda.runtime``), ``._cupy_stream`` (a ``cupy.cuda.Stream``), ``._cupy_event``
(a ``cupy.cuda.Event``) and ``cuda_error`` (a ``CUDARuntimeError``), so a test can read
this file and find every use."""


class CudaStream(Stream):
    """A protocol stream over a ``cupy.cuda.Stream``."""

    def __init__(self, device: CudaDevice, name: str, cupy_stream: object) -> None:
        super().__init__(device, name)
        self._cupy_stream = cupy_stream
        self._failures = StreamFailures(name)

    @property
    def cupy_stream(self):
        """The ``cupy.cuda.Stream`` under this stream (for kernel launches in ``kernels/``)."""
        return self._cupy_stream

    def _wait_event(self, event: Event) -> None:
        with self.device._errors(f"stream {self.name!r}.wait_event()"):
            self._cupy_stream.wait_event(event._cupy_event)

    def _synchronize(self) -> None:
        with self.device._errors(f"stream {self.name!r}.synchronize()"):
            self._cupy_stream.synchronize()
        self._failures.raise_first()

    def _query(self) -> bool:
        with self.device._errors(f"stream {self.name!r}.query()"):
            return bool(self._cupy_stream.done)


class CudaEvent(Event):
    """A protocol event over a ``cupy.cuda.Event``."""

    def __init__(self, device: CudaDevice, cupy_event: object) -> None:
        super().__init__(device)
        self._cupy_event = cupy_event

    def _record(self, stream: Stream) -> None:
        with self.device._errors("event.record()"):
            self._cupy_event.record(stream._cupy_stream)

    def _query(self) -> bool:
        with self.device._errors("event.query()"):
            return bool(self._cupy_event.done)

    def _synchronize(self) -> None:
        with self.device._errors("event.synchronize()"):
            self._cupy_event.synchronize()

    def _seconds_since(self, start: Event) -> float:
        with self.device._errors("event.seconds_since()"):
            return self.device._cuda.get_elapsed_time(start._cupy_event, self._cupy_event) / 1e3


class CudaDevice(Device):
    """GPU ``device_id`` through CuPy. ``blocking_sync=True`` makes event waits yield the
    CPU (``cudaEventBlockingSync``) instead of spinning. Raises
    :class:`DeviceUnavailableError` when CuPy is missing or sees no such GPU."""

    kind = "cuda"

    def __init__(self, device_id: int = 0, *, blocking_sync: bool = False,
                 name: str | None = None) -> None:
        super().__init__(name or f"cuda:{device_id}")
        try:
            import cupy
        except Exception as exc:  # ImportError, or a broken CUDA install
            raise DeviceUnavailableError("cuda", f"cupy is not importable ({exc})") from exc
        self._cupy = cupy
        self.cupy = cupy
        """The ``cupy`` module this device runs on (``kernels/`` launches through it)."""
        self._cuda = self._cupy.cuda
        self._rt = self._cuda.runtime
        try:
            count = self._rt.getDeviceCount()
        except self._rt.CUDARuntimeError as cuda_error:
            raise DeviceUnavailableError("cuda", f"cupy {self._cupy.__version__}: "
                                                 f"{cuda_error}") from cuda_error
        if not 0 <= device_id < count:
            raise DeviceUnavailableError("cuda", f"device_id={device_id}, but cupy sees "
                                                 f"{count} GPU(s)")
        self.device_id = device_id
        self.blocking_sync = blocking_sync
        self._copy_kinds = {H2D: self._rt.memcpyHostToDevice, D2H: self._rt.memcpyDeviceToHost,
                            D2D: self._rt.memcpyDeviceToDevice}
        self._streams: list[CudaStream] = []
        self._default = CudaStream(self, "default", self._cuda.Stream.null)

    @contextlib.contextmanager
    def _errors(self, operation: str) -> Iterator[None]:
        """Run with this GPU current; CUDA errors become :class:`DeviceError`."""
        try:
            with self._cuda.Device(self.device_id):
                yield
        except self._rt.CUDARuntimeError as cuda_error:
            raise DeviceError(f"{operation} on {self.name!r}: {cuda_error}") from cuda_error

    def _allocate(self, operation: str, size: int, kind: str) -> Memory:
        try:
            with self._cuda.Device(self.device_id):
                if kind == DEVICE_MEMORY:
                    ptr = self._rt.malloc(size)
                else:
                    ptr = self._rt.hostAlloc(size, self._rt.hostAllocPortable)
        except self._rt.CUDARuntimeError as cuda_error:
            if cuda_error.status == _CUDA_ERROR_MEMORY_ALLOCATION:
                free, total = self._mem_info()
                raise DeviceOutOfMemoryError(operation, size, free, total) from cuda_error
            raise DeviceError(f"{operation}(size={size}) on {self.name!r}: "
                              f"{cuda_error}") from cuda_error
        return Memory(ptr=ptr, size=size, kind=kind)

    def _reserve(self, size: int) -> Memory:
        return self._allocate("reserve", size, DEVICE_MEMORY)

    def _release(self, memory: Memory) -> None:
        with self._errors(f"release({memory!r})"):
            self._rt.free(memory.ptr)

    def _alloc_pinned(self, size: int) -> Memory:
        return self._allocate("alloc_pinned", size, PINNED_MEMORY)

    def _free_pinned(self, memory: Memory) -> None:
        with self._errors(f"free_pinned({memory!r})"):
            self._rt.freeHost(memory.ptr)

    def _mem_info(self) -> tuple[int, int]:
        with self._errors("mem_info()"):
            free, total = self._rt.memGetInfo()
        return int(free), int(total)

    def _array_at(self, ptr: int, nbytes: int, dtype, shape: tuple[int, ...], owner: object,
                  block: Memory):
        memory = self._cuda.UnownedMemory(ptr, nbytes, owner, self.device_id)
        return self._cupy.ndarray(shape, dtype=dtype,
                                  memptr=self._cuda.MemoryPointer(memory, 0))

    @property
    def default_stream(self) -> CudaStream:
        return self._default

    def _create_stream(self, name: str | None) -> CudaStream:
        with self._errors("create_stream()"):
            cupy_stream = self._cuda.Stream(non_blocking=True)
        stream = CudaStream(self, name or f"stream-{len(self._streams) + 1}", cupy_stream)
        with self._lock:
            self._streams.append(stream)
        return stream

    def _create_event(self, timing: bool) -> CudaEvent:
        with self._errors("create_event()"):
            cupy_event = self._cuda.Event(block=self.blocking_sync, disable_timing=not timing,
                                          interprocess=False)
        return CudaEvent(self, cupy_event)

    def _enqueue_copy(self, kind: str, dst_ptr: int, src_ptr: int, nbytes: int,
                      stream: Stream) -> None:
        if nbytes == 0:
            return
        with self._errors(f"copy_{kind}_async of {nbytes} bytes"):
            self._rt.memcpyAsync(dst_ptr, src_ptr, nbytes, self._copy_kinds[kind],
                                 stream._cupy_stream.ptr)
        self._add_stat(f"copy_count.{kind}", 1)
        self._add_stat(f"copy_bytes.{kind}", nbytes)

    def _host_callback(self, stream: Stream, fn: Callable[[], object]) -> None:
        failures = stream._failures
        task = f"host_callback {callable_name(fn)}"
        with self._errors("host_callback()"):
            stream._cupy_stream.launch_host_func(lambda _arg: failures.run(task, fn), None)

    def _synchronize(self) -> None:
        with self._errors("synchronize()"):
            self._rt.deviceSynchronize()
        with self._lock:
            streams = [self._default, *self._streams]
        for stream in streams:
            stream._failures.raise_first()

    def _close(self, device_blocks: list[Memory], pinned_blocks: list[Memory]) -> None:
        errors = []
        try:
            with self._cuda.Device(self.device_id):
                self._rt.deviceSynchronize()
        except self._rt.CUDARuntimeError as cuda_error:
            errors.append(f"synchronize(): {cuda_error}")
        for memory in [*device_blocks, *pinned_blocks]:
            try:
                with self._cuda.Device(self.device_id):
                    if memory.kind == DEVICE_MEMORY:
                        self._rt.free(memory.ptr)
                    else:
                        self._rt.freeHost(memory.ptr)
            except self._rt.CUDARuntimeError as cuda_error:
                errors.append(f"freeing {memory!r}: {cuda_error}")
        if errors:
            raise DeviceError(f"close() of {self.name!r}: {len(errors)} failure(s); "
                              f"first: {errors[0]}")

    def _options(self) -> dict:
        return {"device_id": self.device_id, "blocking_sync": self.blocking_sync,
                "cupy_version": self._cupy.__version__}
