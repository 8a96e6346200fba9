"""The static offset-assignment problem in index space, as solvers see it.

A :class:`StaticProblem` is a trace with everything but sizes and lifetimes dropped:
buffer ``i`` (``0 <= i < n``) needs ``sizes[i]`` bytes during ops
``[starts[i], ends[i])``. Solvers return one offset per index; :func:`cupool.planning.plan`
turns that back into a :class:`~cupool.core.Plan` keyed by buffer id.

Arrays are ``int64`` NumPy arrays, read-only, and never modified by solvers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cupool.core.liveness import live_bytes, peak_live_bytes
from cupool.core.vocabulary import Trace


@dataclass(frozen=True, eq=False)
class StaticProblem:
    """Offset assignment: disjoint byte ranges for time-overlapping buffers.

    ``capacity`` (bytes) is the decision solvers' bound; ``None`` asks for the smallest arena.
    ``num_ops`` is the length of the time axis (every ``ends[i] <= num_ops``).
    """

    ids: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    sizes: np.ndarray
    num_ops: int
    capacity: int | None = None
    name: str = ""

    @property
    def n(self) -> int:
        return int(self.sizes.shape[0])

    @classmethod
    def from_arrays(cls, starts, ends, sizes, *, ids=None, capacity=None, name="", num_ops=None):
        starts = _frozen(starts)
        ends = _frozen(ends)
        sizes = _frozen(sizes)
        ids = _frozen(np.arange(len(sizes)) if ids is None else ids)
        if num_ops is None:
            num_ops = int(ends.max()) if len(ends) else 0
        return cls(ids, starts, ends, sizes, int(num_ops), capacity, name)

    @classmethod
    def from_trace(cls, trace: Trace, capacity: int | None = None) -> StaticProblem:
        bufs = trace.buffers
        return cls.from_arrays(
            [b.start for b in bufs], [b.end for b in bufs], [b.size for b in bufs],
            ids=[b.id for b in bufs], capacity=capacity, name=trace.name, num_ops=trace.num_ops,
        )

    def with_capacity(self, capacity: int | None) -> StaticProblem:
        return StaticProblem(self.ids, self.starts, self.ends, self.sizes, self.num_ops,
                             capacity, self.name)

    def live_bytes(self) -> np.ndarray:
        """Bytes live during each op (length ``num_ops``)."""
        return live_bytes(self.starts, self.ends, self.sizes, self.num_ops)

    def lower_bound(self) -> int:
        """The largest number of bytes live at one op: no arena can be smaller."""
        cached = self.__dict__.get("_lower_bound")
        if cached is None:
            cached = peak_live_bytes(self.starts, self.ends, self.sizes, self.num_ops)
            object.__setattr__(self, "_lower_bound", cached)
        return cached

    def arena_of(self, offsets: np.ndarray) -> int:
        """``max(offset + size)``: the arena a set of offsets needs (0 when empty)."""
        if self.n == 0:
            return 0
        return int((np.asarray(offsets, dtype=np.int64) + self.sizes).max())


def _frozen(values) -> np.ndarray:
    array = np.array(values, dtype=np.int64)
    array.setflags(write=False)
    return array
