"""Typed, picklable errors of the pool, each quoting the numbers.

    CupoolError
      PoolError                    anything the pool refuses
        AllocationSizeError        malloc(size): negative or non-integer size (also a ValueError)
        CapacityError              a capacity or limit the device cannot give (also a ValueError)
        IterationStateError        iteration() nested, exited twice, or exited without entering
        ManagedStateError          managed() entered twice or exited without entering
    cupy.cuda.memory.OutOfMemoryError
      PoolOutOfMemoryError         CuPy's OOM error, plus a readable report of what was live

A plan file for another trace raises :class:`cupool.errors.PlanFormatError`.
"""

from __future__ import annotations

from cupy.cuda.memory import OutOfMemoryError

from cupool.errors import CupoolError


class PoolError(CupoolError):
    """Base class of every error the pool raises on purpose (except out of memory, which
    is CuPy's own :class:`~cupy.cuda.memory.OutOfMemoryError`)."""


class AllocationSizeError(PoolError, ValueError):
    """``malloc(size)`` with a size that is not an ``int >= 0``: ``"malloc(size=-3): size
    must be an int >= 0"``."""

    def __init__(self, size: object, rule: str = "must be an int >= 0") -> None:
        self.size = size
        self.rule = rule
        super().__init__(f"malloc(size={size!r}): size {rule}")


class CapacityError(PoolError, ValueError):
    """A capacity or limit of ``requested`` bytes when the device has ``device_total``."""

    def __init__(self, what: str, requested: object, device_total: int, device: str) -> None:
        self.what = what
        self.requested = requested
        self.device_total = device_total
        self.device = device
        super().__init__(f"{what} (={requested!r}) is larger than device {device!r}, which "
                         f"has {device_total} bytes in total")


class IterationStateError(PoolError):
    """``iteration()`` misused; ``detail`` says how (nested, exited twice...)."""


class ManagedStateError(PoolError):
    """``managed()`` misused; ``detail`` says how (entered twice, exited twice...)."""


class PoolOutOfMemoryError(OutOfMemoryError):
    """CuPy's ``OutOfMemoryError(size, total, limit)`` with the pool's report appended.

    ``size`` is the request (rounded), ``total`` the bytes reserved from the device when
    it failed, ``limit`` the pool's limit (0: none, only the device's). ``report`` is a
    readable, multi-line account of the regions and the largest live blocks.
    """

    def __init__(self, size: int, total: int, limit: int = 0, report: str = "") -> None:
        super().__init__(size, total, limit)
        self.size = size
        self.total = total
        self.limit = limit
        self.report = report
        if report:
            self.args = (f"{self.args[0]}\n{report}",)

    def __reduce__(self):  # CuPy's class, not a CupoolError: its fields by hand
        return (self.__class__, (self.size, self.total, self.limit, self.report))

    def __str__(self) -> str:
        return self.args[0]
