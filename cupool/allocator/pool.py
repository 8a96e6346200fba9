"""``PlannedPool``: a ``cupy.cuda.MemoryPool`` that records an iteration, plans it, and then
serves every allocation of later iterations at a precomputed offset.

::

    pool = PlannedPool(device="auto", capacity="6GiB")
    cupy.cuda.set_allocator(pool.malloc)
    for batch in loader:
        with pool.iteration():       # record, then plan, then served from the plan
            loss = train_step(batch)

The pool is CuPy's allocator protocol over these parts:

- :mod:`.regions`: every block comes from one of three regions, each made of device
  reservations (:meth:`Device.reserve <cupool.devices.protocol.Device.reserve>`): the
  **persistent region** (allocations outside any ``iteration()``: weights, optimizer
  state; best fit with split/merge, :class:`~cupool.allocator.arena.BestFitArena`; plans
  never touch it), the **planned arena** (one reservation of exactly
  ``plan.arena_bytes``; the k-th allocation of a planned iteration is the bytes
  ``[offset_k, offset_k + size_k)``, :class:`~cupool.allocator.arena.PlannedArena`) and
  the **fallback region** (best fit, for iterations being recorded and for allocations
  a plan cannot serve);
- :mod:`.modes`: the modes (``pool.mode``: ``"record"``, ``"planned"``,
  ``"unplanned"``), which region serves each allocation, and when a recording becomes a
  plan or a plan is dropped;
- :mod:`.tickets` and :mod:`.blocks`: what the pool knows about each block, and the
  CuPy memory whose death frees it; :mod:`.lock`: the pool's lock;
- :mod:`.recording`, :mod:`.plan_files` (plans installed from outside: one set of
  checks), :mod:`.stats` (the statistics' key grammar).

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

**Frees.** Each block's memory is a small ``UnownedMemory`` subclass
(:class:`~cupool.allocator.blocks.Block`, its ``owner`` the block's
:class:`~cupool.allocator.tickets.Ticket`) whose ``__del__`` frees the block, so views
keep memory alive exactly as in CuPy (whose own pool frees a block when its
``PooledMemory`` dies). The finaliser never takes the pool's lock (it may run inside the
pool, from the garbage collector): it calls the CuPy free hooks, if the freeing thread
has any, and appends the ticket to a queue, which the next pool operation drains under
the lock, before anything else. Statistics and ``used_bytes()`` drain it first too.

**Threads.** One lock (``_lock``, a :class:`~cupool.allocator.lock.PoolLock`:
``threading.Lock`` semantics, with an uncontended acquire and release of one GIL-atomic
``deque`` call each) guards the regions, the modes and the counters; mallocs and frees
may come from any thread. Iterations are pool-wide: allocations from any thread between
``__enter__`` and ``__exit__`` belong to the iteration, so a plan is only useful when
their order repeats. Solving a plan runs under the lock, at the end of the iteration that
completes the recording.

**Speed.** ``pool.malloc`` is a closure (:mod:`cupool.allocator.fastpath`) with the
planned case inlined; per planned allocation it does the size checks, one look at the
thread's memory hooks, the lock, the queued frees, an O(1) slot check and the byte
counters. Planned slots' tickets are made when the plan is installed; ``frees`` and
``live_blocks`` are counted from the regions when the statistics are read.
"""

from __future__ import annotations

import operator
import os
from pathlib import Path

from cupy.cuda.memory import MemoryPointer, MemoryPool, UnownedMemory

from cupool.allocator.arena import ALLOCATION_UNIT, LiveBlock
from cupool.allocator.blocks import pointer, thread_hooks
from cupool.allocator.errors import AllocationSizeError, IterationStateError, PoolError
from cupool.allocator.fastpath import make_fast_paths
from cupool.allocator.lock import PoolLock
from cupool.allocator.modes import MODES, PoolModes
from cupool.allocator.options import PoolOptions
from cupool.allocator.plan_files import check_pool_plan, read_pool_plan, write_pool_plan
from cupool.allocator.regions import Regions
from cupool.allocator.stats import PoolCounters
from cupool.allocator.tickets import Ticket
from cupool.core.units import parse_bytes
from cupool.core.vocabulary import Plan, Trace
from cupool.devices import Device, open_device
from cupool.errors import PlanFormatError

__all__ = ["ALLOCATION_UNIT", "MODES", "PlannedPool"]


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


class PlannedPool(MemoryPool):
    """A ``cupy.cuda.MemoryPool`` that serves repeating iterations from a plan (see the
    module docstring for regions and guarantees, :mod:`cupool.allocator.modes` for the
    modes).

    Args:
        device: ``"auto"``, ``"emulated"``, ``"cuda"`` (opened with
            :func:`~cupool.devices.open_device` and owned by the pool) or an open
            :class:`~cupool.devices.protocol.Device` (owned by the caller).
        capacity: the most bytes the pool may reserve (``int`` or ``"6GiB"``); ``None``:
            only the device's free memory limits it. Larger than the device's total
            memory: :class:`CapacityError`. Same as ``set_limit(size=capacity)``.
        **options: the fields of :class:`~cupool.allocator.options.PoolOptions`
            (``solver``, ``solver_params``, ``solve_time_limit``, ``divergence_limit``,
            ``record_iterations``, ``name``, ``device_options``), keyword only.
    """

    def __init__(self, device: str | Device = "auto", capacity: int | str | None = None,
                 **options) -> None:
        super().__init__()
        settings = PoolOptions(**options)
        if isinstance(device, Device):
            self.device, self._owns_device = device, False
        else:
            self.device = open_device(device, **(settings.device_options or {}))
            self._owns_device = True
        self.device_id = int(getattr(self.device, "device_id", 0))
        self._lock = PoolLock()  # guards the three parts below
        self._counters = PoolCounters()
        self._regions = Regions(self.device, settings.name, self._counters,
                                lambda: self._modes.mode)
        self._modes = PoolModes(self._regions, settings)
        if capacity is not None:
            self._regions.limit = self._regions.check_capacity(
                "capacity", parse_bytes(capacity, "capacity"))
        fast = make_fast_paths(self)
        self.malloc = fast.malloc  # the fast equivalent of PlannedPool.malloc
        self.serve_ops = fast.serve_ops

    # -- CuPy's allocator protocol ------------------------------------------------------
    def malloc(self, size) -> MemoryPointer:
        """A ``MemoryPointer`` to at least ``size`` bytes (rounded up to 512), from the
        plan, the fallback region or the persistent region (see the module docstring).

        Raises :class:`AllocationSizeError` for a size that is not an ``int >= 0`` and
        :class:`PoolOutOfMemoryError` when the bytes cannot be found.

        This is the general path. Each pool's ``malloc`` attribute (what
        ``cupy.cuda.set_allocator(pool.malloc)`` installs) is an equivalent function
        made by :func:`~cupool.allocator.fastpath.make_fast_paths`, with the planned case
        inlined.
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

    def _allocate(self, size: int) -> Ticket:
        """Book ``size`` rounded bytes and return the block's ticket."""
        with self._lock:
            return self._modes.allocate(size)

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
            self._regions.drain()
            self._modes.begin_iteration()

    def _end_iteration(self, failed: bool) -> None:
        with self._lock:
            self._regions.drain()
            self._modes.end_iteration(failed)

    def replan(self) -> None:
        """Drop the plan (its arena is released once its blocks are freed) and record the
        next iteration(s) again. Not allowed inside an iteration."""
        with self._lock:
            self._regions.drain()
            self._modes.refuse_inside_iteration("replan")
            self._modes.drop_plan()

    # -- plans ----------------------------------------------------------------------------
    @property
    def plan(self) -> Plan | None:
        """The plan installed last (``None`` before the first one)."""
        arena = self._regions.last_arena
        return arena.plan if arena is not None else None

    @property
    def arena_ptr(self) -> int | None:
        """Device address of the active plan's arena (``None`` without one): slot k of a
        planned iteration is served at ``arena_ptr + offset_k``."""
        arena = self._regions.arena
        return arena.memory.ptr if arena is not None and arena.memory is not None else None

    @property
    def trace(self) -> Trace | None:
        """The trace the last plan was solved for."""
        arena = self._regions.last_arena
        return arena.trace if arena is not None else None

    def save_plan(self, path: str | os.PathLike, trace_path: str | os.PathLike | None = None
                  ) -> tuple[Path, Path]:
        """Write the last plan as plan JSON at ``path`` and its recorded trace (trace v1)
        at ``trace_path`` (default: ``path`` with ``.json`` replaced by ``.trace.json``);
        both paths are returned. :class:`PoolError` when nothing was planned yet."""
        arena = self._regions.last_arena
        if arena is None:
            raise PoolError(f"save_plan({os.fspath(path)!r}): pool {self.name!r} has no plan "
                            f"yet (mode {self.mode!r}); run an iteration() first")
        return write_pool_plan(arena.plan, arena.trace, path, trace_path)

    def load_plan(self, path: str | os.PathLike, trace_path: str | os.PathLike | None = None
                  ) -> Plan:
        """Install a plan written by :meth:`save_plan` (the next iteration runs from it).

        The plan must carry its trace's digest, pass the checks every installed plan
        passes (:mod:`cupool.allocator.plan_files`: static, valid, a pool recording), and,
        if this pool already recorded or planned a trace, belong to that very trace;
        otherwise :class:`~cupool.errors.PlanFormatError` (naming both digests for a plan
        of another trace). Its arena is reserved now (:class:`PoolOutOfMemoryError` if it
        does not fit). Not inside an iteration.
        """
        pool_plan = read_pool_plan(path, trace_path)
        trace = pool_plan.trace
        with self._lock:
            self._regions.drain()
            self._modes.refuse_inside_iteration("load_plan")
            mine = self.trace
            if mine is not None and mine.digest() != trace.digest():
                raise PlanFormatError(
                    f"the plan is for trace digest {trace.digest()!r}, but this pool runs "
                    f"trace {mine.name!r} with digest {mine.digest()!r}: a plan for another "
                    f"trace", path=str(Path(path)))
            self._modes.replace_plan(pool_plan, "loaded plan's arena", reuse_arena=False)
        return pool_plan.plan

    def install_plan(self, plan: Plan, trace: Trace) -> Plan:
        """Install a static ``plan`` for ``trace`` (a pool recording: buffer ``k`` is the
        k-th allocation of an iteration, sizes multiples of 512, as :meth:`save_plan`
        writes) without files; the next iteration runs from it. The swap runtime's
        executor uses it to serve every residency of a swapping plan from the planned
        arena (:mod:`cupool.swap.engine`).

        The plan must pass the checks every installed plan passes
        (:mod:`cupool.allocator.plan_files`). When the active plan's arena has no live
        block and the same size, its reservation is kept for the new plan (its bytes stay
        where they are, so data a caller left there survives a re-plan); otherwise the
        active plan is dropped and the new arena reserved. Not inside an iteration. Raises
        :class:`~cupool.errors.PlanFormatError` for a plan that is not static, invalid or
        not for a pool recording, :class:`PoolOutOfMemoryError` when the arena does not
        fit.
        """
        pool_plan = check_pool_plan(plan, trace, "install_plan")
        with self._lock:
            self._regions.drain()
            self._modes.refuse_inside_iteration("install_plan")
            self._modes.replace_plan(pool_plan, "installed plan's arena", reuse_arena=True)
        return plan

    # -- CuPy's MemoryPool methods ----------------------------------------------------------
    def used_bytes(self) -> int:
        """Bytes handed out and not yet freed (rounded sizes)."""
        with self._lock:
            self._regions.drain()
            return self._counters.allocated_bytes_current

    def total_bytes(self) -> int:
        """Bytes reserved from the device (all regions)."""
        with self._lock:
            self._regions.drain()
            return self._counters.reserved_bytes_current

    def free_bytes(self) -> int:
        """Bytes reserved from the device and not handed out."""
        with self._lock:
            self._regions.drain()
            counters = self._counters
            return counters.reserved_bytes_current - counters.allocated_bytes_current

    def n_free_blocks(self) -> int:
        """Free ranges in the fallback and persistent regions (the planned arena has no
        free list)."""
        with self._lock:
            regions = self._regions
            regions.drain()
            return regions.fallback.stats().free_ranges + regions.persistent.stats().free_ranges

    def free_all_blocks(self, stream=None) -> None:
        """Return every fallback and persistent segment with no live block to the device.
        The active plan's arena stays reserved (:meth:`replan` drops it); ``stream`` is
        accepted for CuPy compatibility and ignored (the pool has one arena per region)."""
        with self._lock:
            self._regions.drain()
            self._regions.release_empty()

    def set_limit(self, size=None, fraction=None) -> None:
        """CuPy's rule: ``size`` bytes, or ``fraction`` of the device's total memory;
        neither (or 0): no limit but the device's. Both: ``ValueError``. A limit above the
        device's total: :class:`CapacityError`. Reservations already made are kept."""
        if size is not None and fraction is not None:
            raise ValueError("size and fraction cannot be specified at one time")
        if fraction is not None:
            if not 0 <= fraction <= 1:
                raise ValueError(f"memory limit fraction out of range: {fraction}")
            size = int(fraction * self._regions.device_total)
        if size is None:
            size = 0
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"memory limit size out of range: {size!r}")
        limit = self._regions.check_capacity("limit", size) if size else 0
        with self._lock:
            self._regions.limit = limit

    def get_limit(self) -> int:
        """The limit in bytes (0: none but the device's)."""
        with self._lock:
            return self._regions.limit

    # -- statistics and state -------------------------------------------------------------
    @property
    def mode(self) -> str:
        """``"record"``, ``"planned"`` or ``"unplanned"`` (:mod:`cupool.allocator.modes`)."""
        return self._modes.mode

    @property
    def name(self) -> str:
        """The name of recorded traces and plans."""
        return self._modes.name

    @property
    def solver(self) -> str:
        """The offset solver's name."""
        return self._modes.solver

    @property
    def solver_params(self):
        """The offset solver's :class:`~cupool.planning.solvers.SolverParams`."""
        return self._modes.solver_params

    @property
    def divergence_limit(self) -> int:
        """Divergent planned iterations in a row before re-recording."""
        return self._modes.divergence_limit

    @property
    def record_iterations(self) -> int:
        """Agreeing recorded iterations needed before planning."""
        return self._modes.recorder.record_iterations

    def memory_stats(self) -> dict[str, int]:
        """The flat statistics dict (key grammar: :mod:`cupool.allocator.stats`)."""
        with self._lock:
            self._regions.drain()
            return self._counters.snapshot(self._regions.live_count(),
                                           running_planned_hits=self._modes.running_planned_hits())

    def reset_peak_stats(self) -> None:
        """Set every ``*.peak`` to its current value."""
        with self._lock:
            self._regions.drain()
            self._counters.reset_peaks()

    def live_blocks(self) -> list[LiveBlock]:
        """Every live block, by address: :class:`~cupool.allocator.arena.LiveBlock` named
        tuples ``(kind, ptr, size, slot)``; ``slot`` is -1 outside plans."""
        with self._lock:
            self._regions.drain()
            return sorted(self._regions.live_blocks(), key=lambda b: b.ptr)

    def report(self) -> str:
        """The readable report an out-of-memory error carries, for the current state."""
        with self._lock:
            self._regions.drain()
            return self._regions.report(0, "nothing (report requested)")

    def close(self) -> None:
        """Release every reservation and close the device if the pool opened it.

        :class:`PoolError` if blocks are still live (their bytes would be released under
        them); free them (drop the arrays) first. Idempotent.
        """
        with self._lock:
            regions = self._regions
            regions.drain()
            if self._modes.in_iteration:
                raise IterationStateError("close() inside an iteration")
            live = regions.live_blocks()
            if live:
                raise PoolError(f"close(): {len(live)} blocks holding "
                                f"{sum(b.size for b in live)} bytes are still live")
            self._modes.drop_plan()
            regions.release_empty()
        if self._owns_device:
            self.device.close()

    def __repr__(self) -> str:
        return (f"<PlannedPool {self.name!r} mode={self.mode} "
                f"reserved={self._counters.reserved_bytes_current} on {self.device!r}>")
