"""The pool's lock: ``threading.Lock`` semantics with a cheaper uncontended path.

Every planned ``malloc`` takes and gives back this lock once, so its uncontended cost is
part of the pool's per-allocation cost (``bench/pool.py``); the pool's fast ``malloc``
inlines :meth:`PoolLock.acquire` and :meth:`PoolLock.release` (``take()``,
``give(True)``, a look at ``waiters``).
"""

from __future__ import annotations

import collections
import threading

__all__ = ["PoolLock"]


class PoolLock:
    """The pool's mutex: ``threading.Lock`` semantics (not reentrant, usable in
    ``with``), with an uncontended acquire and release of one C call each.

    The lock is free when the deque ``_token`` holds its one item. ``take()``
    (``deque.pop``) removes it and ``give(True)`` (``deque.append``) puts it back. Each is
    a single C call that runs no Python code, so the GIL makes it atomic: of several
    threads taking at once, exactly one gets the item and the others get
    ``IndexError``. (In CPython ``threading.Lock.acquire`` parses its arguments and
    reads the clock; on this path that cost more than the rest of the planned
    ``malloc``'s locking.)

    A thread that finds the lock taken blocks in :meth:`wait_for`: under the condition
    ``_cond`` it adds itself to ``waiters``, then retries ``take()`` before each
    ``wait()``. A holder releases with ``give(True)`` and then, if ``waiters`` is not 0,
    notifies under ``_cond``. No wakeup is lost, because the GIL runs these steps in one
    order: if the holder read ``waiters`` before a waiter counted itself, its ``give``
    came before that waiter's ``take`` too, which then succeeds (or a third thread took
    the item, and that thread's release will see the waiter); if it read it after, it
    can only get ``_cond`` once the waiter is in ``wait()`` (or gone with the item), so
    ``notify`` reaches a waiter, which retries. Waiters sleep; nothing spins.
    """

    __slots__ = ("_cond", "give", "take", "waiters")

    def __init__(self) -> None:
        token = collections.deque((True,))
        self.take = token.pop
        self.give = token.append
        self.waiters = 0
        self._cond = threading.Condition(threading.Lock())

    def acquire(self) -> bool:
        try:
            self.take()
        except IndexError:
            self.wait_for()
        return True

    def wait_for(self) -> None:
        """Block until this thread has taken the token (the lock was taken)."""
        cond = self._cond
        with cond:
            self.waiters += 1
            try:
                while True:
                    try:
                        self.take()
                        return
                    except IndexError:
                        cond.wait()
            finally:
                self.waiters -= 1

    def release(self) -> None:
        self.give(True)
        if self.waiters:
            self.wake()

    def wake(self) -> None:
        """Wake one waiter (the caller has just given the token back)."""
        with self._cond:
            self._cond.notify()

    def locked(self) -> bool:
        try:
            self.take()
        except IndexError:
            return True
        self.release()
        return False

    def __enter__(self) -> PoolLock:
        self.acquire()
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        self.release()
