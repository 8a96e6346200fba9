"""The memory of a block: a CuPy ``UnownedMemory`` whose death frees the block.

Each block the pool hands out is a ``MemoryPointer`` to a :class:`Block` whose ``owner``
is the block's :class:`~cupool.allocator.tickets.Ticket`. Every ``MemoryPointer`` into the
block (the array's ``.data`` and those of all its views) holds the ``Block``, so it dies
when the array and its last view are gone: when CuPy's own pool frees a block (its
``PooledMemory`` frees itself in ``__dealloc__``).

CuPy's memory hooks are per thread: :func:`thread_hooks` finds the calling thread's, which
the pool's ``malloc`` and the finaliser call around their work when there are any.
"""

from __future__ import annotations

import threading

from cupy.cuda import memory_hook
from cupy.cuda.memory import MemoryPointer, UnownedMemory

from cupool.allocator.tickets import Ticket

__all__ = ["Block", "pointer", "thread_hooks", "thread_state"]

_get_memory_hooks = memory_hook.get_memory_hooks
thread_state = threading.local()
"""``thread_state.hooks``: the calling thread's CuPy memory-hook dict, once
:func:`thread_hooks` has run in the thread (the pool's ``malloc`` reads it inline)."""


def thread_hooks() -> dict:
    """The calling thread's CuPy memory hooks: the dict ``MemoryHook.__enter__`` adds
    itself to and ``__exit__`` removes itself from.

    CuPy keeps one such dict per thread, made by the thread's first
    ``memory_hook.get_memory_hooks()`` call and never replaced, so the pool fetches it
    once per thread (making it if the thread has none yet) and keeps a reference in a
    ``threading.local``: one attribute read and a truth test then tell exactly whether
    the thread has hooks installed, cheaper than ``memory_hook._has_memory_hooks()``
    (a call, and the same kind of thread-local read) plus ``get_memory_hooks()``.
    (A side effect: CuPy's own ``_has_memory_hooks()`` is true in such threads, so
    CuPy's pool looks at the empty dict there: the same outcome.)
    """
    try:
        return thread_state.hooks
    except AttributeError:
        hooks = thread_state.hooks = _get_memory_hooks()
        return hooks


class Block(UnownedMemory):
    """The memory of one block: an ``UnownedMemory`` (``owner``: the block's ticket)
    whose death frees the block.

    ``__del__`` calls the CuPy free hooks of the freeing thread, if it has any, and
    queues the ticket with ``ticket.release`` (a ``deque.append``, which the GIL makes
    atomic). It never takes the pool's lock (it may run inside the pool, from the
    garbage collector, or in any thread), never raises, and does not resurrect the
    block: the pool processes the ticket under its lock at its next operation.
    """

    __slots__ = ()

    def __del__(self) -> None:
        try:
            ticket = self._owner
            try:
                hooks = thread_state.hooks  # thread_hooks(), inlined
            except AttributeError:
                hooks = thread_hooks()
            if hooks:
                _free_with_hooks(hooks, self, ticket)
            else:
                release = ticket.release  # read first: a slot is not a method (tickets)
                release(ticket)
        except Exception:  # never raise in __del__ (interpreter shutdown, broken hook)
            pass


def _free_with_hooks(hooks: dict, block: Block, ticket: Ticket) -> None:
    size, ptr, device_id, pmem_id = block.size, block.ptr, block.device_id, id(block)
    for hook in hooks.values():
        hook.free_preprocess(device_id=device_id, mem_size=size, mem_ptr=ptr, pmem_id=pmem_id)
    try:
        ticket.release(ticket)
    finally:
        for hook in hooks.values():
            hook.free_postprocess(device_id=device_id, mem_size=size, mem_ptr=ptr,
                                  pmem_id=pmem_id)


def pointer(ticket: Ticket, size: int, device_id: int) -> MemoryPointer:
    """The ``MemoryPointer`` handed out for ``ticket`` (a block already booked)."""
    try:
        block = Block(ticket.ptr, size, ticket, device_id)
    except BaseException:  # nothing owns the ticket: free the block now
        ticket.release(ticket)
        raise
    return MemoryPointer(block, 0)  # if this fails, ``block`` dies and frees the block
