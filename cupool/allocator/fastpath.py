"""The pool's fast paths: ``pool.malloc``, what ``cupy.cuda.set_allocator(pool.malloc)``
installs, and ``pool.serve_ops``, the blocks of several ops served in one call.

Both are closures over the pool's long-lived parts (its lock's token calls, the free
queue, the counters, the :class:`~cupool.allocator.modes.ActiveArena` holder), so the
planned path reads no attribute of the pool itself. Under the lock they drain the queued
frees, then serve slot k at its planned offset when the request has the slot's size and
the slot is not blocked; any other case goes to :meth:`PoolModes.allocate
<cupool.allocator.modes.PoolModes.allocate>`, the general path. ``serve_ops`` does for
each block what ``malloc`` does, in the same order, holding the lock once for all; its
loop is compiled (``_serve.c``, built by pip: about 0.2 µs a block against 0.66 µs in
Python), with the Python loop where the extension is missing or CuPy memory hooks are
installed (every block then goes through ``malloc`` and its hooks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from cupy.cuda.memory import MemoryPointer

from cupool.allocator.blocks import Block, thread_hooks, thread_state
from cupool.allocator.errors import AllocationSizeError

try:  # the compiled serve_ops loop (built by pip; the Python loop gives the same results)
    from cupool.allocator._serve import DONE as LOOP_DONE
    from cupool.allocator._serve import MISSED as LOOP_MISSED
    from cupool.allocator._serve import serve_loop
except ImportError:  # pragma: no cover - no C compiler where it was installed
    serve_loop = None
    LOOP_DONE, LOOP_MISSED = 0, 1

__all__ = ["FastPaths", "Served", "make_fast_paths"]


class Served(NamedTuple):
    """What :attr:`FastPaths.serve_ops` did: ``ops`` ops had every block at its planned
    address; ``missed`` blocks landed elsewhere (all of them at op ``ops``, whose pool
    work is done too, when there are any)."""

    ops: int
    missed: int


@dataclass(frozen=True)
class FastPaths:
    """``malloc(size)``: CuPy's allocator protocol. ``serve_ops(blocks, ptrs, ops,
    transient=frozenset())``: for each op of ``ops``, a ``(frees, allocs)`` pair, pop the
    blocks keyed ``frees`` from ``blocks`` (their deaths free them), then serve each
    ``(key, bytes, planned address)`` of ``allocs`` in order into ``blocks[key]`` and
    its address into ``ptrs[key]``; up to the first op with a block off its planned
    address (:class:`Served`). A key of ``transient`` is one that a later op of ``ops``
    frees: its block is booked and freed as any other, but no ``MemoryPointer`` is made
    for it unless the call stops before its free (it then lands in ``blocks``)."""

    malloc: Callable
    serve_ops: Callable


def make_fast_paths(pool) -> FastPaths:
    """The :class:`FastPaths` of ``pool`` (a :class:`~cupool.allocator.pool.PlannedPool`)."""
    lock = pool._lock
    take, give = lock.take, lock.give
    modes, regions = pool._modes, pool._regions
    pending = regions.pending
    popleft = pending.popleft
    counters = pool._counters
    state = modes.active
    device_id = pool.device_id
    check_size, zero_size = pool._check_size, pool._zero_size
    malloc_with_hooks, allocate_locked = pool._malloc_with_hooks, modes.allocate
    allocate_off_plan, free_ticket = modes.allocate_off_plan, regions.free_ticket

    def ticket_locked(rounded: int):
        """The ticket for ``rounded`` bytes; the caller holds the lock."""
        arena = state.arena
        if arena is None:
            return allocate_locked(rounded)
        current = counters.allocated_bytes_current
        if pending:  # Regions.drain(), specialised for blocks of the active plan
            live = arena.live
            while pending:
                ticket = popleft()
                current -= ticket.size
                if ticket.region is arena:
                    j = ticket.slot
                    if live[j]:
                        live[j] = 0
                    else:
                        arena.end_overdue(j)
                else:
                    free_ticket(ticket)
            counters.allocated_bytes_current = current
        k = arena.cursor
        arena.cursor = k + 1
        try:  # PlannedArena.serve(), inlined
            slot = arena.slots[k]
        except IndexError:  # more allocations than the plan has
            return allocate_off_plan(arena, k, rounded)
        due = slot.due
        if due:
            live = arena.live
            for j in due:
                if live[j]:
                    live[j] = 0
                    arena.make_overdue(j)
                    slot = arena.slots[k]  # the blocked one if j meets k
        if slot.serves != rounded:  # another size, or blocked
            return allocate_off_plan(arena, k, rounded)
        arena.live[k] = 1
        current += rounded
        counters.allocated_bytes_current = current
        if current > counters.allocated_bytes_peak:
            counters.allocated_bytes_peak = current
        return slot.ticket

    def malloc(size) -> MemoryPointer:
        if type(size) is not int:
            size = check_size(size)
        if size <= 0:
            if size == 0:
                return zero_size()
            raise AllocationSizeError(size)
        rounded = (size + 511) & -512
        try:
            hooks = thread_state.hooks  # thread_hooks(), inlined
        except AttributeError:
            hooks = thread_hooks()
        if hooks:
            return malloc_with_hooks(hooks, size, rounded)
        try:
            take()  # lock.acquire(), inlined
        except IndexError:
            lock.wait_for()
        try:
            ticket = ticket_locked(rounded)
        finally:
            give(True)  # lock.release(), inlined
            if lock.waiters:
                lock.wake()
        try:  # pointer(), inlined
            block = Block(ticket.ptr, rounded, ticket, device_id)
        except BaseException:
            ticket.release(ticket)
            raise
        return MemoryPointer(block, 0)

    def serve_ops(blocks: dict, ptrs: dict, ops, transient=frozenset()) -> Served:
        try:
            hooks = thread_state.hooks
        except AttributeError:
            hooks = thread_hooks()
        if serve_loop is None or hooks:
            return serve_each(blocks, ptrs, ops, transient, hooks)
        return serve_compiled(blocks, ptrs, ops, transient)

    def serve_compiled(blocks: dict, ptrs: dict, ops, transient) -> Served:
        """``serve_ops`` through the compiled loop (``_serve.serve_loop``), which runs
        the planned path's steps under the lock and hands back an allocation whose size
        is not a positive int (served here by ``malloc``, outside the lock)."""
        if type(ops) is not list and type(ops) is not tuple:
            ops = list(ops)
        held = False
        tickets: dict = {}  # key -> (ticket, bytes) of a transient block served here
        j, i, missed = 0, -1, 0
        try:
            while True:
                if not held:
                    held = lock.acquire()
                status, j, i, missed = serve_loop(ops, j, i, missed, blocks, ptrs,
                                                  transient, tickets, context)
                if status == LOOP_DONE:
                    return Served(len(ops), 0)
                if status == LOOP_MISSED:
                    return Served(j, missed)
                held = False  # a size for malloc, which takes the lock itself
                lock.release()
                key, nbytes, planned = ops[j][1][i]
                blocks[key] = malloc(nbytes)  # no local keeps it: its free is a pop
                served = ptrs[key] = blocks[key].ptr
                missed += served != planned
                i += 1
        finally:
            _leave(held, blocks, tickets)

    def serve_each(blocks: dict, ptrs: dict, ops, transient, hooks) -> Served:
        """``serve_ops`` in Python, block by block (with CuPy memory hooks, every block
        through ``malloc``)."""
        held = False
        tickets: dict = {}  # key -> (ticket, bytes) of a transient block served here
        try:
            for j, (frees, allocs) in enumerate(ops):
                missed = 0
                for key in frees:
                    booked = tickets.pop(key, None)
                    if booked is None:
                        blocks.pop(key, None)  # its death queues the ticket: no lock taken
                    else:
                        release = booked[0].release  # what the block's death would do
                        release(booked[0])
                for key, nbytes, planned in allocs:
                    if hooks or type(nbytes) is not int or nbytes <= 0:
                        if held:  # malloc takes the lock itself
                            held = False
                            lock.release()
                        blocks[key] = malloc(nbytes)  # no local keeps it: its free is a pop
                        served = ptrs[key] = blocks[key].ptr
                    else:
                        if not held:
                            held = lock.acquire()
                        rounded = (nbytes + 511) & -512
                        ticket = ticket_locked(rounded)
                        served = ptrs[key] = ticket.ptr
                        if key in transient:
                            tickets[key] = (ticket, rounded)
                        else:
                            _hand_out(blocks, key, ticket, rounded)
                    if served != planned:
                        missed += 1
                if missed:
                    return Served(j, missed)
            return Served(len(ops), 0)
        finally:
            _leave(held, blocks, tickets)

    def _leave(held: bool, blocks: dict, tickets: dict) -> None:
        """The end of a ``serve_ops`` call: the lock given back where it is held, and the
        transient blocks booked but not freed (the call left early: they live on) handed
        out into ``blocks``."""
        if held:
            lock.release()
        for key, (ticket, rounded) in tickets.items():
            _hand_out(blocks, key, ticket, rounded)

    def _hand_out(blocks: dict, key, ticket, rounded: int) -> None:
        try:  # pointer(), inlined
            block = Block(ticket.ptr, rounded, ticket, device_id)
        except BaseException:
            ticket.release(ticket)
            raise
        blocks[key] = MemoryPointer(block, 0)  # (the local dies here: its free is a pop)

    context = (state, counters, pending, allocate_locked, allocate_off_plan, free_ticket,
               _hand_out)
    malloc.__doc__ = type(pool).malloc.__doc__
    return FastPaths(malloc, serve_ops)
