"""Typed, picklable errors of the device layer, each quoting the numbers.

    CupoolError
      DeviceError                  anything a device refuses or fails to do
        DeviceClosedError          the device (or one of its streams) was closed
        DeviceUnavailableError     ``open_device("cuda")`` without a usable GPU, unknown kind
        DeviceOptionError          an option no backend of the requested kind accepts
        InvalidSizeError           a size or byte count that is not a positive int
        DeviceOutOfMemoryError     a reservation larger than the free capacity
        InvalidPointerError        a copy or release that touches memory the device did not give out
        StreamTaskError            a host callback raised on a stream; reported at synchronize

Every class takes its fields as constructor arguments and pickles with them (as the call
that constructed it, :class:`~cupool.errors.CupoolError`), so errors cross process
boundaries unchanged.
"""

from __future__ import annotations

from cupool.errors import ArgumentError, CupoolError


class DeviceError(CupoolError):
    """Base class of every error the device layer raises on purpose."""


class DeviceClosedError(DeviceError):
    """An operation on a device or stream after ``close()``.

    ``operation`` is what was refused, e.g. ``"reserve(size=1024)"``.
    """

    def __init__(self, device: str, operation: str) -> None:
        self.device = device
        self.operation = operation
        super().__init__(f"device {device!r} is closed: {operation} refused")


class DeviceUnavailableError(DeviceError):
    """The requested device cannot be opened; ``reason`` says why (one line)."""

    def __init__(self, kind: str, reason: str) -> None:
        self.kind = kind
        self.reason = reason
        super().__init__(f"device kind {kind!r} is unavailable: {reason}")


class DeviceOptionError(DeviceError):
    """``open_device(kind, **options)`` got ``option``, which ``kind`` does not accept;
    ``known`` lists the accepted names."""

    def __init__(self, kind: str, option: str, known: tuple[str, ...]) -> None:
        self.kind = kind
        self.option = option
        self.known = tuple(known)
        super().__init__(f"open_device(kind={kind!r}): unknown option {option!r}; "
                         f"known options: {', '.join(self.known)}")


class InvalidSizeError(ArgumentError, DeviceError):
    """A size or byte count broke its rule: ``"reserve(size=-3): size must be > 0"``.

    ``operation`` names the call, ``field`` the argument, ``value`` the bad value and
    ``rule`` what it must satisfy.
    """


class DeviceOutOfMemoryError(DeviceError):
    """A reservation of ``size`` bytes when only ``free`` of ``capacity`` bytes are free."""

    def __init__(self, operation: str, size: int, free: int, capacity: int) -> None:
        self.operation = operation
        self.size = size
        self.free = free
        self.capacity = capacity
        super().__init__(f"{operation}(size={size}): out of memory, only {free} of "
                         f"{capacity} bytes are free")


class InvalidPointerError(DeviceError):
    """A pointer range the device does not own, e.g.
    ``"copy_h2d of 4096 bytes from 0x7f..: runs past the end of pinned allocation 0x7f..+1024"``.

    ``operation`` names the call, ``ptr`` and ``nbytes`` the offending range, ``detail``
    which rule it broke.
    """

    def __init__(self, operation: str, ptr: int, nbytes: int, detail: str) -> None:
        self.operation = operation
        self.ptr = ptr
        self.nbytes = nbytes
        self.detail = detail
        super().__init__(f"{operation}: {detail}")


class StreamTaskError(DeviceError):
    """Work enqueued on a stream failed when the stream ran it (a host callback raised).

    The device keeps running later work (the failure is not sticky, unlike a CUDA
    error); the first failure of a stream is raised by the next ``synchronize()`` of
    that stream or of the device, then forgotten. ``failure`` is the ``repr`` of the
    original exception, which is also chained as ``__cause__`` when raised in-process.
    """

    def __init__(self, stream: str, task: str, failure: str) -> None:
        self.stream = stream
        self.task = task
        self.failure = failure
        super().__init__(f"stream {stream!r}: {task} failed: {failure}")
