"""Shared fixtures: paths to bundled data and a tiny hand-made trace."""

from __future__ import annotations

import json

import pytest

from cupool.data import DATA_DIR

TRACES = sorted((DATA_DIR / "traces").glob("*.trace.json.gz"))
DSA = DATA_DIR / "dsa"


def tiny_document(**overrides) -> dict:
    """A valid trace-v1 document with 4 ops and 3 buffers; ``overrides`` replace top-level fields.

    op:   0   1   2   3
    b0: [===============)   persistent, 8 B
    b1: [=======)           16 B
    b2:         [=======)   16 B   (may reuse b1's bytes)
    """
    document = {
        "format": "cupool-trace", "version": 1, "name": "tiny", "source": "hand-made",
        "ops": [{"name": f"op{i}", "duration_us": 1.0 + i} for i in range(4)],
        "buffers": [
            {"id": 0, "size": 8, "start": 0, "end": 4, "uses": [0, 3], "kind": "persistent"},
            {"id": 1, "size": 16, "start": 0, "end": 2, "uses": [0, 1]},
            {"id": 2, "size": 16, "start": 2, "end": 4, "uses": [2, 3],
             "recompute": {"op": 2, "inputs": [1]}},
        ],
    }
    document.update(overrides)
    return document


@pytest.fixture
def tiny_trace_path(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(tiny_document()))
    return path
