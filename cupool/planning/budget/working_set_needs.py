"""What each op of a trace needs resident in any valid plan, for the last resort.

:mod:`.working_sets` walks the ops keeping at each only what it needs on the device; these
are its inputs: the ops each buffer must be resident at (:func:`needed_ops`), the bytes
that makes per op (:func:`required_bytes`: the largest is the smallest budget any plan
can have), whether the persistent buffers no op uses can be resident at all
(:func:`idle_persistent_shortfall`), and which persistent buffers may stay on the device
beside every op's working set (:func:`kept_persistent`).
"""

from __future__ import annotations

import itertools

import numpy as np

from cupool.core.vocabulary import PERSISTENT, Trace


def needed_ops(trace: Trace) -> dict[int, tuple[int, ...]]:
    """Per buffer, the ops it must be resident at in any valid plan: its uses; a temporary
    without recorded uses, its first op (it is produced there); a persistent one without
    uses, the op whose needs are the fewest bytes when it is placed, the largest such
    buffer first (it must be resident somewhere)."""
    needs: dict[int, tuple[int, ...]] = {}
    idle = []
    for b in trace.buffers:
        if b.uses:
            needs[b.id] = tuple(sorted(set(b.uses)))
        elif b.kind != PERSISTENT:
            needs[b.id] = (b.start,)
        else:
            idle.append(b)
    load = np.zeros(max(trace.num_ops, 1), dtype=np.int64)
    _add_needs(load, trace, needs)
    # largest first, each on the lightest op (the longest-processing-time rule: with two
    # ops of 10 bytes and idle buffers of 5, 5 and 10 bytes, the trace's order gives a
    # fullest op of 25 bytes, this order 20)
    for b in sorted(idle, key=lambda b: (-b.size, b.id)):
        op = int(np.argmin(load))
        needs[b.id] = (op,)
        load[op] += b.size
    return needs


def required_bytes(trace: Trace, needs: dict[int, tuple[int, ...]] | None = None) -> np.ndarray:
    """Bytes each op needs resident in any valid plan (:func:`needed_ops`)."""
    needs = needed_ops(trace) if needs is None else needs
    out = np.zeros(trace.num_ops, dtype=np.int64)
    _add_needs(out, trace, needs)
    return out


def _add_needs(load: np.ndarray, trace: Trace, needs: dict[int, tuple[int, ...]]) -> None:
    """Add each buffer's bytes to ``load`` at every op it needs (those ``needs`` lists)."""
    listed = [(b.size, needs[b.id]) for b in trace.buffers if b.id in needs]
    ops = np.fromiter(itertools.chain.from_iterable(ops for _size, ops in listed),
                      dtype=np.int64)
    sizes = np.repeat(np.array([size for size, _ops in listed], dtype=np.int64),
                      [len(ops) for _size, ops in listed])
    np.add.at(load, ops, sizes)


def idle_persistent_shortfall(trace: Trace, budget_bytes: int) -> str | None:
    """``"infeasible: op k needs N bytes resident ..."`` when the persistent buffers no op
    uses cannot be resident beside the ops' own working sets within the budget, else
    ``None``.

    Every buffer has a residency in any valid plan, so each such buffer is resident at one
    op at least, beside that op's uses. Two bounds follow: op ``k``, whose uses are the
    fewest bytes, holding the largest of them; and the average op, when their bytes and
    every op's uses are spread over the ops (with one op: all of them at op 0). (Several
    of them may need more: :func:`needed_ops` places them one by one; these bounds are the
    proved part.)"""
    idle = [b for b in trace.buffers if b.kind == PERSISTENT and not b.uses]
    if not idle:
        return None
    placed = {b.id for b in trace.buffers if b.uses or b.kind != PERSISTENT}
    needs = {b_id: ops for b_id, ops in needed_ops(trace).items() if b_id in placed}
    load = required_bytes(trace, needs)
    k = int(np.argmin(load))
    largest = max(idle, key=lambda b: b.size)
    need = int(load[k]) + largest.size
    if need > budget_bytes:
        return (f"infeasible: op {k} needs {need} bytes resident (budget {budget_bytes} "
                f"bytes): its uses' {int(load[k])} bytes, the fewest of any op, and persistent "
                f"buffer {largest.id} ({largest.size} bytes), used by no op but resident at "
                f"one op at least")
    idle_bytes = sum(b.size for b in idle)
    total = int(load.sum()) + idle_bytes
    average = -(-total // trace.num_ops)
    if average <= budget_bytes:
        return None
    who = "op 0 needs" if trace.num_ops == 1 else f"one of the {trace.num_ops} ops needs at least"
    return (f"infeasible: {who} {average} bytes resident (budget {budget_bytes} bytes): the "
            f"ops' uses ({int(load.sum())} bytes over all ops) and the {len(idle)} persistent "
            f"buffers no op uses ({idle_bytes} bytes), each resident at one op at least")


def kept_persistent(trace: Trace, budget_bytes: int, cost,
                    needs: dict[int, tuple[int, ...]]) -> list[int]:
    """Persistent buffers that may stay on the device for the whole iteration: taken in
    order of copy time per byte saved (a copy in per run of consecutive needs), each while
    every op's other needs still fit beside those taken."""
    required = required_bytes(trace, needs).astype(np.float64)
    scored = []
    for b in trace.buffers:
        if b.kind != PERSISTENT:
            continue
        ops = needs[b.id]
        runs = 1 + sum(1 for a, c in itertools.pairwise(ops) if c > a + 1)
        scored.append((-runs * cost.copy_us(b.size, "h2d") / b.size, b.size, b.id))
    kept, kept_bytes = [], 0
    room = budget_bytes - required  # what each op leaves free beside its working set
    for _score, size, buffer_id in sorted(scored):
        used = np.zeros(trace.num_ops, dtype=bool)
        used[list(needs[buffer_id])] = True
        # ops that use it need it anyway; the others lose its bytes
        if np.all(room - np.where(used, 0, size) >= 0):
            room -= np.where(used, 0, size)
            kept.append(buffer_id)
            kept_bytes += size
    return kept
