"""The pool's lock: mutual exclusion and wakeups under contention, without CuPy."""

from __future__ import annotations

import sys
import threading
import time

from cupool.allocator.lock import PoolLock


def test_pool_lock_excludes_and_wakes_waiters_under_contention():
    class CountingLock(PoolLock):
        __slots__ = ("waits",)

        def wait_for(self):
            self.waits += 1
            super().wait_for()

    lock = CountingLock()
    lock.waits = 0
    state = {"count": 0, "inside": 0, "overlaps": 0}

    def worker():
        for _ in range(300):
            with lock:
                state["inside"] += 1
                if state["inside"] != 1:
                    state["overlaps"] += 1
                count = state["count"]
                time.sleep(0)  # give the GIL away while holding the lock
                state["count"] = count + 1
                state["inside"] -= 1

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        sys.setswitchinterval(previous)
    assert not any(t.is_alive() for t in threads)
    assert state == {"count": 1200, "inside": 0, "overlaps": 0}
    assert lock.waits > 0  # the contended path ran
    assert lock.waiters == 0 and not lock.locked()

