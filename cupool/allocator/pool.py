"""``PlannedPool``: a ``cupy.cuda.MemoryPool`` that records an iteration, plans it, and then
serves every allocation of later iterations at a precomputed offset.

::

    pool = PlannedPool(device="auto", capacity="6GiB")
    cupy.cuda.set_allocator(pool.malloc)
    for batch in loader:
        with pool.iteration():       # record, then plan, then served from the plan
            loss = train_step(batch)

**Regions.** Every block comes from one of three regions, each made of device
reservations (:meth:`Device.reserve <cupool.devices.protocol.Device.reserve>`):

- the **persistent region**: allocations outside any ``iteration()`` (weights,
  optimizer state, anything made between iterations). Best fit with split/merge
  (:class:`~cupool.allocator.arena.BestFitArena`); plans never touch it.
- the **planned arena**: one reservation of exactly ``plan.arena_bytes``; the k-th
  allocation of a planned iteration is the bytes ``[offset_k, offset_k + size_k)``.
- the **fallback region**: best fit with split/merge, for iterations being recorded and
  for allocations a plan cannot serve.

**Modes** (``pool.mode``):

- ``"record"``: allocations inside ``iteration()`` are served by the fallback region and
  logged (:mod:`cupool.allocator.recording`). After ``record_iterations`` iterations in a row
  that agree (same rounded sizes in the same order), the pool builds a trace from them,
  solves it with ``cupool.planning.plan(trace, solver)``, releases the fallback
  segments that are now empty, reserves the planned arena and switches to ``"planned"``.
- ``"planned"``: allocation k of the iteration is served at its planned offset in O(1)
  when its rounded size is the plan's and its bytes are free. Otherwise it is served by
  the fallback region and counted: a *divergent* allocation (wrong size, or more
  allocations than planned) or a *collision* (a block that outlived its planned lifetime,
  e.g. a loss kept until the next step, still holds those bytes). A planned iteration
  with a divergent allocation, or with fewer allocations than the plan, is *divergent*;
  after ``divergence_limit`` divergent iterations in a row the pool retires the plan
  (its arena is released when its last block is freed) and records again.
- ``"unplanned"``: a plan could not be installed (its arena does not fit the limit or
  the device); iterations are served by the fallback region without recording, until
  :meth:`PlannedPool.replan` is called.

No live block is ever overlapped: the planned path checks, in O(1), a per-slot count of
*overdue* blocks (planned blocks still live after their planned end) whose bytes
intersect the slot's (see :class:`~cupool.allocator.arena.PlannedArena`).

**Sizes.** Every request is rounded up to a multiple of 512 bytes, as CuPy's pool does
(cudaMalloc's alignment); plans are solved on the rounded sizes, and ``used_bytes()``
and the statistics count rounded bytes. ``malloc(0)`` returns a null pointer and uses
no memory.

**Capacity** is a limit, not a reservation: the pool reserves what its regions need and
``reserved_bytes`` (``total_bytes()``) is what it holds from the device. A reservation
that would pass the limit, or that the device refuses, escalates as CuPy does (release
empty segments, retry; ``gc.collect()``, release, retry) and then raises
:class:`~cupool.allocator.errors.PoolOutOfMemoryError` (a
``cupy.cuda.memory.OutOfMemoryError``) whose message ends with a report of what was live.

**Frees.** Each block's memory is a small ``UnownedMemory`` subclass (``_Block``, its
``owner`` the block's *ticket*) whose ``__del__`` frees the block, so views keep memory
alive exactly as in CuPy (whose own pool frees a block when its ``PooledMemory`` dies).
The finaliser never takes the pool's lock (it may run inside the pool, from the garbage
collector): it calls the CuPy free hooks, if the freeing thread has any, and appends
the ticket to a queue, which the next pool operation drains under the lock, before
anything else. Statistics and ``used_bytes()`` drain it first too.

**Threads.** One lock (``_lock``, a :class:`~cupool.allocator.lock.PoolLock`:
``threading.Lock`` semantics, with an uncontended acquire and release of one GIL-atomic
``deque`` call each) guards every field marked *guarded* below; mallocs and frees may
come from any thread. Iterations are pool-wide: allocations from any thread between
``__enter__`` and ``__exit__`` belong to the iteration, so a plan is only useful when
their order repeats. Solving a plan runs under the lock, at the end of the iteration that
completes the recording.

**Speed.** ``pool.malloc`` is a closure (:meth:`PlannedPool._make_malloc`) with the
planned case inlined; per planned allocation it does the size checks, one look at the
thread's memory hooks, the lock, the queued frees, an O(1) slot check and the byte
counters. Planned slots' tickets are made when the plan is installed; ``frees`` and
``live_blocks`` are counted from the regions when the statistics are read.
"""

from __future__ import annotations

import collections
import gc
import logging
import operator
import os
from pathlib import Path

from cupy.cuda.memory import MemoryPointer, MemoryPool, UnownedMemory

from cupool.allocator.arena import ALLOCATION_UNIT, BestFitArena, LiveBlock, PlannedArena
from cupool.allocator.blocks import Block, pointer, thread_hooks, thread_state
from cupool.allocator.errors import (
    AllocationSizeError,
    CapacityError,
    IterationStateError,
    PoolError,
    PoolOutOfMemoryError,
)
from cupool.allocator.lock import PoolLock
from cupool.allocator.recording import (
    RecordedIteration,
    Recorder,
    RecordLog,
    from_trace,
    to_trace,
)
from cupool.allocator.stats import PoolCounters
from cupool.allocator.tickets import FALLBACK_BLOCK, PERSISTENT_BLOCK, PLANNED_BLOCK, Ticket
from cupool.core.units import format_bytes, parse_bytes
from cupool.core.vocabulary import Plan, SolveStatus, Trace
from cupool.devices import Device, open_device
from cupool.devices.errors import DeviceOutOfMemoryError
from cupool.errors import PlanFormatError

__all__ = ["ALLOCATION_UNIT", "MODES", "PlannedPool"]


RECORD, PLANNED, UNPLANNED = "record", "planned", "unplanned"
MODES = (RECORD, PLANNED, UNPLANNED)

_log = logging.getLogger("cupool.allocator")
class _Active:
    """Holds the planned arena of the running iteration (``arena``; None outside planned
    iterations), guarded by the pool's lock. A separate ``__slots__`` object because the
    planned path reads it on every allocation: attribute reads on the pool itself (a
    subclass of CuPy's compiled ``MemoryPool``) are not specialised by CPython 3.11's
    interpreter and cost several times more."""

    __slots__ = ("arena",)

    def __init__(self) -> None:
        self.arena: PlannedArena | None = None


class _Iteration:
    """What ``pool.iteration()`` returns: a one-shot context manager."""

    __slots__ = ("pool", "state")

    def __init__(self, pool: PlannedPool) -> None:
        self.pool = pool
        self.state = 0  # 0: not entered, 1: running, 2: exited

    def __enter__(self) -> PlannedPool:
        if self.state != 0:
            raise IterationStateError(
                "this iteration() was already entered; use a new pool.iteration() per "
                "iteration")
        self.pool._begin_iteration()
        self.state = 1
        return self.pool

    def __exit__(self, exc_type, exc, traceback) -> None:
        if self.state != 1:
            what = "exited twice" if self.state == 2 else "exited without being entered"
            raise IterationStateError(f"iteration() {what}")
        self.state = 2
        self.pool._end_iteration(failed=exc_type is not None)


def _companion_trace_path(path: Path) -> Path:
    name = path.name.removesuffix(".json")
    return path.with_name(f"{name}.trace.json")


class PlannedPool(MemoryPool):
    """A ``cupy.cuda.MemoryPool`` that serves repeating iterations from a plan (see the
    module docstring for modes, regions and guarantees).

    Args:
        device: ``"auto"``, ``"emulated"``, ``"cuda"`` (opened with
            :func:`~cupool.devices.open_device` and owned by the pool) or an open
            :class:`~cupool.devices.protocol.Device` (owned by the caller).
        capacity: the most bytes the pool may reserve (``int`` or ``"6GiB"``); ``None``:
            only the device's free memory limits it. Larger than the device's total
            memory: :class:`CapacityError`. Same as ``set_limit(size=capacity)``.
        solver: offset solver name (``cupool.planning.SOLVER_NAMES``).
        solver_params: :class:`~cupool.planning.solvers.SolverParams`; default: the
            solver's defaults with ``time_limit_s=solve_time_limit``.
        solve_time_limit: seconds a search may spend planning (default 5).
        divergence_limit: divergent planned iterations in a row before re-recording (>= 1).
        record_iterations: agreeing recorded iterations needed before planning (>= 1).
        name: the name of recorded traces and plans.
        device_options: options for ``open_device`` when ``device`` is a kind.
    """

    def __init__(self, device: str | Device = "auto", capacity: int | str | None = None, *,
                 solver: str = "auto", solver_params=None, solve_time_limit: float = 5.0,
                 divergence_limit: int = 2, record_iterations: int = 1,
                 name: str = "pool", device_options: dict | None = None) -> None:
        super().__init__()
        for field, value in (("divergence_limit", divergence_limit),
                             ("record_iterations", record_iterations)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PoolError(f"{field} (={value!r}) must be an int >= 1")
        from cupool.planning.solvers import SOLVER_NAMES, SolverParams

        if solver not in SOLVER_NAMES:
            raise PoolError(f"solver (={solver!r}) must be one of {', '.join(SOLVER_NAMES)}")
        if isinstance(device, Device):
            self.device, self._owns_device = device, False
        else:
            self.device = open_device(device, **(device_options or {}))
            self._owns_device = True
        self.device_id = int(getattr(self.device, "device_id", 0))
        self.name = name
        self.solver = solver
        self.solver_params = solver_params or SolverParams(time_limit_s=solve_time_limit)
        self.divergence_limit = divergence_limit
        _free, self._device_total = self.device.mem_info()

        self._lock = PoolLock()
        # Everything below is guarded by _lock, except _pending (a thread-safe deque that
        # finalisers append to without the lock) and the read-only fields above.
        self._pending: collections.deque[Ticket] = collections.deque()
        self._release_ticket = self._pending.append  # Ticket.release: dying blocks call it
        self._limit = 0  # 0: no limit but the device's
        self._mode = RECORD
        self._in_iteration = False
        self._cursor = 0  # allocations made in the current record/unplanned iteration
        self._divergent_streak = 0
        self._recorder = Recorder(record_iterations)
        self._arena: PlannedArena | None = None  # the active plan, in PLANNED mode
        self._state = _Active()  # .arena: _arena while a planned iteration runs
        self._last_arena: PlannedArena | None = None  # the last installed plan (for save)
        self._retired: list[PlannedArena] = []
        self._fallback = BestFitArena("fallback")
        self._persistent = BestFitArena("persistent")
        self._counters = PoolCounters()
        if capacity is not None:
            self._limit = self._check_capacity("capacity", parse_bytes(capacity, "capacity"))
        self.malloc = self._make_malloc()  # the fast equivalent of PlannedPool.malloc

    # -- CuPy's allocator protocol ------------------------------------------------------
    def malloc(self, size) -> MemoryPointer:
        """A ``MemoryPointer`` to at least ``size`` bytes (rounded up to 512), from the
        plan, the fallback region or the persistent region (see the module docstring).

        Raises :class:`AllocationSizeError` for a size that is not an ``int >= 0`` and
        :class:`PoolOutOfMemoryError` when the bytes cannot be found.

        This is the general path. Each pool's ``malloc`` attribute (what
        ``cupy.cuda.set_allocator(pool.malloc)`` installs) is an equivalent function
        made by :meth:`_make_malloc`, with the planned case inlined.
        """
        if type(size) is not int:
            size = self._check_size(size)
        if size <= 0:
            if size == 0:
                return self._zero_size()
            raise AllocationSizeError(size)
        rounded = (size + 511) & -512
        hooks = thread_hooks()
        if hooks:
            return self._malloc_with_hooks(hooks, size, rounded)
        return pointer(self._allocate(rounded), rounded, self.device_id)

    def _make_malloc(self):
        """The pool's fast ``malloc``: :meth:`malloc` with the planned case inlined.

        A closure over the pool's long-lived parts (its lock's token calls, the free
        queue, the counters, the ``_Active`` holder), so the planned path reads no
        attribute of the pool itself (see :class:`_Active`). Under the lock it drains
        the queued frees, then serves slot k at its planned offset when the request has
        the slot's size and the slot is not blocked; any other case goes to
        :meth:`_allocate_locked`, the general path.
        """
        lock = self._lock
        take, give = lock.take, lock.give
        pending = self._pending
        popleft = pending.popleft
        counters = self._counters
        state = self._state
        device_id = self.device_id
        check_size, zero_size = self._check_size, self._zero_size
        malloc_with_hooks, allocate_locked = self._malloc_with_hooks, self._allocate_locked
        allocate_off_plan, free_ticket = self._allocate_off_plan, self._free_ticket

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
                arena = state.arena
                if arena is None:
                    ticket = allocate_locked(rounded)
                else:
                    current = counters.allocated_bytes_current
                    if pending:  # _drain(), specialised for blocks of the active plan
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
                        ticket = allocate_off_plan(arena, k, rounded)
                    else:
                        due = slot.due
                        if due:
                            live = arena.live
                            for j in due:
                                if live[j]:
                                    live[j] = 0
                                    arena.make_overdue(j)
                                    slot = arena.slots[k]  # the blocked one if j meets k
                        if slot.serves == rounded:  # the plan's size, and not blocked
                            ticket = slot.ticket
                            arena.live[k] = 1
                            current += rounded
                            counters.allocated_bytes_current = current
                            if current > counters.allocated_bytes_peak:
                                counters.allocated_bytes_peak = current
                        else:
                            ticket = allocate_off_plan(arena, k, rounded)
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

        malloc.__doc__ = PlannedPool.malloc.__doc__
        return malloc

    def _allocate_off_plan(self, arena: PlannedArena, k: int, size: int) -> Ticket:
        """Slot k of a planned iteration cannot be served from the plan (caller holds
        _lock and has advanced the cursor): count why, serve from the fallback region."""
        counters = self._counters
        if k < arena.n and arena.sizes[k] == size:
            counters.collisions += 1
        else:
            counters.divergent_allocations += 1
            arena.diverged = True
        counters.fallback_allocations += 1
        arena.off_plan += 1
        return self._fallback_ticket(size)

    def _allocate_slow(self, size: int) -> Ticket:
        """Record mode, unplanned mode, and the persistent region (caller holds _lock)."""
        counters = self._counters
        if self._in_iteration:
            if self._mode == RECORD:
                log = self._recorder.log
                ticket = self._fallback_ticket(size, log)
                log.add(size)
                counters.recorded_allocations += 1
            else:
                ticket = self._fallback_ticket(size)
            self._cursor += 1
            return ticket
        persistent = self._persistent
        ptr = self._take(persistent, size, "persistent region")
        counters.persistent_allocations += 1
        counters.add("persistent_bytes", size)
        counters.add("allocated_bytes", size)
        return Ticket(self._release_ticket, PERSISTENT_BLOCK, size, -1, persistent, ptr)

    def _fallback_ticket(self, size: int, log: RecordLog | None = None) -> Ticket:
        """The ticket of a new block of the fallback region; with ``log``, the block is
        the log's next allocation (the caller logs it once this returns)."""
        fallback = self._fallback
        ptr = self._take(fallback, size, "fallback region")
        counters = self._counters
        counters.fallback_mallocs += 1
        counters.add("fallback_bytes", size)
        counters.add("allocated_bytes", size)
        slot = -1 if log is None else len(log.sizes)
        return Ticket(self._release_ticket, FALLBACK_BLOCK, size, slot, fallback, ptr, log)

    def _take(self, arena: BestFitArena, size: int, what: str) -> int:
        """Best fit in ``arena``, growing it by one exact-size segment when nothing fits."""
        ptr = arena.alloc(size)
        if ptr is None:
            arena.add_segment(self._reserve(size, what))
            ptr = arena.alloc(size)
        return ptr

    def _allocate(self, size: int) -> Ticket:
        """Book ``size`` rounded bytes and return the block's ticket."""
        with self._lock:
            return self._allocate_locked(size)

    def _allocate_locked(self, size: int) -> Ticket:
        """:meth:`_allocate` for a caller holding _lock: drain the queued frees, then
        serve from the plan, the fallback region or the persistent region."""
        self._drain()
        arena = self._state.arena
        if arena is None:
            return self._allocate_slow(size)
        ticket = arena.serve(size)
        if ticket is None:
            return self._allocate_off_plan(arena, arena.cursor - 1, size)
        self._counters.add("allocated_bytes", size)
        return ticket

    def _malloc_with_hooks(self, hooks, size: int, rounded: int) -> MemoryPointer:
        device_id = self.device_id
        for hook in hooks.values():
            hook.malloc_preprocess(device_id=device_id, size=size, mem_size=rounded)
        memory = None
        try:
            memory = pointer(self._allocate(rounded), rounded, device_id)
        finally:
            mem_ptr = memory.ptr if memory is not None else 0
            pmem_id = id(memory.mem) if memory is not None else 0
            for hook in hooks.values():
                hook.malloc_postprocess(device_id=device_id, size=size, mem_size=rounded,
                                        mem_ptr=mem_ptr, pmem_id=pmem_id)
        return memory

    def _zero_size(self) -> MemoryPointer:
        with self._lock:
            self._counters.zero_size_allocations += 1
        return MemoryPointer(UnownedMemory(0, 0, None, self.device_id), 0)

    @staticmethod
    def _check_size(size) -> int:
        if isinstance(size, bool):
            raise AllocationSizeError(size, "must be an int >= 0, not a bool")
        try:
            return operator.index(size)
        except TypeError:
            raise AllocationSizeError(size) from None

    # -- frees --------------------------------------------------------------------------
    def _drain(self) -> None:
        """Process queued frees (caller holds _lock)."""
        pending = self._pending
        if pending:
            counters = self._counters
            while pending:
                ticket = pending.popleft()
                counters.allocated_bytes_current -= ticket.size
                self._free_ticket(ticket)

    def _free_ticket(self, ticket: Ticket) -> None:
        """Return a freed block to its region (the caller has taken its size off
        ``allocated_bytes``)."""
        kind, region = ticket.kind, ticket.region
        if kind == PLANNED_BLOCK:
            if region.free(ticket.slot):  # the last live block of a retired arena
                self._retired.remove(region)
                self._release(region.memory)
                region.close_tickets()
        elif kind == FALLBACK_BLOCK:
            region.free(ticket.ptr)
            self._counters.fallback_bytes_current -= ticket.size
            if ticket.record is not None:
                ticket.record.free(ticket.slot)
        else:
            region.free(ticket.ptr)
            self._counters.persistent_bytes_current -= ticket.size

    # -- device reservations --------------------------------------------------------------
    def _reserve(self, size: int, what: str):
        """Reserve ``size`` bytes for ``what``, escalating like CuPy before giving up
        (caller holds _lock)."""
        for attempt in range(3):
            if attempt == 1:
                self._release_empty()
            elif attempt == 2:
                gc.collect()
                self._drain()
                self._release_empty()
            reserved = self._counters.reserved_bytes_current
            if self._limit and reserved + size > self._limit:
                continue
            try:
                memory = self._device_reserve(size)
            except DeviceOutOfMemoryError:
                continue
            return memory
        self._counters.oom_errors += 1
        raise PoolOutOfMemoryError(size, self._counters.reserved_bytes_current, self._limit,
                                   self._report(size, what))

    def _device_reserve(self, size: int):
        device_id = self.device_id
        hooks = thread_hooks()
        if hooks:
            for hook in hooks.values():
                hook.alloc_preprocess(device_id=device_id, mem_size=size)
        memory = None
        try:
            memory = self.device.reserve(size)
        finally:
            if hooks:
                for hook in hooks.values():
                    hook.alloc_postprocess(device_id=device_id, mem_size=size,
                                           mem_ptr=memory.ptr if memory is not None else 0)
        self._counters.add("reserved_bytes", size)
        self._counters.device_reservations += 1
        return memory

    def _release(self, memory) -> None:
        if memory is None:
            return
        self.device.release(memory)
        self._counters.reserved_bytes_current -= memory.size
        self._counters.device_releases += 1

    def _release_empty(self) -> None:
        for arena in (self._fallback, self._persistent):
            for segment in arena.take_empty_segments():
                self._release(segment)

    def _report(self, size: int, what: str) -> str:
        """A readable account of the pool when ``size`` bytes for ``what`` cannot be had."""
        counters = self._counters
        try:
            free, total = self.device.mem_info()
            device = f"{free} of {total} bytes free"
        except Exception as exc:  # a broken device must not hide the OOM itself
            device = f"mem_info failed: {exc}"
        arena = self._arena
        fallback, persistent = self._fallback.stats(), self._persistent.stats()
        lines = [
            f"PlannedPool {self.name!r} on device {self.device.name!r}: cannot reserve "
            f"{size} bytes ({format_bytes(size)}) for the {what}",
            f"  mode {self._mode}; limit {self._limit or 'none'}; device: {device}",
            f"  reserved {counters.reserved_bytes_current} bytes: planned arena "
            f"{arena.reserved_bytes if arena else 0}, retired arenas "
            f"{sum(a.reserved_bytes for a in self._retired)}, fallback "
            f"{fallback.segment_bytes} ({fallback.allocated_bytes} in use, largest free range "
            f"{fallback.largest_free_range}), persistent {persistent.segment_bytes} "
            f"({persistent.allocated_bytes} in use, largest free range "
            f"{persistent.largest_free_range})",
        ]
        live = self._live_blocks()
        lines.append(f"  live blocks: {len(live)} holding {sum(b.size for b in live)} bytes; "
                     f"largest:")
        for kind, ptr, block_size, slot in sorted(live, key=lambda b: -b.size)[:10]:
            where = f" slot {slot}" if slot >= 0 else ""
            lines.append(f"    {block_size:>14} B  {kind:<10}{where} at {ptr:#x}")
        return "\n".join(lines)

    def _live_count(self) -> int:
        """The number of live blocks (caller holds _lock and has drained)."""
        arenas = [*([self._arena] if self._arena else []), *self._retired]
        return (self._fallback.live_count + self._persistent.live_count
                + sum(arena.live_count() for arena in arenas))

    def _live_blocks(self) -> list[LiveBlock]:
        """Every live block (caller holds _lock)."""
        live = [*self._fallback.live_blocks(), *self._persistent.live_blocks()]
        for arena in [*([self._arena] if self._arena else []), *self._retired]:
            live += arena.live_blocks()
        return live

    # -- iterations -----------------------------------------------------------------------
    def iteration(self) -> _Iteration:
        """A context manager around one iteration of the repeating workload: recorded in
        ``"record"`` mode, served from the plan in ``"planned"`` mode. Entering it while
        another iteration runs, or exiting it twice, raises :class:`IterationStateError`.
        An iteration whose body raises is not used for planning and not counted as
        divergent."""
        return _Iteration(self)

    def _begin_iteration(self) -> None:
        with self._lock:
            self._drain()
            if self._in_iteration:
                active = self._state.arena
                made = active.cursor if active is not None else self._cursor
                raise IterationStateError(
                    f"iteration() nested: an iteration is already running ({made} "
                    f"allocations so far, mode {self._mode!r}); iterations do not nest")
            self._in_iteration = True
            self._cursor = 0
            self._recorder.begin()
            if self._arena is not None:
                self._arena.begin_iteration()
                self._state.arena = self._arena

    def _end_iteration(self, failed: bool) -> None:
        with self._lock:
            self._drain()
            self._in_iteration = False
            self._state.arena = None
            if self._mode == RECORD:
                if not failed:
                    self._finish_recording()
            elif self._mode == PLANNED:
                arena = self._arena
                arena.end_iteration()
                counters = self._counters
                counters.planned_iterations += 1
                made = arena.cursor
                counters.planned_hits += made - arena.off_plan
                arena.cursor = arena.off_plan = 0
                if failed:
                    return
                if arena.diverged or made != arena.n:
                    counters.divergent_iterations += 1
                    self._divergent_streak += 1
                    if self._divergent_streak >= self.divergence_limit:
                        self._drop_plan()
                        counters.replans += 1
                else:
                    self._divergent_streak = 0

    def _finish_recording(self) -> None:
        self._counters.recorded_iterations += 1
        merged = self._recorder.finish()
        if merged is not None:
            trace = to_trace(merged, self.name)
            self._install(self._solve(trace), trace, merged)

    def _solve(self, trace: Trace) -> Plan:
        if not trace.buffers:
            return Plan(trace.name, trace.digest(), self.solver, SolveStatus.OPTIMAL, 0, 0, ())
        from cupool.planning import plan

        return plan(trace, self.solver, None, self.solver_params)

    def _install(self, plan: Plan, trace: Trace, recording: RecordedIteration) -> bool:
        """Reserve ``plan``'s arena and switch to planned mode (caller holds _lock).
        False, with the pool in ``"unplanned"`` mode, when the arena cannot be reserved."""
        self._release_empty()
        memory = None
        if plan.arena_bytes:
            try:
                memory = self._reserve(plan.arena_bytes, "planned arena")
            except PoolOutOfMemoryError as exc:
                self._counters.oom_errors -= 1  # not raised to the caller
                self._counters.plan_failures += 1
                self._mode = UNPLANNED
                _log.warning("PlannedPool %r: plan of %d bytes not installed; serving "
                             "iterations from the fallback region: %s", self.name,
                             plan.arena_bytes, exc)
                return False
        self._arena = self._last_arena = PlannedArena(plan, trace, recording, memory,
                                                       self._release_ticket)
        self._counters.add("arena_bytes", self._arena.reserved_bytes)
        self._counters.plans += 1
        self._mode = PLANNED
        self._divergent_streak = 0
        return True

    def _drop_plan(self) -> None:
        """Retire the active plan (if any) and go back to recording (caller holds _lock)."""
        arena = self._arena
        self._arena = None
        self._mode = RECORD
        self._recorder.drop_recordings()
        self._divergent_streak = 0
        if arena is None:
            return
        self._counters.arena_bytes_current -= arena.reserved_bytes
        if arena.retire():
            self._release(arena.memory)
            arena.close_tickets()
        else:
            self._retired.append(arena)

    def replan(self) -> None:
        """Drop the plan (its arena is released once its blocks are freed) and record the
        next iteration(s) again. Not allowed inside an iteration."""
        with self._lock:
            self._drain()
            if self._in_iteration:
                raise IterationStateError("replan() inside an iteration; call it between "
                                          "iterations")
            self._drop_plan()

    # -- plans on disk --------------------------------------------------------------------
    @property
    def plan(self) -> Plan | None:
        """The plan installed last (``None`` before the first one)."""
        arena = self._last_arena
        return arena.plan if arena is not None else None

    @property
    def arena_ptr(self) -> int | None:
        """Device address of the active plan's arena (``None`` without one): slot k of a
        planned iteration is served at ``arena_ptr + offset_k``."""
        arena = self._arena
        return arena.memory.ptr if arena is not None and arena.memory is not None else None

    @property
    def trace(self) -> Trace | None:
        """The trace the last plan was solved for."""
        arena = self._last_arena
        return arena.trace if arena is not None else None

    def save_plan(self, path: str | os.PathLike, trace_path: str | os.PathLike | None = None
                  ) -> tuple[Path, Path]:
        """Write the last plan as plan JSON at ``path`` and its recorded trace (trace v1)
        at ``trace_path`` (default: ``path`` with ``.json`` replaced by ``.trace.json``);
        both paths are returned. :class:`PoolError` when nothing was planned yet."""
        from cupool.io import save_plan, save_trace

        arena = self._last_arena
        if arena is None:
            raise PoolError(f"save_plan({os.fspath(path)!r}): pool {self.name!r} has no plan "
                            f"yet (mode {self._mode!r}); run an iteration() first")
        path = Path(path)
        trace_path = Path(trace_path) if trace_path is not None else _companion_trace_path(path)
        save_trace(arena.trace, trace_path)
        save_plan(arena.plan, path)
        return path, trace_path

    def load_plan(self, path: str | os.PathLike, trace_path: str | os.PathLike | None = None
                  ) -> Plan:
        """Install a plan written by :meth:`save_plan` (the next iteration runs from it).

        The plan must carry its trace's digest, pass the validator, and, if this pool
        already recorded or planned a trace, belong to that very trace; otherwise
        :class:`~cupool.errors.PlanFormatError` names both digests. Its arena is reserved
        now (:class:`PoolOutOfMemoryError` if it does not fit). Not inside an iteration.
        """
        from cupool.io import load_plan, load_trace
        from cupool.planning import validate_plan

        path = Path(path)
        trace_path = Path(trace_path) if trace_path is not None else _companion_trace_path(path)
        plan = load_plan(path)
        trace = load_trace(trace_path)
        if plan.trace_digest != trace.digest():
            raise PlanFormatError(
                f"the plan is for trace digest {plan.trace_digest!r} ({plan.trace_name!r}), "
                f"but {trace_path} has digest {trace.digest()!r}: a plan for another trace",
                path=str(path))
        report = validate_plan(trace, plan)
        if not report.valid:
            raise PlanFormatError(f"the plan is invalid for its trace: {report.message}",
                                  path=str(path))
        try:
            recording = from_trace(trace)
        except ValueError as exc:
            raise PlanFormatError(str(exc), path=str(trace_path)) from None
        odd = [s for s in recording.sizes if s % ALLOCATION_UNIT]
        if odd:
            raise PlanFormatError(f"buffer size (={odd[0]}) is not a multiple of "
                                  f"{ALLOCATION_UNIT}: not a pool recording", path=str(path))
        with self._lock:
            self._drain()
            if self._in_iteration:
                raise IterationStateError("load_plan() inside an iteration; call it between "
                                          "iterations")
            mine = self._last_arena.trace if self._last_arena is not None else None
            if mine is not None and mine.digest() != trace.digest():
                raise PlanFormatError(
                    f"the plan is for trace digest {trace.digest()!r}, but this pool runs "
                    f"trace {mine.name!r} with digest {mine.digest()!r}: a plan for another "
                    f"trace", path=str(path))
            self._drop_plan()
            if not self._install(plan, trace, recording):
                arena_bytes = plan.arena_bytes
                self._counters.oom_errors += 1
                raise PoolOutOfMemoryError(arena_bytes, self._counters.reserved_bytes_current,
                                           self._limit, self._report(arena_bytes,
                                                                     "loaded plan's arena"))
        return plan

    def install_plan(self, plan: Plan, trace: Trace) -> Plan:
        """Install a static ``plan`` for ``trace`` (a pool recording: buffer ``k`` is the
        k-th allocation of an iteration, sizes multiples of 512, as :meth:`save_plan`
        writes) without files; the next iteration runs from it. The swap runtime's
        executor uses it to serve every residency of a swapping plan from the planned
        arena (:mod:`cupool.runtime.executor`).

        The plan must pass the validator. When the active plan's arena has no live block
        and the same size, its reservation is kept for the new plan (its bytes stay where
        they are, so data a caller left there survives a re-plan); otherwise the active
        plan is dropped and the new arena reserved. Not inside an iteration. Raises
        :class:`~cupool.errors.PlanFormatError` for a plan that is invalid or not for a
        pool recording, :class:`PoolOutOfMemoryError` when the arena does not fit.
        """
        from cupool.planning import validate_plan

        if not plan.is_static:
            raise PlanFormatError("install_plan() takes a static plan (placements only); "
                                  "the swap runtime serves swapping plans through one")
        report = validate_plan(trace, plan)
        if not report.valid:
            raise PlanFormatError(f"the plan is invalid for its trace: {report.message}")
        try:
            recording = from_trace(trace)
        except ValueError as exc:
            raise PlanFormatError(str(exc)) from None
        odd = [s for s in recording.sizes if s % ALLOCATION_UNIT]
        if odd:
            raise PlanFormatError(f"buffer size (={odd[0]}) is not a multiple of "
                                  f"{ALLOCATION_UNIT}: not a pool recording")
        with self._lock:
            self._drain()
            if self._in_iteration:
                raise IterationStateError("install_plan() inside an iteration; call it "
                                          "between iterations")
            active = self._arena
            if active is not None and active.memory is not None \
                    and active.live_count() == 0 and active.reserved_bytes == plan.arena_bytes:
                memory = active.memory
                active.memory = None  # handed over: retiring the old plan releases nothing
                active.retire()
                active.close_tickets()
                self._arena = self._last_arena = PlannedArena(plan, trace, recording, memory,
                                                               self._release_ticket)
                self._counters.plans += 1
                self._mode = PLANNED
                self._divergent_streak = 0
                self._recorder.drop_recordings()
                return plan
            self._drop_plan()
            if not self._install(plan, trace, recording):
                self._counters.oom_errors += 1
                raise PoolOutOfMemoryError(plan.arena_bytes,
                                           self._counters.reserved_bytes_current, self._limit,
                                           self._report(plan.arena_bytes, "installed plan's arena"))
        return plan

    # -- CuPy's MemoryPool methods ----------------------------------------------------------
    def used_bytes(self) -> int:
        """Bytes handed out and not yet freed (rounded sizes)."""
        with self._lock:
            self._drain()
            return self._counters.allocated_bytes_current

    def total_bytes(self) -> int:
        """Bytes reserved from the device (all regions)."""
        with self._lock:
            self._drain()
            return self._counters.reserved_bytes_current

    def free_bytes(self) -> int:
        """Bytes reserved from the device and not handed out."""
        with self._lock:
            self._drain()
            counters = self._counters
            return counters.reserved_bytes_current - counters.allocated_bytes_current

    def n_free_blocks(self) -> int:
        """Free ranges in the fallback and persistent regions (the planned arena has no
        free list)."""
        with self._lock:
            self._drain()
            return self._fallback.stats().free_ranges + self._persistent.stats().free_ranges

    def free_all_blocks(self, stream=None) -> None:
        """Return every fallback and persistent segment with no live block to the device.
        The active plan's arena stays reserved (:meth:`replan` drops it); ``stream`` is
        accepted for CuPy compatibility and ignored (the pool has one arena per region)."""
        with self._lock:
            self._drain()
            self._release_empty()

    def set_limit(self, size=None, fraction=None) -> None:
        """CuPy's rule: ``size`` bytes, or ``fraction`` of the device's total memory;
        neither (or 0): no limit but the device's. Both: ``ValueError``. A limit above the
        device's total: :class:`CapacityError`. Reservations already made are kept."""
        if size is not None and fraction is not None:
            raise ValueError("size and fraction cannot be specified at one time")
        if fraction is not None:
            if not 0 <= fraction <= 1:
                raise ValueError(f"memory limit fraction out of range: {fraction}")
            size = int(fraction * self._device_total)
        if size is None:
            size = 0
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"memory limit size out of range: {size!r}")
        limit = self._check_capacity("limit", size) if size else 0
        with self._lock:
            self._limit = limit

    def get_limit(self) -> int:
        """The limit in bytes (0: none but the device's)."""
        with self._lock:
            return self._limit

    def _check_capacity(self, what: str, size: int) -> int:
        if size > self._device_total:
            raise CapacityError(what, size, self._device_total, self.device.name)
        return size

    # -- statistics and state -------------------------------------------------------------
    @property
    def record_iterations(self) -> int:
        """Agreeing recorded iterations needed before planning (the constructor's)."""
        return self._recorder.record_iterations

    @record_iterations.setter
    def record_iterations(self, value: int) -> None:
        self._recorder.record_iterations = value

    @property
    def mode(self) -> str:
        """``"record"``, ``"planned"`` or ``"unplanned"`` (see the module docstring)."""
        return self._mode

    def memory_stats(self) -> dict[str, int]:
        """The flat statistics dict (key grammar: :mod:`cupool.allocator.stats`)."""
        with self._lock:
            self._drain()
            active = self._state.arena
            running = active.cursor - active.off_plan if active is not None else 0
            return self._counters.snapshot(self._live_count(), running_planned_hits=running)

    def reset_peak_stats(self) -> None:
        """Set every ``*.peak`` to its current value."""
        with self._lock:
            self._drain()
            self._counters.reset_peaks()

    def live_blocks(self) -> list[LiveBlock]:
        """Every live block, by address: :class:`~cupool.allocator.arena.LiveBlock` named
        tuples ``(kind, ptr, size, slot)``; ``slot`` is -1 outside plans."""
        with self._lock:
            self._drain()
            return sorted(self._live_blocks(), key=lambda b: b.ptr)

    def report(self) -> str:
        """The readable report an out-of-memory error carries, for the current state."""
        with self._lock:
            self._drain()
            return self._report(0, "nothing (report requested)")

    def close(self) -> None:
        """Release every reservation and close the device if the pool opened it.

        :class:`PoolError` if blocks are still live (their bytes would be released under
        them); free them (drop the arrays) first. Idempotent.
        """
        with self._lock:
            self._drain()
            if self._in_iteration:
                raise IterationStateError("close() inside an iteration")
            live = self._live_blocks()
            if live:
                raise PoolError(f"close(): {len(live)} blocks holding "
                                f"{sum(b.size for b in live)} bytes are still live")
            self._drop_plan()
            self._release_empty()
        if self._owns_device:
            self.device.close()

    def __repr__(self) -> str:
        return (f"<PlannedPool {self.name!r} mode={self._mode} "
                f"reserved={self._counters.reserved_bytes_current} on {self.device!r}>")
