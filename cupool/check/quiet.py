"""A screen for rules 3 and 4 of :mod:`cupool.check.swapping` (how residencies get their
data, and every use sees valid data): which buffers pass them in one of two common shapes.

Most buffers of a large plan are either *plain* (one residency, named by no action) or
make one *round trip* (produced, swapped out once, swapped back in once)::

    op:        0   1   2   3   4   5   6   7   8
    plain:     [===============================)  produced at op 0, resident to the end
    round trip:    [=======)       [===========)  produced at op 1, out after op 2,
                       ^ SwapOut       ^ due      in triggered at op 5, due at op 6

For those, the rules come down to a few comparisons of columns, done for all buffers at
once. The screen is sound in the sense of :mod:`cupool.check.columns`: a buffer it clears
passes the per-buffer rules; every other buffer is checked one by one, in trace order.
"""

from __future__ import annotations

import numpy as np

from cupool.check.columns import Columns


def quiet_buffers(columns: Columns, order: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Per buffer of the trace: True when it passes the per-buffer rules of rules 3 and 4
    as a plain buffer or as a round trip (a temporary buffer with two residencies, entered
    by nothing and by a swap-in, and one swap-out from the first; no other action).

    Its actions pass the action rules too: a round trip's swap-out lies inside its first
    residency, its swap-in starts the second, which nothing else enters."""
    c, t, a, uses = columns, columns.trace, columns.actions, columns.trace.uses
    n = t.size.size
    out, back = a.kind == 0, a.kind == 1
    named = np.bincount(a.buffer, minlength=n)
    out_count = np.bincount(a.buffer[out], minlength=n)
    in_count = np.bincount(a.buffer[back], minlength=n)
    after, trigger, due = (np.zeros(n, dtype=np.int64) for _ in range(3))
    dropped = np.zeros(n, dtype=bool)
    after[a.buffer[out]], dropped[a.buffer[out]] = a.op[out], a.drop[out]
    trigger[a.buffer[back]], due[a.buffer[back]] = a.op[back], a.due[back]

    residencies = bounds[1:] - bounds[:-1]
    last_at = max(order.size - 1, 0)
    first_r = order[np.minimum(bounds[:-1], last_at)]
    second_r = order[np.minimum(bounds[:-1] + 1, last_at)]
    position = np.arange(n, dtype=np.int64)
    s0, e0, s1, e1 = c.start[first_r], c.end[first_r], c.start[second_r], c.end[second_r]
    in0, _, last0 = uses.inside(position, s0, e0)
    in1, first1, _ = uses.inside(position, s1, e1)
    produced = (s0 == t.start) & (s0 < e0) & (s0 < t.end)

    plain = (named == 0) & (residencies == 1) & produced & (in0 == uses.count) \
        & (~t.persistent | (e0 == c.num_ops))

    first_use = uses.flat[np.minimum(uses.begin, max(uses.flat.size - 1, 0))] \
        if uses.flat.size else np.zeros(n, dtype=np.int64)
    ready = np.where(uses.count > 0, first_use, s0)  # valid_after of the first residency
    limit = np.where(in1 > 0, np.minimum(first1, e1 - 1), e1 - 1)
    round_trip = ((named == 2) & (out_count == 1) & (in_count == 1) & (residencies == 2)
                  & ~t.persistent & produced
                  & (trigger == s1) & (s1 < e1) & (s1 < t.end)
                  & (s0 <= after) & (after < e0) & ~dropped
                  & ((in0 == 0) | (after >= last0)) & (after >= ready)
                  & (trigger <= due) & (due <= limit)
                  & (in0 + in1 == uses.count))
    return plain | round_trip
