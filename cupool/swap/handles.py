"""Tensor handles: where one buffer's bytes are, and a checked way to use them.

A :class:`TensorHandle` stands for one buffer of a trace during one iteration. It knows
the buffer (size, lifetime, uses), where its bytes are now, and the view of its bytes at
the planned device address while they are there. Its location is a small state machine;
the swap engine (:mod:`.copy_engine`, :mod:`.engine`) moves it on the host, in *program
order*, as it enqueues the work (its books: stream order guarantees that the bytes are
where the state says by the time the work that uses them runs); a use through
:meth:`TensorHandle.use` from another thread waits for a landing in flight::

    unborn ──produce──► device ──swap-out issued──► to_host ──residency ended──► host
                          ▲  │                                                     │
                          │  └──drop (to be recomputed)──► dropped                 │ swap-in
                          │                                   │ recompute          ▼ issued
                          └───────────────────────────────────┴──due op waits── to_device
    any state ──end of lifetime──► retired            a copy refused ──► failed

``with handle.use() as view:`` (``intent="read"`` or ``"write"``) marks an access and
guarantees, for the duration of the block, that the bytes are on the device at the
planned address: ``view`` is an array of the handle's ``dtype`` and ``shape`` (default:
flat ``uint8``) over exactly those bytes, made by the device when the bytes arrive
(:meth:`TensorHandle.array_at`, :meth:`Device.array_at
<cupool.devices.protocol.Device.array_at>`): a ``cupy.ndarray`` whose ``data.ptr`` is the
planned address on the cuda device (and on the emulated one opened with
``cupy_arrays=True``), a NumPy view of the host-backed bytes on the emulated device
otherwise. What a use does by state:

=============  =========================================================================
``device``     proceeds at once (the fast path: one lock, no allocation beyond the
               context object)
``to_device``  waits until the swap-in landed; the wait is measured (``waited_us``)
``to_host``    a read proceeds (the device bytes are intact while they are copied out);
               a write raises :class:`HandleStateError` (it would be lost)
``failed``     raises the :class:`CopyFailedError` of the copy that failed
``retired``    raises :class:`HandleLifetimeError` (the buffer's lifetime ended)
other          raises :class:`HandleStateError` (the plan says the bytes are not there)
=============  =========================================================================

Concurrency: any number of concurrent reads, or one write and nothing else; a use that
conflicts with one in progress (two threads, a write and anything) raises
:class:`ConflictingUseError` at once instead of racing. ``_lock`` guards the state, the
view and the counters of uses in progress. A use that raises inside the ``with`` block
leaves the handle exactly as it found it (the counters are restored in ``finally``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from cupool.core.vocabulary import Buffer
from cupool.errors import CupoolError
from cupool.swap.errors import (
    ConflictingUseError,
    CopyFailedError,
    HandleError,
    HandleLifetimeError,
    HandleStateError,
)

UNBORN = "unborn"
DEVICE = "device"
TO_HOST = "to_host"
HOST = "host"
TO_DEVICE = "to_device"
DROPPED = "dropped"
RETIRED = "retired"
FAILED = "failed"
STATES = (UNBORN, DEVICE, TO_HOST, HOST, TO_DEVICE, DROPPED, RETIRED, FAILED)

READ = "read"
WRITE = "write"
INTENTS = (READ, WRITE)

_ALLOWED = {  # state -> states it may move to (retired and failed are reachable from any)
    UNBORN: {DEVICE, HOST},
    DEVICE: {TO_HOST, DROPPED},
    TO_HOST: {HOST},
    HOST: {TO_DEVICE},
    TO_DEVICE: {DEVICE},
    DROPPED: {DEVICE},
    RETIRED: {UNBORN},
    FAILED: {UNBORN},
}


class TensorHandle:
    """One buffer's bytes during an iteration (see the module docstring).

    ``buffer`` is the trace's :class:`~cupool.core.vocabulary.Buffer`. ``recompute`` is an
    optional callable ``recompute(out, *inputs)`` that regenerates the contents of ``out``
    (this handle's array) from ``inputs`` (the arrays of the handles of
    ``buffer.recompute.inputs``, in that order); the engine calls it for the plan's
    recompute actions, in stream order, with ``out`` held for write and every input held
    for read. ``dtype`` and ``shape`` (default flat ``uint8``; a shape may not need more
    than ``buffer.size`` bytes) are what :meth:`use` yields. Counters: ``uses`` (completed
    uses), ``waited_us`` (total time uses waited for swap-ins).
    """

    __slots__ = (
        "_copied",
        "_landed",
        "_lock",
        "_readers",
        "_released",
        "_writers",
        "buffer",
        "dtype",
        "failure",
        "ptr",
        "recompute",
        "shape",
        "state",
        "uses",
        "view",
        "waited_us",
    )

    def __init__(self, buffer: Buffer, recompute: Callable[..., object] | None = None, *,
                 dtype: object = "uint8", shape: tuple[int, ...] | None = None) -> None:
        from cupool.devices.checks import check_layout

        if recompute is not None and not callable(recompute):
            raise HandleError(f"buffer {buffer.id}: recompute (={recompute!r}) must be "
                              f"callable or None")
        try:
            self.dtype, checked = check_layout(f"TensorHandle(buffer {buffer.id})",
                                               buffer.size, dtype,
                                               shape if shape is not None else (0,))
        except CupoolError as exc:
            raise HandleError(str(exc)) from None
        self.shape = None if shape is None else checked
        self.buffer = buffer
        self.recompute = recompute
        self.state = UNBORN
        self.view = None       # uint8 array over the device bytes while resident
        self.ptr = 0           # device address of those bytes
        self.failure: CopyFailedError | None = None
        self.uses = 0
        self.waited_us = 0.0
        self._lock = threading.Lock()
        self._readers = 0
        self._writers = 0
        self._landed = threading.Event()  # clear while a swap-in is landing (to_device)
        self._copied = False    # a held copy out completed; the residency has not ended
        self._released = False  # the residency ended; its held copy out has not completed

    def __repr__(self) -> str:
        return (f"<TensorHandle buffer={self.buffer.id} size={self.buffer.size} "
                f"state={self.state}>")

    def array_at(self, device, ptr: int, nbytes: int):
        """This handle's array (its dtype and shape) over ``nbytes`` device bytes at
        ``ptr`` of ``device``; a flat handle gets ``nbytes // itemsize`` elements (replays
        scale sizes down). What the runtime passes to :meth:`move` as ``view``."""
        if self.shape is None:
            count = nbytes // self.dtype.itemsize
            return device.array_at(ptr, count * self.dtype.itemsize, self.dtype, (count,))
        return device.array_at(ptr, nbytes, self.dtype, self.shape)

    # -- using ----------------------------------------------------------------------
    def use(self, intent: str = READ) -> _Use:
        """A context manager marking one access with ``intent`` (``"read"``/``"write"``);
        entering it returns the view of the device bytes (see the module docstring)."""
        if intent is not READ and intent is not WRITE and intent not in INTENTS:
            raise HandleError(f"buffer {self.buffer.id}: use(intent={intent!r}): intent "
                              f"must be 'read' or 'write'")
        return _Use(self, intent == WRITE)

    def enter_use(self, write: bool):
        """Begin a use without a context object (``write``: its intent is write); returns
        the view. What ``with use():`` does on entry, for callers that pair it with
        :meth:`exit_use` themselves (the engine's op boundaries)."""
        lock = self._lock
        lock.acquire()
        try:
            state = self.state
            if state is TO_DEVICE:
                lock.release()
                try:
                    began = time.perf_counter()
                    self._landed.wait()
                    self.waited_us += (time.perf_counter() - began) * 1e6
                finally:
                    lock.acquire()
                state = self.state
            if state is not DEVICE and not (state is TO_HOST and not write):
                raise self._refusal(state, write)
            if self._writers or (write and self._readers):
                raise ConflictingUseError(self.buffer.id, WRITE if write else READ,
                                          self._readers, self._writers)
            if write:
                self._writers = 1
            else:
                self._readers += 1
            return self.view
        finally:
            lock.release()

    def exit_use(self, write: bool) -> None:
        """End a use :meth:`enter_use` began (same ``write``)."""
        with self._lock:
            if write:
                self._writers = 0
            else:
                self._readers -= 1
            self.uses += 1

    def refuse(self, write: bool) -> None:
        """Raise the error a use with ``write`` intent gets in the handle's state (the
        swap engine checks states itself, on the host in program order)."""
        raise self._refusal(self.state, write)

    def _refusal(self, state: str, write: bool) -> HandleError:
        if state is RETIRED:
            return HandleLifetimeError(self.buffer.id, self.buffer.start, self.buffer.end)
        if state is FAILED and self.failure is not None:
            return self.failure
        if state is TO_HOST:
            return HandleStateError(self.buffer.id, state, "a write would be lost (the bytes "
                                                           "are being copied out)")
        return HandleStateError(self.buffer.id, state, "the bytes are not on the device")

    # -- transitions (the runtime calls these in stream order) ------------------------
    def move(self, state: str, view=None, ptr: int | None = None) -> None:
        """Move to ``state``; ``view``/``ptr`` give the device bytes when entering
        ``device`` at a (possibly new) address. Raises :class:`HandleStateError` for a
        transition the state machine does not have, or while a use is in progress on a
        transition that takes the bytes away."""
        with self._lock:
            old = self.state
            if old is FAILED and state is not RETIRED:
                return  # a failed copy is sticky: later transitions of its chain are moot
            if state not in _ALLOWED.get(old, ()) and state not in (RETIRED, FAILED):
                raise HandleStateError(self.buffer.id, old, f"cannot move to {state!r}")
            if state in (DROPPED, HOST, RETIRED) and (self._readers or self._writers):
                raise HandleStateError(self.buffer.id, old,
                                       f"cannot move to {state!r} during a use")
            if view is not None:
                self.view = view
            if ptr is not None:
                self.ptr = ptr
            self.state = state
            if state is TO_DEVICE:
                self._landed.clear()
            elif old is TO_DEVICE:
                self._landed.set()  # the landing (or its end): wake the uses waiting for it
            if state in (HOST, DROPPED, RETIRED):
                self.view = None

    def arrive(self, view, ptr: int) -> None:
        """The bytes are (produced, recomputed or landed) on the device at ``ptr``, where
        ``view`` looks: :meth:`move` to ``device``, without its lock where the handle is
        ``unborn`` or ``dropped`` (the swap engine's books, kept by one thread)."""
        state = self.state
        if (state is UNBORN or state is DROPPED) and not (self._readers or self._writers):
            self.view, self.ptr, self.state = view, ptr, DEVICE
            return
        self.move(DEVICE, view, ptr)

    def leave(self, state: str) -> None:
        """The residency ended without a copy: :meth:`move` to ``state`` (``retired`` or
        ``dropped``), without its lock from ``device`` with no use in progress (the swap
        engine's books, kept by one thread)."""
        if self.state is DEVICE and (state is RETIRED or state is DROPPED) \
                and not (self._readers or self._writers):
            self.state, self.view = state, None
            return
        self.move(state)

    def copied_out(self, held: bool = False) -> None:
        """A swap-out's copy to the host completed (or, for a drop, reached its place in
        the stream): the bytes leave the device (``host``). With ``held`` the plan copied
        the buffer out before its residency ended, and reads until that end may still use
        the device bytes (``to_host`` lets them): the handle moves to ``host`` when the
        later of the copy and :meth:`residency_ended` happens."""
        with self._lock:
            if held and not self._released:
                self._copied = True
                return
            self._released = False
        self.move(HOST)

    def residency_ended(self) -> None:
        """The residency a held swap-out (:meth:`copied_out`) copied out ended: its device
        bytes are released, in stream order on the compute stream."""
        with self._lock:
            if not self._copied:
                self._released = True
                return
            self._copied = False
        self.move(HOST)

    def fail(self, error: CopyFailedError) -> None:
        """Record a failed copy: every later use raises ``error``; waiting uses wake up."""
        with self._lock:
            self.failure = error
            self.state = FAILED
            self._landed.set()  # wake a use waiting for the landing; it then raises

    def reset(self) -> None:
        """Back to ``unborn`` for the next iteration (from ``retired`` or ``failed``);
        without the lock from ``retired`` with nothing pending (the engine's books)."""
        if self.state is RETIRED and self.view is None and self.failure is None \
                and not (self._copied or self._released or self._landed.is_set()):
            self.state = UNBORN
            return
        with self._lock:
            self.state = UNBORN
            self.view = None
            self.failure = None
            self._copied = self._released = False
            if self._landed.is_set():  # set under this lock only: no landing can race it
                self._landed.clear()


class _Use:
    """The context manager of one use (a class, not a generator: it is on the hot path)."""

    __slots__ = ("entered", "handle", "write")

    def __init__(self, handle: TensorHandle, write: bool) -> None:
        self.handle = handle
        self.write = write
        self.entered = False

    def __enter__(self):
        if self.entered:
            raise HandleError(f"buffer {self.handle.buffer.id}: a use() context was entered "
                              f"twice")
        view = self.handle.enter_use(self.write)
        self.entered = True
        return view

    def __exit__(self, *exc_info) -> None:
        if not self.entered:
            raise HandleError(f"buffer {self.handle.buffer.id}: a use() context was exited "
                              f"without being entered")
        self.entered = False
        self.handle.exit_use(self.write)
