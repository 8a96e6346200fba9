"""Bytes live at each op, and the lower bound it gives on any arena."""

from __future__ import annotations

import numpy as np


def live_bytes(starts, ends, sizes, num_ops: int) -> np.ndarray:
    """Bytes allocated while each op runs (length ``num_ops``), for half-open lifetimes."""
    delta = np.zeros(num_ops + 1, dtype=np.int64)
    np.add.at(delta, np.asarray(starts, dtype=np.int64), np.asarray(sizes, dtype=np.int64))
    np.add.at(delta, np.asarray(ends, dtype=np.int64), -np.asarray(sizes, dtype=np.int64))
    return np.cumsum(delta[:-1])


def peak_live_bytes(starts, ends, sizes, num_ops: int) -> int:
    """The largest number of bytes live at one op: no static arena can be smaller (0 if empty)."""
    if len(sizes) == 0:
        return 0
    return int(live_bytes(starts, ends, sizes, num_ops).max())
