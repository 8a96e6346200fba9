"""Several models, one pool of blocks, counted from each model's data flow.

Each model's trace says which buffers live when. Its *persistent* buffers (weights,
running statistics) live across iterations; its *temporary* buffers are born and die
inside one iteration. From the data flow this module computes, per model:

- **blocks needed at the same time**: every temporary buffer is rounded up to a size
  class of a block ladder (:func:`block_bytes`: the alignment below
  ``alignment * steps_per_octave``, then ``steps_per_octave`` classes per power of two,
  so at most ``1 / steps_per_octave`` of a block is wasted); per class, the largest
  number of its buffers live at one op is the number of blocks (*slots*) of that class
  the model needs. The byte peak of the temporaries is the other bound;
- **allocation and release rules**: a static mapping ``buffer -> (class, slot)``, reused
  every iteration. A buffer *takes* the lowest free slot of its class just before its
  ``start`` op and *returns* it right after op ``end - 1`` (frees before allocations at
  one op), so no class ever needs more slots than its maximum live count::

      op:            0   1   2   3   4   5
      class 4 KiB:   b1 [=======)               slot 0
                     b2     [===========)       slot 1 (slot 0 is taken at op 1)
                     b3             [=======)   slot 0 again (b1 returned it after op 1)
      max live count 2 -> 2 blocks of 4 KiB

- **the temporary region**: the slots are placed in one region. Two layouts are
  computed and the smaller one is used: ``slots`` (each slot a range of its class size,
  placed over the span of ops it is ever taken, by a static offset solver; slots whose
  spans do not overlap share bytes) and ``offsets`` (every temporary buffer its own
  fixed range, placed by the static solver at the byte peak of the temporaries: the
  rules are then "buffer ``b`` always takes range ``[offset_b, offset_b + size_b)``").

Several models share one arena::

    0                                      P                       P + T
    | persistent A | gap | persistent B |  | temporary region (max over models) |

One persistent region per model, side by side (``gap_bytes`` between them, aligned);
one temporary region, used in turn by models that never run concurrently
(``concurrent=False``, the default), so it only needs the largest model's temporary
bytes. With ``concurrent=True`` each model gets its own temporary region after the
persistent ones. Each model's plan is a static plan of its own trace whose offsets lie
in the shared arena: the independent validator accepts it on its own, and
:func:`check_pool` checks the cross-model rule (no byte of a model's persistent region
is used by another model; with ``concurrent=True`` no byte is shared at all).

Target: with ``concurrent=False`` the arena is at most ``max(peak) + sum(persistent)``
(``peak`` = a model's lower bound, persistent bytes included), against ``sum(peak)``
for separate arenas.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field

from cupool.check import ValidationReport, validate_plan
from cupool.core.liveness import peak_live_bytes
from cupool.core.vocabulary import PERSISTENT, Placement, Plan, SolveStatus, Trace
from cupool.errors import SolverError
from cupool.planning.problem import StaticProblem
from cupool.planning.solvers import SolverParams
from cupool.planning.static import solve

SLOTS = "slots"
OFFSETS = "offsets"


@dataclass(frozen=True)
class BlockParams:
    """Knobs of the block planner.

    alignment: every block size and region offset is a multiple of it (bytes, >= 1;
      512 is CuPy's allocation unit).
    steps_per_octave: size classes per power of two above ``alignment * steps_per_octave``
      (>= 1); more classes waste less per block but share blocks less.
    gap_bytes: bytes left free between two models' persistent regions (>= 0).
    concurrent: ``True`` when the models may run at the same time: then each gets its own
      temporary region too.
    offset_solvers: static solvers (:mod:`cupool.planning.solvers`) that place slots and
      buffers; the smallest placement wins.
    """

    alignment: int = 512
    steps_per_octave: int = 4
    gap_bytes: int = 0
    concurrent: bool = False
    offset_solvers: tuple[str, ...] = ("greedy-size", "best-fit")

    def __post_init__(self) -> None:
        for name, minimum in (("alignment", 1), ("steps_per_octave", 1), ("gap_bytes", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise SolverError(f"{name} (={value!r}) must be an integer >= {minimum}")
        if not self.offset_solvers:
            raise SolverError("offset_solvers (=()) must name at least one static solver")


def _align(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


def block_bytes(size: int, alignment: int = 512, steps_per_octave: int = 4) -> int:
    """The block (size class) a buffer of ``size`` bytes takes: ``size`` rounded up to the
    alignment, and above ``alignment * steps_per_octave`` to one of ``steps_per_octave``
    evenly spaced sizes per power of two (``4, 5, 6, 7 x 2**k`` for 4 steps)::

        block_bytes(1000) == 1024;  block_bytes(5000) == 5120;  block_bytes(9000) == 10240
    """
    aligned = _align(size, alignment)
    if aligned <= alignment * steps_per_octave:
        return aligned
    power = 1 << (aligned.bit_length() - 1)
    step = max(alignment, power // steps_per_octave)
    return _align(aligned, step)


@dataclass(frozen=True)
class SizeClass:
    """``blocks`` blocks of ``block_bytes`` each: the most of the class's ``buffers``
    temporary buffers live at one op."""

    block_bytes: int
    blocks: int
    buffers: int


@dataclass(frozen=True)
class ModelBlocks:
    """One model's block analysis and its temporary layout (region-relative offsets).

    ``slot_of[buffer_id] = (block_bytes, slot)``: the allocation rule (take at ``start``,
    return after ``end - 1``). ``temporary_offsets[buffer_id]`` is the buffer's offset
    inside the temporary region of the chosen ``layout``; ``persistent_offsets`` inside
    the model's persistent region. Sizes in bytes.
    """

    trace_name: str
    peak_bytes: int
    persistent_bytes: int
    persistent_region_bytes: int
    temporary_peak_bytes: int
    classes: tuple[SizeClass, ...]
    slot_of: dict[int, tuple[int, int]]
    slot_bytes: int
    slot_layout_bytes: int
    offsets_layout_bytes: int
    layout: str
    temporary_bytes: int
    temporary_offsets: dict[int, int] = field(repr=False)
    persistent_offsets: dict[int, int] = field(repr=False)

    def summary(self) -> dict:
        """Plain numbers for JSON (sizes in bytes)."""
        return {"trace": self.trace_name, "peak_bytes": self.peak_bytes,
                "persistent_bytes": self.persistent_bytes,
                "persistent_region_bytes": self.persistent_region_bytes,
                "temporary_peak_bytes": self.temporary_peak_bytes,
                "blocks": sum(c.blocks for c in self.classes),
                "size_classes": len(self.classes),
                "slot_bytes": self.slot_bytes,
                "slot_layout_bytes": self.slot_layout_bytes,
                "offsets_layout_bytes": self.offsets_layout_bytes,
                "layout": self.layout, "temporary_bytes": self.temporary_bytes}


def assign_slots(buffers, alignment: int = 512, steps_per_octave: int = 4):
    """The allocation rule for temporary ``buffers``: ``(slot_of, classes)``.

    Sweep the ops; at each op first return the slots of buffers whose ``end`` is that op,
    then give each buffer starting there the lowest free slot of its class. For one class
    this is interval-graph colouring: the slots used equal the maximum live count.
    """
    events = []
    for b in buffers:
        block = block_bytes(b.size, alignment, steps_per_octave)
        events.append((b.end, 0, b.id, block))
        events.append((b.start, 1, b.id, block))
    events.sort()
    free: dict[int, list[int]] = {}
    used: dict[int, int] = {}
    counts: dict[int, int] = {}
    slot_of: dict[int, tuple[int, int]] = {}
    for _op, is_start, buffer_id, block in events:
        if not is_start:
            heapq.heappush(free.setdefault(block, []), slot_of[buffer_id][1])
            continue
        counts[block] = counts.get(block, 0) + 1
        if free.get(block):
            slot = heapq.heappop(free[block])
        else:
            slot = used.get(block, 0)
            used[block] = slot + 1
        slot_of[buffer_id] = (block, slot)
    classes = tuple(SizeClass(block, used[block], counts[block]) for block in sorted(used))
    return slot_of, classes


def _place(spans, num_ops: int, solvers, name: str):
    """Offsets for ``spans = [(start, end, size)]`` by the smallest of ``solvers``:
    ``(offsets, arena_bytes)``."""
    if not spans:
        return [], 0
    problem = StaticProblem.from_arrays([s for s, _e, _z in spans], [e for _s, e, _z in spans],
                                        [z for _s, _e, z in spans], num_ops=num_ops, name=name)
    best = None
    for solver in solvers:
        result = solve(problem, solver, SolverParams(time_limit_s=2.0))
        if result.offsets is not None and (best is None or result.arena_bytes < best[1]):
            best = ([int(o) for o in result.offsets], int(result.arena_bytes))
    if best is None:
        raise SolverError(f"no offset solver of {solvers} placed {len(spans)} ranges")
    return best


def model_blocks(trace: Trace, params: BlockParams | None = None) -> ModelBlocks:
    """Block analysis and temporary layout of one model (see the module docstring)."""
    params = params or BlockParams()
    align = params.alignment
    persistent = [b for b in trace.buffers if b.kind == PERSISTENT]
    temporary = [b for b in trace.buffers if b.kind != PERSISTENT]
    persistent_offsets, cursor = {}, 0
    for b in persistent:
        persistent_offsets[b.id] = cursor
        cursor += _align(b.size, align)
    slot_of, classes = assign_slots(temporary, align, params.steps_per_octave)
    slot_bytes = sum(c.block_bytes * c.blocks for c in classes)
    # slots layout: each slot a range over the span of ops it is ever taken
    span: dict[tuple[int, int], list[int]] = {}
    for b in temporary:
        lo_hi = span.setdefault(slot_of[b.id], [b.start, b.end])
        lo_hi[0], lo_hi[1] = min(lo_hi[0], b.start), max(lo_hi[1], b.end)
    keys = sorted(span)
    slot_offsets, placed = _place([(span[k][0], span[k][1], k[0]) for k in keys], trace.num_ops,
                                  params.offset_solvers, trace.name)
    by_slot = dict(zip(keys, slot_offsets, strict=True))
    slot_layout = {b.id: by_slot[slot_of[b.id]] for b in temporary}
    slot_layout_bytes = min(slot_bytes, placed)
    if placed > slot_bytes:  # contiguous slots are smaller: class after class
        base, cursor_slot = {}, 0
        for c in classes:
            base[c.block_bytes] = cursor_slot
            cursor_slot += c.block_bytes * c.blocks
        slot_layout = {b.id: base[slot_of[b.id][0]] + slot_of[b.id][1] * slot_of[b.id][0]
                       for b in temporary}
    # offsets layout: each buffer its own fixed range (aligned sizes)
    buffer_offsets, offsets_bytes = _place(
        [(b.start, b.end, _align(b.size, align)) for b in temporary], trace.num_ops,
        params.offset_solvers, trace.name)
    if offsets_bytes < slot_layout_bytes:
        layout, temporary_bytes = OFFSETS, offsets_bytes
        temporary_offsets = {b.id: o for b, o in zip(temporary, buffer_offsets, strict=True)}
    else:
        layout, temporary_bytes, temporary_offsets = SLOTS, slot_layout_bytes, slot_layout
    temporary_peak = peak_live_bytes([b.start for b in temporary], [b.end for b in temporary],
                                     [b.size for b in temporary], trace.num_ops)
    return ModelBlocks(
        trace.name, trace.lower_bound_bytes(), sum(b.size for b in persistent), cursor,
        temporary_peak, classes, slot_of, slot_bytes, slot_layout_bytes, offsets_bytes, layout,
        temporary_bytes, temporary_offsets, persistent_offsets)


@dataclass(frozen=True)
class SharedPool:
    """Several models in one arena of ``arena_bytes``.

    ``plans[i]`` is model ``i``'s static plan (offsets in the shared arena);
    ``persistent_regions[i]`` and ``temporary_regions[i]`` are its ``(offset, bytes)``
    regions (one shared temporary region unless ``concurrent``). ``sum_peak_bytes`` is what
    separate arenas at each model's lower bound need; ``target_bytes`` is
    ``max(peak) + sum(persistent)``.
    """

    plans: tuple[Plan, ...]
    models: tuple[ModelBlocks, ...]
    persistent_regions: tuple[tuple[int, int], ...]
    temporary_regions: tuple[tuple[int, int], ...]
    arena_bytes: int
    concurrent: bool
    solve_seconds: float

    @property
    def sum_peak_bytes(self) -> int:
        return sum(m.peak_bytes for m in self.models)

    @property
    def floor_bytes(self) -> int:
        """``sum(persistent) + max(temporary peak)``: no layout that keeps persistent
        regions apart and shares temporaries between non-concurrent models does better."""
        if not self.models:
            return 0
        return (sum(m.persistent_bytes for m in self.models)
                + max(m.temporary_peak_bytes for m in self.models))

    @property
    def target_bytes(self) -> int:
        if not self.models:
            return 0
        return max(m.peak_bytes for m in self.models) + sum(m.persistent_bytes
                                                            for m in self.models)

    def summary(self) -> dict:
        """Combined and per-model numbers (bytes) for JSON."""
        return {"models": len(self.models), "concurrent": self.concurrent,
                "arena_bytes": self.arena_bytes, "sum_peak_bytes": self.sum_peak_bytes,
                "target_bytes": self.target_bytes, "floor_bytes": self.floor_bytes,
                "ratio_to_sum_of_peaks": (round(self.arena_bytes / self.sum_peak_bytes, 6)
                                          if self.sum_peak_bytes else 1.0),
                "within_target": self.arena_bytes <= self.target_bytes,
                "solve_seconds": round(self.solve_seconds, 4),
                "per_model": [{**m.summary(), "persistent_region": list(p),
                               "temporary_region": list(t)}
                              for m, p, t in zip(self.models, self.persistent_regions,
                                                 self.temporary_regions, strict=True)]}


def plan_shared(traces, params: BlockParams | None = None) -> SharedPool:
    """Lay out ``traces`` (one per model; a model may appear twice: two replicas) in one
    shared arena of blocks; see the module docstring."""
    params = params or BlockParams()
    traces = tuple(traces)
    if not traces:
        raise SolverError("plan_shared needs at least one trace (got 0)")
    started = time.perf_counter()
    models = tuple(model_blocks(t, params) for t in traces)
    align = params.alignment
    persistent_regions, cursor = [], 0
    for i, m in enumerate(models):
        if i:
            cursor = _align(cursor + params.gap_bytes, align)
        persistent_regions.append((cursor, m.persistent_region_bytes))
        cursor += m.persistent_region_bytes
    cursor = _align(cursor, align)
    if params.concurrent:
        temporary_regions = []
        for m in models:
            temporary_regions.append((cursor, m.temporary_bytes))
            cursor = _align(cursor + m.temporary_bytes, align)
    else:
        shared = max(m.temporary_bytes for m in models)
        temporary_regions = [(cursor, shared)] * len(models)
        cursor += shared
    arena = max([cursor] + [b + s for b, s in persistent_regions])
    seconds = time.perf_counter() - started
    plans = []
    for trace, m, (p_base, _p), (t_base, _t) in zip(traces, models, persistent_regions,
                                                     temporary_regions, strict=True):
        placements = tuple(
            Placement(b.id, p_base + m.persistent_offsets[b.id] if b.kind == PERSISTENT
                      else t_base + m.temporary_offsets[b.id]) for b in trace.buffers)
        stats = {**m.summary(), "persistent_region": [p_base, m.persistent_region_bytes],
                 "temporary_region": [t_base, m.temporary_bytes], "pool_models": len(traces)}
        plans.append(Plan(trace.name, trace.digest(), "blocks", SolveStatus.FEASIBLE, arena,
                          trace.lower_bound_bytes(), placements, seconds, None, stats))
    return SharedPool(tuple(plans), models, tuple(persistent_regions), tuple(temporary_regions),
                      arena, params.concurrent, seconds)


def check_pool(traces, pool: SharedPool) -> ValidationReport:
    """Check a shared pool naively: each model's plan with the independent validator on its
    own trace, then across models that no byte one model holds for its persistent buffers
    is used by another model at all (with ``concurrent``: that no byte is shared by two
    models). ``buffers`` of a failure lists ``(model index, buffer id)`` pairs."""
    traces = tuple(traces)
    if len(traces) != len(pool.plans):
        return ValidationReport(False, "models", f"{len(pool.plans)} plans for "
                                                 f"{len(traces)} traces")
    ranges = []  # (low, high, model, buffer id, exclusive)
    for index, (trace, plan) in enumerate(zip(traces, pool.plans, strict=True)):
        report = validate_plan(trace, plan)
        if not report.valid:
            return ValidationReport(False, report.rule, f"model {index} ({trace.name}): "
                                                        f"{report.message}", report.buffers)
        if plan.arena_bytes > pool.arena_bytes:
            return ValidationReport(False, "arena", f"model {index}: arena_bytes "
                                    f"(={plan.arena_bytes}) beyond the pool's {pool.arena_bytes}")
        offsets = plan.offsets()
        for b in trace.buffers:
            exclusive = pool.concurrent or b.kind == PERSISTENT
            ranges.append((offsets[b.id], offsets[b.id] + b.size, index, b.id, exclusive))
    ranges.sort()
    # by address: a range may not overlap another model's range when either is exclusive
    for k, (low, high, model, buffer_id, exclusive) in enumerate(ranges):
        for j in range(k + 1, len(ranges)):
            other = ranges[j]
            if other[0] >= high:
                break
            if other[2] != model and (exclusive or other[4]):
                return ValidationReport(
                    False, "shared",
                    f"model {model} buffer {buffer_id} at [{low}, {high}) and model {other[2]} "
                    f"buffer {other[3]} at [{other[0]}, {other[1]}) share bytes, and one of "
                    f"them is {'never released' if not pool.concurrent else 'live'}",
                    ((model, buffer_id), (other[2], other[3])))
    return ValidationReport(True)


__all__ = ["BlockParams", "ModelBlocks", "SharedPool", "SizeClass", "assign_slots",
           "block_bytes", "check_pool", "model_blocks", "plan_shared"]
