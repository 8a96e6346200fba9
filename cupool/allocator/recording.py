"""Turning recorded iterations into a trace v1 :class:`~cupool.core.vocabulary.Trace`.

While recording, the pool logs, for the k-th allocation of the iteration (``k = 0, 1,
...``), its rounded size and *when it was freed*, measured in allocations: ``end[k]``
is the number of allocations the iteration had made when block ``k`` was freed. That
is the trace's time axis: **op k is the stretch from allocation k to allocation
k + 1**, so buffer ``k`` lives during ops ``[k, end[k])``::

    events:  m0  m1  f0  m2  f1  f2  m3        (m = malloc, f = free, in this order)
    op:      0   1       2           3
    buf 0:  [=======)                          start 0, end 2  (freed before m2)
    buf 1:      [===========)                  start 1, end 3
    buf 2:               [==)                  start 2, end 3  (freed before m3)
    buf 3:                         [=)         start 3, end 4 = n (freed after the last malloc)

Counting frees between allocations as ticks too would give the same overlaps (two
blocks overlap in time exactly when one is allocated while the other is live), so the
allocation index is enough, and it is what the pool can check in O(1) when it serves
allocation ``k`` from the plan.

A block still live when the iteration ends **outlives** it (a returned loss, a cache
for the next step). It is still live when the next iteration starts, so its trace
buffer spans the whole iteration ``[0, n)``: no allocation of the next iteration is
planned over its bytes. (Its own slot in the next iteration then finds the bytes
busy, and is served by the fallback region: a *collision*, counted, never an overlap.)

Several recorded iterations *agree* when they allocate the same rounded sizes in the
same order; they are merged into one trace by taking, for each slot, the latest end
and whether it outlived any of them.

In the pool, a :class:`Recorder` holds record mode's state: the running iteration's
:class:`RecordLog` (each recorded block's ticket points at it, so the block's free is
logged there) and the agreeing recordings so far.
"""

from __future__ import annotations

from dataclasses import dataclass

from cupool.core.vocabulary import Buffer, Op, Trace

OUTLIVES = "outlives the iteration"
"""``Buffer.name`` of a buffer that was still live when its iteration ended."""


@dataclass(frozen=True)
class RecordedIteration:
    """One recorded iteration: ``sizes[k]`` (rounded bytes) and ``ends[k]`` (see the
    module docstring) of its k-th allocation, and ``outlived[k]``: still live at the end.
    """

    sizes: tuple[int, ...]
    ends: tuple[int, ...]
    outlived: tuple[bool, ...]

    def __post_init__(self) -> None:
        n = len(self.sizes)
        if len(self.ends) != n or len(self.outlived) != n:
            raise ValueError(f"RecordedIteration: {n} sizes, {len(self.ends)} ends and "
                             f"{len(self.outlived)} outlived flags must be as many")
        for k, (size, end) in enumerate(zip(self.sizes, self.ends, strict=True)):
            if size <= 0 or not k < end <= n:
                raise ValueError(f"RecordedIteration: allocation {k}: size (={size}) must be "
                                 f"> 0 and end (={end}) in ({k}, {n}]")

    @property
    def allocations(self) -> int:
        return len(self.sizes)

    def agrees(self, other: RecordedIteration) -> bool:
        """Same rounded sizes in the same order."""
        return self.sizes == other.sizes


class RecordLog:
    """The allocations of one iteration being recorded: ``sizes[k]`` (rounded bytes) of
    its k-th allocation and ``ends[k]``, the number of allocations made when block k was
    freed (``None`` while it is live).

    The blocks' tickets refer to the log (:class:`~cupool.allocator.tickets.Ticket`
    ``record`` and ``slot``). A block freed after its iteration ended writes into a log
    that has already been read, or dropped: harmless, the recording is taken at the end
    of the iteration, and a block live then *outlives* it.
    """

    __slots__ = ("ends", "sizes")

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.ends: list[int | None] = []

    def add(self, size: int) -> None:
        """Log the next allocation (its index is ``len(sizes)`` before the call)."""
        self.sizes.append(size)
        self.ends.append(None)

    def free(self, k: int) -> None:
        """Block k was freed, now."""
        self.ends[k] = len(self.sizes)

    def recording(self) -> RecordedIteration:
        """The recorded iteration, as the log stands (live blocks outlive it)."""
        n = len(self.sizes)
        return RecordedIteration(tuple(self.sizes), tuple(n if e is None else e for e in self.ends),
                                 tuple(e is None for e in self.ends))


class Recorder:
    """Record mode's state (guarded by the pool's lock): ``log``, the running
    iteration's :class:`RecordLog`, and the recordings that agree so far.

    ``record_iterations`` recordings in a row that agree (same sizes in the same order)
    are merged into the one the pool plans; a recording that disagrees with the previous
    one starts the count again.
    """

    def __init__(self, record_iterations: int) -> None:
        self.record_iterations = record_iterations
        self.log = RecordLog()
        self._recordings: list[RecordedIteration] = []

    def begin(self) -> None:
        """An iteration starts: log into a new :class:`RecordLog`."""
        self.log = RecordLog()

    def finish(self) -> RecordedIteration | None:
        """The running iteration ended: keep its recording; the merged recording once
        ``record_iterations`` in a row agree (then the count starts again), else None."""
        recording = self.log.recording()
        self.log = RecordLog()
        if self._recordings and not self._recordings[-1].agrees(recording):
            self._recordings = []
        self._recordings.append(recording)
        if len(self._recordings) < self.record_iterations:
            return None
        merged = merge(self._recordings)
        self._recordings = []
        return merged

    def drop_recordings(self) -> None:
        """Forget the recordings kept so far (a plan was installed or dropped)."""
        self._recordings = []


def merge(recordings: list[RecordedIteration]) -> RecordedIteration:
    """One recording covering every lifetime of several agreeing ones."""
    first = recordings[0]
    for other in recordings[1:]:
        if not first.agrees(other):
            raise ValueError(f"cannot merge recordings of {first.allocations} and "
                             f"{other.allocations} allocations with different sizes")
    ends = tuple(max(r.ends[k] for r in recordings) for k in range(first.allocations))
    outlived = tuple(any(r.outlived[k] for r in recordings) for k in range(first.allocations))
    return RecordedIteration(first.sizes, ends, outlived)


def to_trace(recording: RecordedIteration, name: str = "recorded") -> Trace:
    """The trace v1 :class:`Trace` of a recording: buffer ``k`` is allocation ``k``."""
    n = recording.allocations
    ops = tuple(Op(f"malloc {k}") for k in range(n))
    buffers = []
    for k, (size, end, outlived) in enumerate(zip(recording.sizes, recording.ends,
                                                  recording.outlived, strict=True)):
        if outlived:
            buffers.append(Buffer(k, size, 0, n, name=OUTLIVES))
        else:
            buffers.append(Buffer(k, size, k, end))
    return Trace(name, ops, tuple(buffers), source="recorded by cupool.allocator.PlannedPool")


def from_trace(trace: Trace) -> RecordedIteration:
    """The recording a trace made by :func:`to_trace` describes (for ``load_plan``).

    Buffer ids must be ``0..n-1`` (slot = id) with ``n`` ops; anything else is not a
    pool recording and raises ``ValueError`` naming the buffer.
    """
    n = trace.num_ops
    by_id = sorted(trace.buffers, key=lambda b: b.id)
    if [b.id for b in by_id] != list(range(n)):
        raise ValueError(f"trace {trace.name!r} is not a pool recording: it needs buffer ids "
                         f"0..{n - 1} for its {n} ops, has {len(by_id)} buffers")
    outlived = tuple(b.name == OUTLIVES for b in by_id)
    ends = tuple(n if out else b.end for b, out in zip(by_id, outlived, strict=True))
    return RecordedIteration(tuple(b.size for b in by_id), ends, outlived)
