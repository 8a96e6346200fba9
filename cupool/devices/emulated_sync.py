"""What the emulated device's threads wait on and with (:mod:`.emulated`): the one-shot
flag a mark, a gate or a synchronize sets (:class:`Token`), the wait that gives up when
the device aborts (:func:`wait_token`), and the gate that holds streams' work back
(:class:`StreamGate`)."""

from __future__ import annotations

import _thread
import contextlib
import threading
import time

from cupool.devices.errors import DeviceError

POLL_SECONDS = 0.05  # how often blocked waits look at the abort flag


class Shared:
    """State the worker threads share with the device, without referencing it (so an
    unclosed device can still be garbage-collected). ``abort`` is set when close()
    gives up waiting: blocked waits return and pacing stops."""

    def __init__(self) -> None:
        self.abort = threading.Event()


class Token:
    """A flag set once, which threads wait for: what ``threading.Event`` is used for here
    (an event's mark, a gate, a synchronize), made with one lock held until it is set
    (an ``Event`` makes a condition variable: about ten times the cost, paid at every
    record). ``recorded_at``: when it was set, for those who stamp it."""

    __slots__ = ("_done", "_lock", "recorded_at")

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()
        self._done = False
        self.recorded_at = 0.0

    def set(self) -> None:
        if not self._done:
            self._done = True
            with contextlib.suppress(RuntimeError):  # set twice at once: released once
                self._lock.release()

    def is_set(self) -> bool:
        return self._done

    def wait(self, timeout: float) -> bool:
        """Whether the flag was set within ``timeout`` seconds."""
        if self._done:
            return True
        if self._lock.acquire(True, timeout):
            self._lock.release()  # the next waiter's turn
            return True
        return self._done


def wait_token(token: Token, shared: Shared) -> None:
    """Block until ``token`` is set or the device aborts."""
    while not token.wait(POLL_SECONDS):
        if shared.abort.is_set():
            return


class StreamGate:
    """Holds the streams given to :meth:`EmulatedDevice.hold_streams` until
    :meth:`release` (emulated only: a GPU's streams cannot be held from the host). A held
    stream keeps the work enqueued on it back, without waking its thread, and hands it
    over at the release."""

    def __init__(self) -> None:
        self._token = Token()
        self._streams: list = []  # the EmulatedStreams it holds

    @property
    def released(self) -> bool:
        """Whether :meth:`release` ran."""
        return self._token.is_set()

    def release(self, here: bool = False, at: float | None = None) -> float:
        """Let the held streams run (once; later calls do nothing); returns when
        (``time.perf_counter()`` s, or ``at``, the caller's reading of it), the first time.
        ``here``: where a single stream holds work, run it on the calling thread before
        returning (for a caller about to wait for it: no thread is woken to run it, none
        to report it done)."""
        if not self._token.is_set():
            self._token.recorded_at = released_at = time.perf_counter() if at is None else at
            self._token.set()
            busy = [stream for stream in self._streams if stream._held]
            for stream in self._streams:
                stream._release_held(released_at, here and len(busy) == 1)
        return self._token.recorded_at

    def _hold(self, stream) -> None:
        if stream._held is not None:
            raise DeviceError(f"hold_streams: {stream!r} is held by another gate already")
        stream._held = []
        self._streams.append(stream)


__all__ = ["POLL_SECONDS", "Shared", "StreamGate", "Token", "wait_token"]
