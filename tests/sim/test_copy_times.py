"""Copy times by row (``replay_input._CopyTimes.each``): each row's ``cost.copy_us`` at its
size and level, whether the actions share one level or not and whether some rows (drops)
are left out, and the shortest time among the rows asked for."""

from __future__ import annotations

import numpy as np
import pytest

from cupool.core.vocabulary import PAGEABLE, PINNED, SwapOut
from cupool.sim import cost_model
from cupool.sim.cost import D2H
from cupool.sim.replay_input import _CopyTimes

COST = cost_model(16.0, latency_us=2.0, pageable_gbps=4.0, pageable_latency_us=5.0)


@pytest.mark.parametrize(("sizes", "levels", "kept"), [
    ([300, 100, 300, 200], [PINNED] * 4, None),
    ([300, 100, 300, 200], [PAGEABLE, PINNED, PINNED, PAGEABLE], None),
    ([300, 100, 300, 200], [PAGEABLE, PINNED, PINNED, PAGEABLE], [False, True, True, False]),
    ([300, 100, 300, 200], [PAGEABLE, PINNED, PINNED, PAGEABLE], [True, False, True, True]),
    ([300, 100], [PINNED, PAGEABLE], [False, False]),
    ([], [], None),
])
def test_each_row_takes_its_size_and_levels_copy_time(sizes, levels, kept):
    outs = [SwapOut(k, 0, level) for k, level in enumerate(levels)]
    mask = np.array(kept if kept is not None else [True] * len(outs), bool)
    rows = [(size, level) for size, level, keep in zip(sizes, levels, mask, strict=True)
            if keep]
    nbytes = np.array([size for size, _level in rows], np.int64)
    times = _CopyTimes(COST)
    got = times.each(nbytes, D2H, outs, None if kept is None else mask)
    expected = [COST.copy_us(size, D2H, level) for size, level in rows]
    assert got.dtype == np.float64 and got.tolist() == expected
    assert times.shortest() == min(expected, default=0.0)
