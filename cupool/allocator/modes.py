"""The pool's modes: which region serves each allocation, and when plans come and go.

::

    record ──(record_iterations agreeing recordings: solve, reserve the arena)──► planned
      ▲  └──(the arena cannot be reserved)──► unplanned ──(replan())──► record
      └──(divergence_limit divergent iterations in a row, or replan())── planned

- ``"record"``: allocations inside ``iteration()`` are served by the fallback region and
  logged (:class:`~cupool.allocator.recording.Recorder`). After ``record_iterations``
  iterations in a row that agree (same rounded sizes in the same order), the recordings
  are merged into a trace, solved with ``cupool.planning.plan(trace, solver)``, the
  fallback segments that are now empty released, the planned arena reserved, and the
  mode is ``"planned"``.
- ``"planned"``: allocation k of the iteration is served at its planned offset in O(1)
  when its rounded size is the plan's and its bytes are free
  (:meth:`~cupool.allocator.arena.PlannedArena.serve`). Otherwise it is served by the
  fallback region and counted: a *divergent* allocation (wrong size, or more allocations
  than planned) or a *collision* (a block that outlived its planned lifetime, e.g. a
  loss kept until the next step, still holds those bytes). A planned iteration with a
  divergent allocation, or with fewer allocations than the plan, is *divergent*; after
  ``divergence_limit`` divergent iterations in a row the plan is retired (its arena is
  released when its last block is freed) and the pool records again.
- ``"unplanned"``: a plan could not be installed (its arena does not fit the limit or the
  device); iterations are served by the fallback region without recording, until
  ``replan()``.

Outside iterations every allocation goes to the persistent region, whatever the mode.
:class:`PoolModes` is the state behind this; the pool's lock guards all of it.
"""

from __future__ import annotations

import logging

from cupool.allocator.arena import PlannedArena
from cupool.allocator.errors import IterationStateError, PoolOutOfMemoryError
from cupool.allocator.options import PoolOptions
from cupool.allocator.plan_files import PoolPlan
from cupool.allocator.recording import Recorder, to_trace
from cupool.allocator.regions import Regions
from cupool.allocator.tickets import Ticket
from cupool.core.vocabulary import Plan, SolveStatus, Trace

__all__ = ["MODES", "PLANNED", "RECORD", "UNPLANNED", "PoolModes"]

RECORD, PLANNED, UNPLANNED = "record", "planned", "unplanned"
MODES = (RECORD, PLANNED, UNPLANNED)

_log = logging.getLogger("cupool.allocator")


class ActiveArena:
    """Holds the planned arena of the running iteration (``arena``; None outside planned
    iterations). A separate ``__slots__`` object because the pool's fast ``malloc`` reads
    it on every allocation: attribute reads on the pool itself (a subclass of CuPy's
    compiled ``MemoryPool``) are not specialised by CPython 3.11's interpreter and cost
    several times more."""

    __slots__ = ("arena",)

    def __init__(self) -> None:
        self.arena: PlannedArena | None = None


class PoolModes:
    """The pool's mode, its iterations and its plans (module docstring).

    ``regions`` hands out and takes back the bytes; ``options`` are the pool's settings.
    Every method expects the caller to hold the pool's lock and, except :meth:`allocate`,
    to have drained the queued frees (:meth:`Regions.drain
    <cupool.allocator.regions.Regions.drain>`).
    """

    def __init__(self, regions: Regions, options: PoolOptions) -> None:
        self.regions = regions
        self.counters = regions.counters
        self.name = options.name
        self.solver = options.solver
        self.solver_params = options.resolved_solver_params()
        self.divergence_limit = options.divergence_limit
        self.recorder = Recorder(options.record_iterations)
        self.mode = RECORD
        self.in_iteration = False
        self.cursor = 0  # allocations made in the current record/unplanned iteration
        self.divergent_streak = 0
        self.active = ActiveArena()  # .arena: the active plan's arena while an iteration runs

    # -- allocations ----------------------------------------------------------------------
    def allocate(self, size: int) -> Ticket:
        """Book ``size`` rounded bytes and return the block's ticket: drain the queued
        frees, then serve from the plan, the fallback region or the persistent region."""
        regions = self.regions
        regions.drain()
        arena = self.active.arena
        if arena is None:
            if not self.in_iteration:
                return regions.persistent_ticket(size)
            if self.mode == RECORD:
                log = self.recorder.log
                ticket = regions.fallback_ticket(size, log)
                log.add(size)
                self.counters.recorded_allocations += 1
            else:
                ticket = regions.fallback_ticket(size)
            self.cursor += 1
            return ticket
        ticket = arena.serve(size)
        if ticket is None:
            return self.allocate_off_plan(arena, arena.cursor - 1, size)
        self.counters.add("allocated_bytes", size)
        return ticket

    def allocate_off_plan(self, arena: PlannedArena, k: int, size: int) -> Ticket:
        """Slot k of a planned iteration cannot be served from the plan (the cursor is
        past it): count why, serve from the fallback region."""
        counters = self.counters
        if k < arena.n and arena.sizes[k] == size:
            counters.collisions += 1
        else:
            counters.divergent_allocations += 1
            arena.diverged = True
        counters.fallback_allocations += 1
        arena.off_plan += 1
        return self.regions.fallback_ticket(size)

    def running_planned_hits(self) -> int:
        """Allocations of the running iteration served from the plan so far."""
        active = self.active.arena
        return active.cursor - active.off_plan if active is not None else 0

    # -- iterations -----------------------------------------------------------------------
    def begin_iteration(self) -> None:
        if self.in_iteration:
            active = self.active.arena
            made = active.cursor if active is not None else self.cursor
            raise IterationStateError(
                f"iteration() nested: an iteration is already running ({made} "
                f"allocations so far, mode {self.mode!r}); iterations do not nest")
        self.in_iteration = True
        self.cursor = 0
        self.recorder.begin()
        arena = self.regions.arena
        if arena is not None:
            arena.begin_iteration()
            self.active.arena = arena

    def end_iteration(self, failed: bool) -> None:
        """The running iteration ended (``failed``: its body raised; it is then neither
        recorded nor counted as divergent)."""
        self.in_iteration = False
        self.active.arena = None
        if self.mode == RECORD:
            if not failed:
                self._finish_recording()
        elif self.mode == PLANNED:
            self._finish_planned(failed)

    def refuse_inside_iteration(self, method: str) -> None:
        """:class:`IterationStateError` when ``method`` is called inside an iteration."""
        if self.in_iteration:
            raise IterationStateError(f"{method}() inside an iteration; call it between "
                                      f"iterations")

    def _finish_recording(self) -> None:
        self.counters.recorded_iterations += 1
        merged = self.recorder.finish()
        if merged is not None:
            trace = to_trace(merged, self.name)
            self.install(PoolPlan(self._solve(trace), trace, merged))

    def _finish_planned(self, failed: bool) -> None:
        arena = self.regions.arena
        arena.end_iteration()
        counters = self.counters
        counters.planned_iterations += 1
        made = arena.cursor
        counters.planned_hits += made - arena.off_plan
        arena.cursor = arena.off_plan = 0
        if failed:
            return
        if arena.diverged or made != arena.n:
            counters.divergent_iterations += 1
            self.divergent_streak += 1
            if self.divergent_streak >= self.divergence_limit:
                self.drop_plan()
                counters.replans += 1
        else:
            self.divergent_streak = 0

    def _solve(self, trace: Trace) -> Plan:
        if not trace.buffers:
            return Plan(trace.name, trace.digest(), self.solver, SolveStatus.OPTIMAL, 0, 0, ())
        from cupool.planning import plan

        return plan(trace, self.solver, None, self.solver_params)

    # -- plans ----------------------------------------------------------------------------
    def install(self, pool_plan: PoolPlan) -> bool:
        """Reserve the plan's arena and switch to planned mode. False, with the mode
        ``"unplanned"``, when the arena cannot be reserved (logged, not raised)."""
        try:
            self.regions.install_arena(pool_plan)
        except PoolOutOfMemoryError as exc:
            self.counters.oom_errors -= 1  # not raised to the caller
            self.counters.plan_failures += 1
            self.mode = UNPLANNED
            _log.warning("PlannedPool %r: plan of %d bytes not installed; serving "
                         "iterations from the fallback region: %s", self.name,
                         pool_plan.plan.arena_bytes, exc)
            return False
        self._planned()
        return True

    def replace_plan(self, pool_plan: PoolPlan, what: str, reuse_arena: bool) -> None:
        """Run ``pool_plan`` from the next iteration on, instead of the active plan.

        With ``reuse_arena``, an active arena of the same size with no live block keeps
        its reservation for the new plan (:meth:`Regions.reuse_arena
        <cupool.allocator.regions.Regions.reuse_arena>`). Otherwise the active plan is
        dropped and the new arena reserved: :class:`PoolOutOfMemoryError` for ``what``
        (``"loaded plan's arena"``...) when it does not fit, the mode then
        ``"unplanned"``.
        """
        if reuse_arena and self.regions.reuse_arena(pool_plan):
            self._planned()
            return
        self.drop_plan()
        if not self.install(pool_plan):
            arena_bytes = pool_plan.plan.arena_bytes
            raise self.regions.out_of_memory(arena_bytes, what)

    def _planned(self) -> None:
        """A plan was installed: count it and serve the next iteration from it."""
        self.counters.plans += 1
        self.mode = PLANNED
        self.divergent_streak = 0
        self.recorder.drop_recordings()

    def drop_plan(self) -> None:
        """Retire the active plan (if any) and go back to recording."""
        self.mode = RECORD
        self.recorder.drop_recordings()
        self.divergent_streak = 0
        self.regions.retire_arena()
