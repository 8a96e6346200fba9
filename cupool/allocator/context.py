"""``managed(...)``: install a pool as CuPy's allocator for a block, restore the previous one.

::

    with cupool.managed(capacity="6GiB") as pool:      # a new PlannedPool(capacity="6GiB")
        for batch in loader:
            with pool.iteration():
                train_step(batch)
    # CuPy's previous allocator is back, even if the body raised

``cupy.cuda.get_allocator()`` is read on entry and given back to
``cupy.cuda.set_allocator`` in ``finally``. The pool is not closed on exit: arrays made
inside may outlive the block, and their blocks stay valid (call ``pool.close()`` once
they are gone). CuPy refuses ``set_allocator`` inside its ``using_allocator`` context
(a thread-local allocator); so does ``managed()``, with CuPy's ``ValueError``.
"""

from __future__ import annotations

import cupy

from cupool.allocator.errors import ManagedStateError
from cupool.allocator.pool import PlannedPool


class managed:  # lower case: used like a function, as contextlib's managers are
    """Context manager: ``PlannedPool(**options)`` (or ``pool``, if given) becomes CuPy's
    allocator inside the block. One-shot: entering it twice, or exiting it without
    entering, raises :class:`~cupool.allocator.errors.ManagedStateError`."""

    def __init__(self, pool: PlannedPool | None = None, **options) -> None:
        if pool is not None and options:
            raise ManagedStateError(f"managed(pool=..., {', '.join(options)}=...): options "
                                    f"are for a new pool; pass either a pool or options")
        self._options = options
        self.pool = pool
        self._previous = None
        self._state = 0  # 0: not entered, 1: inside, 2: exited

    def __enter__(self) -> PlannedPool:
        if self._state != 0:
            raise ManagedStateError("managed() entered twice; make a new managed() each time")
        if self.pool is None:
            self.pool = PlannedPool(**self._options)
        self._previous = cupy.cuda.get_allocator()
        cupy.cuda.set_allocator(self.pool.malloc)
        self._state = 1
        return self.pool

    def __exit__(self, exc_type, exc, traceback) -> None:
        if self._state != 1:
            what = "exited twice" if self._state == 2 else "exited without being entered"
            raise ManagedStateError(f"managed() {what}")
        self._state = 2
        previous, self._previous = self._previous, None
        cupy.cuda.set_allocator(previous)
