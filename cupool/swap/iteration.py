"""The named state of one iteration of the swap engine, and what it reports.

- :class:`IterationState`: everything an iteration keeps between op boundaries (the
  engine's ``begin_iteration`` makes it, ``end_iteration`` retires it);
- :class:`RunningOp`: the op between ``before_op(i)`` and ``after_op(i)``;
- :class:`OpFrame`: what ``before_op(i)`` hands the op body (which buffers, where);
- :class:`IterationResult`: what ``end_iteration`` returns.

Times: ``*_s`` fields are wall seconds (``time.perf_counter``); ``*_us`` fields are
*trace* µs (wall time divided by the engine's ``time_scale``), comparable with the
simulator.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from cupool.devices.emulated import StreamGate

LATE_THRESHOLD_WALL_US = 400.0
"""A wait shorter than this much *wall* time is the emulation's timer noise (sleep and
thread wake-up jitter), not a late prefetch or a stall."""


class PendingCopy(NamedTuple):
    """A swap-out issued this iteration: it reads device bytes ``[low, high)`` until its
    event ``copied`` completes, so whatever lands there next waits for that event."""

    low: int
    high: int
    copied: object


class CopySplit(NamedTuple):
    """Pending copies split by :func:`split_overlapping`: ``overlapping`` some range,
    and the ``rest``."""

    overlapping: list
    rest: list


def split_overlapping(copies: list, ranges) -> CopySplit:
    """The ``copies`` (:class:`PendingCopy`) reading bytes of any ``(low, high)`` of
    ``ranges``, and the others, each in their order."""
    overlapping, rest = [], []
    for copy in copies:
        hit = any(copy.low < high and low < copy.high for low, high in ranges)
        (overlapping if hit else rest).append(copy)
    return CopySplit(overlapping, rest)


NO_FILLS = frozenset()
"""The ``first_fills`` of an op that fills no persistent buffer (one object for all)."""


class RunningOp:
    """Op ``op`` between ``before_op`` and ``after_op``: ``first_fills`` are the persistent
    buffers the op gives their first contents (marked as holding them once the op is
    enqueued); ``entered`` says its uses were all taken (on the host, in program order:
    a recompute runs only then). A slotted class: one is made per op."""

    __slots__ = ("entered", "first_fills", "op")

    def __init__(self, op: int, first_fills: frozenset) -> None:
        self.op, self.first_fills, self.entered = op, first_fills, False


class MeasuredWait(NamedTuple):
    """A wait the compute stream was given before op ``op``: ``wait`` (its
    :class:`~cupool.swap.checks.TimedWait`), and ``late_buffer``, the buffer whose
    swap-in is due at the op (``None``: a copy still reading bytes the op writes)."""

    op: int
    wait: object
    late_buffer: int | None


@dataclass(eq=False)
class IterationState:
    """What one iteration keeps between op boundaries.

    Written by the caller's thread while it enqueues (``begin_iteration`` to
    ``end_iteration``): ``next_op`` (the op ``before_op`` expects), ``running``,
    ``blocks`` (``(buffer, start)`` → the pool block serving that residency, dropped when
    it ends), ``ptrs`` (``(buffer, start)`` → its device address this iteration),
    ``pending`` (the swap-outs issued so far that the compute stream has not waited for:
    once it has, later work on it is ordered after the copy), ``h2d_pending`` (likewise
    for the H2D stream), ``landed_at`` (``(buffer, trigger op)`` →
    the event recorded after that swap-in landed), ``last_out`` (buffer → the event of its
    latest swap-out), ``last_in`` (buffer → the event of its latest swap-in),
    ``host_slots`` (buffer → the staging slot holding its host copy: taken at its first
    swap-out, kept until the iteration ends, the slot of its later swap-outs too),
    ``pool_iteration`` (holds the pool's ``iteration()`` open), ``exact`` (every block
    so far was served at its planned address: the op frames made for those addresses
    serve again).

    Written by work launched on the emulated compute stream: ``clock`` (the emulated op
    clock, s), ``setup_s`` (setup work excluded from the iteration's time: the persistent
    buffers' first fill), ``error`` (the first error the op work caught). Filled after the
    final synchronize from the timing events: ``stall_us`` (every measured wait over the
    noise threshold), ``late_us`` (buffer → how long its due op waited for its swap-in: a
    *late prefetch*), ``op_wall_s`` (in iterations that time their ops, each op's time
    on the compute stream, from the previous op's end mark, or the iteration's start, to
    its own, the waits and the recomputes in between left out, so that the engine's own
    work between ops is some op's time, as it is part of the iteration; empty otherwise).

    Written by the caller's thread, read after the final synchronize: ``waits`` (every
    :class:`MeasuredWait` enqueued), ``unclocked`` (the emulated op clock: waits enqueued
    since the last op duration was spent), ``recomputes`` (op → the two timing events
    around the recomputes before it, in iterations that time their ops).

    ``started`` is when the iteration's timing began (the gate's release on the emulated
    device, the start of enqueuing on a GPU); ``gate`` holds the emulated streams until
    everything is enqueued (``None`` on a GPU); ``done[i]`` is the event recorded on the
    compute stream after op ``i`` when a swap waits for it (``None`` for the other ops);
    ``time_scale`` turns wall time into trace time.

    Nothing of it is touched by Python on a stream's timeline but the emulated op clock
    and the op work's first error (launched work, the emulated device's kernels)."""

    iteration: int
    done: list
    gate: StreamGate | None
    off_plan_before: int
    time_scale: float = 1.0
    pool_iteration: ExitStack = field(default_factory=ExitStack)
    arena_ptr: int = 0
    exact: bool = True
    next_op: int = 0
    running: RunningOp | None = None
    blocks: dict = field(default_factory=dict)
    ptrs: dict = field(default_factory=dict)
    pending: list = field(default_factory=list)
    h2d_pending: list = field(default_factory=list)
    landed_at: dict = field(default_factory=dict)
    last_out: dict = field(default_factory=dict)
    host_slots: dict = field(default_factory=dict)
    last_in: dict = field(default_factory=dict)
    started: float = 0.0
    enqueue_began: float = 0.0
    clock: float = 0.0
    setup_s: float = 0.0
    stall_us: float = 0.0
    late_us: dict = field(default_factory=dict)
    op_wall_s: list = field(default_factory=list)
    error: BaseException | None = None
    waits: list = field(default_factory=list)
    unclocked: list = field(default_factory=list)
    recomputes: dict = field(default_factory=dict)

    def measured_wait(self, late_buffer: int | None, seconds: float) -> None:
        """A timed wait as measured (wall seconds): over the noise threshold it is a
        stall, and, for a swap-in's due op (``late_buffer``), a late prefetch of that
        buffer."""
        ts = self.time_scale
        wait_us = seconds * 1e6 / ts
        if wait_us * ts > LATE_THRESHOLD_WALL_US:
            self.stall_us += wait_us
            if late_buffer is not None:
                self.late_us[late_buffer] = self.late_us.get(late_buffer, 0) + wait_us

    def release_host_slots(self, staging) -> None:
        """Return the staging slots of host copies still held (swapped out and never
        swapped back, or kept for a later drop) at the iteration's end."""
        for slot in self.host_slots.values():
            staging.release(slot)
        self.host_slots.clear()

    def advance_clock(self, seconds: float, waits=()) -> None:
        """Emulated op clock, launched on the compute stream: the clock moves to the end of
        each of ``waits`` (the :class:`~cupool.swap.checks.TimedWait` enqueued since the
        last op, complete by now), then the op ends ``seconds`` after it; sleep until then."""
        for wait in waits:
            self.clock = max(self.clock, wait.ended.recorded_at)
        self.clock += seconds
        remaining = self.clock - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)

    def keep_first_error(self, exc: BaseException) -> None:
        """Keep the iteration's first error (raised once the streams finished)."""
        if self.error is None:
            self.error = exc


def order_problem(state: IterationState | None, method: str, op: int, num_ops: int) -> str:
    """Why ``method(op)`` is out of order for the running iteration ``state`` (``None``:
    between iterations) of a trace of ``num_ops`` ops."""
    if state is None:
        return f"{method}({op}): no iteration is running (call begin_iteration first)"
    if state.running is not None:
        return (f"{method}({op}): op {state.running.op} is still running (call "
                f"after_op({state.running.op}) first)")
    return (f"{method}({op}): iteration {state.iteration} expects "
            f"{'before_op' if state.next_op < num_ops else 'end_iteration'}"
            f"({state.next_op}) next")


class OpFrame(NamedTuple):  # a named tuple, not a frozen dataclass: made once per op
    """What op ``op`` touches, as ``before_op`` hands it to the op body.

    ``produced``: buffers whose new residency the op writes first — its outputs, and the
    persistent buffers in ``first_fills``, served for the first time (their initial
    contents, like weights uploaded before training); ``recomputed``: buffers the plan
    regenerated just before the op (already enqueued); ``uses``: the buffers the trace
    says the op uses; ``ptrs``: the device address of every one of them this iteration.
    The engine has taken the op's uses (write for produced and recomputed buffers, read
    for the rest) on its books before it hands the frame over: every handle is
    resident, in program order, for the work the body enqueues."""

    op: int
    produced: tuple
    first_fills: frozenset
    recomputed: tuple
    uses: tuple
    ptrs: dict


@dataclass(frozen=True)
class IterationResult:
    """One iteration as measured.

    ``iteration``: its number; ``wall_us``: wall time from the timing start to the end
    of the final synchronize, setup excluded (µs of wall time); ``iteration_us``: the same
    in trace µs; ``late_us``: buffer → trace µs its due op(s) waited for its swap-in (only
    waits over the timer-noise threshold: the *late prefetches*); ``stall_us``: every wait
    of the compute stream over that threshold (late prefetches and copies still reading
    bytes an op was about to write); ``op_us``: each op's observed trace µs
    (:class:`IterationState` ``op_wall_s``: the waits and the recomputes before it
    excluded, which the simulator counts apart); ``bytes_checked``
    and ``corrupt_bytes``: bytes compared with their pattern and those that differed;
    ``off_plan``: residencies the pool served away from their planned offset; ``host_us``:
    wall µs the host spent enqueuing the iteration (``begin_iteration`` to the
    ``end_iteration`` call)."""

    iteration: int
    wall_us: float
    iteration_us: float
    late_us: dict
    stall_us: float
    op_us: tuple
    bytes_checked: int
    corrupt_bytes: int
    off_plan: int
    host_us: float = 0.0

    @property
    def late_prefetches(self) -> int:
        """How many swap-ins were late (buffers in ``late_us``)."""
        return len(self.late_us)

    def as_dict(self) -> dict:
        """The flat dict of earlier reports: ``wall_us``, ``iteration_us``, ``late``
        (``late_us``), ``stall_us``, ``op_us`` (a list), ``bytes_checked``,
        ``corrupt_bytes``, ``off_plan``."""
        return {"wall_us": self.wall_us, "iteration_us": self.iteration_us,
                "late": dict(self.late_us), "stall_us": self.stall_us,
                "op_us": list(self.op_us), "bytes_checked": self.bytes_checked,
                "corrupt_bytes": self.corrupt_bytes, "off_plan": self.off_plan}
