"""Pinned staging: best fit over one reservation, merging, pageable fallback and
planned-pageable slots, and slots released twice."""

from __future__ import annotations

import pytest

from cupool.devices import open_device
from cupool.swap.errors import StagingError
from cupool.swap.staging import PinnedStaging


def test_staging_best_fit_merges_and_falls_back_to_pageable():
    with open_device("emulated", capacity="1MiB") as device:
        staging = PinnedStaging(device, 1024)
        a, b, c = staging.acquire(256), staging.acquire(512), staging.acquire(256)
        staging.release(b)
        small = staging.acquire(200)  # best fit: the 512-byte hole
        assert small.offset == 256
        staging.release(a)
        overflow = staging.acquire(600)
        assert not overflow.pinned
        stats = staging.stats()
        assert stats["staging.pageable_slots.count"] == 1
        assert stats["staging.pageable_bytes.total"] == 600
        planned = staging.acquire(64, level="pageable")  # room left, but the plan said so
        assert not planned.pinned
        stats = staging.stats()
        assert stats["staging.planned_pageable_slots.count"] == 1
        assert stats["staging.pageable_slots.count"] == 1
        with pytest.raises(StagingError, match="level must be 'pinned' or 'pageable'"):
            staging.acquire(64, level="disk")
        for slot in (small, c, overflow, planned):
            staging.release(slot)
        assert staging.is_clean()
        with pytest.raises(StagingError, match="released twice"):
            staging.release(c)
        staging.close()
