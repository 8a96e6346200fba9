"""Typed, picklable errors of the swap engine, each quoting the buffer and the numbers.

    CupoolError
      HandleError                  a tensor handle refuses (a bad intent, a bad layout...)
        HandleLifetimeError        a use after the buffer's lifetime ended
        HandleStateError           the bytes are not on the device, or a transition the
                                   handle's state machine does not have
        ConflictingUseError        a use conflicting with one in progress (another thread)
        CopyFailedError            a swap copy failed; raised at the buffer's next use
      StreamWorkError              work on a stream failed as it ran (copy, launch, wait)
      StagingError                 a staging slot released twice, or a bad request
      EngineError                  the engine cannot run this plan on this device
      EngineStateError             the op-boundary methods called out of order

Errors pickle with their fields (as the call that constructed them,
:class:`~cupool.errors.CupoolError`), so they survive worker processes.
"""

from __future__ import annotations

from cupool.errors import CupoolError


class HandleError(CupoolError):
    """Base class of the errors a tensor handle raises on purpose."""


class HandleLifetimeError(HandleError):
    """A use of buffer ``buffer_id`` (lifetime ``[start, end)``) after its lifetime ended."""

    def __init__(self, buffer_id: int, start: int, end: int) -> None:
        self.buffer_id, self.start, self.end = buffer_id, start, end
        super().__init__(f"buffer {buffer_id}: used after its lifetime [{start}, {end}) "
                         f"ended (the handle is retired)")


class HandleStateError(HandleError):
    """Buffer ``buffer_id`` is in state ``state`` where ``wanted`` was needed (a use of bytes
    the plan put elsewhere, or a transition the state machine does not have)."""

    def __init__(self, buffer_id: int, state: str, wanted: str) -> None:
        self.buffer_id, self.state, self.wanted = buffer_id, state, wanted
        super().__init__(f"buffer {buffer_id}: state is {state!r}, {wanted}")


class ConflictingUseError(HandleError):
    """A ``use(intent)`` of buffer ``buffer_id`` while ``readers`` reads and ``writers``
    writes are in progress (allowed: reads with reads, a write alone)."""

    def __init__(self, buffer_id: int, intent: str, readers: int, writers: int) -> None:
        self.buffer_id, self.intent = buffer_id, intent
        self.readers, self.writers = readers, writers
        super().__init__(f"buffer {buffer_id}: use(intent={intent!r}) conflicts with "
                         f"{readers} read(s) and {writers} write(s) in progress")


class CopyFailedError(HandleError):
    """The ``direction`` copy (``"h2d"``/``"d2h"``) of ``nbytes`` bytes of buffer
    ``buffer_id`` failed; ``cause`` is the device's message. Raised at the buffer's next use."""

    def __init__(self, buffer_id: int, direction: str, nbytes: int, cause: str) -> None:
        self.buffer_id, self.direction = buffer_id, direction
        self.nbytes, self.cause = nbytes, cause
        super().__init__(f"buffer {buffer_id}: {direction} copy of {nbytes} bytes failed: "
                         f"{cause}")


class StreamWorkError(CupoolError):
    """Work an iteration put on a stream failed as the stream ran it (a copy, a launch, a
    wait; a GPU's errors are sticky and surface here too), reported when the engine
    synchronized at the iteration's end; ``cause`` is the device's message, naming the
    stream and the failed work."""

    def __init__(self, iteration: int, cause: str) -> None:
        self.iteration, self.cause = iteration, cause
        super().__init__(f"iteration {iteration}: work on a stream failed: {cause}")


class StagingError(CupoolError):
    """A slot released twice, or not from this staging area."""


class EngineError(CupoolError):
    """The swap engine cannot run this plan on this device: CuPy missing, a device of
    another kind, a static plan, a recompute without its callable, a layout the pool cannot
    serve (reason in the message)."""


class EngineStateError(CupoolError):
    """The engine's iteration methods were called out of order: ``before_op(i)`` for an op
    other than the next one, ``after_op(i)`` without ``before_op(i)``, an iteration begun
    inside another, or ended before its last op (the message says which)."""
