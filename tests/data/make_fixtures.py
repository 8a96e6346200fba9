"""Regenerate the hand-made PyTorch snapshot fixtures: ``python tests/data/make_fixtures.py``.

The layouts and the expected traces are described in ``tests/data/README.md``; the
dicts below are the whole content of the pickles (protocol 4, as ``_dump_snapshot``).
"""

from __future__ import annotations

import pickle
from pathlib import Path

HERE = Path(__file__).resolve().parent
FRAMES = [{"filename": "train.py", "line": 12, "name": "forward"}]


def entry(action, addr=None, size=0, **extra):
    e = {"action": action, "size": size, "stream": 0, "frames": FRAMES}
    if addr is not None:
        e["addr"] = addr
    e.update(extra)
    return e


def new_layout() -> dict:
    """torch >= 2.1: blocks carry 'address'; entries carry 'time_us' and 'compile_context'."""
    t = {"time_us": 1000, "compile_context": "N/A"}
    device0 = [
        entry("segment_alloc", 0x2000, 2048, **t),
        entry("alloc", 0x2000, 512, **t),            # A: op 0
        entry("alloc", 0x2200, 1024, **t),           # B: op 1
        entry("free_requested", 0x2000, 512, **t),
        entry("free_completed", 0x2000, 512, **t),   # A freed: op 2
        entry("alloc", 0x1400, 512, **t),            # C: op 3, still allocated at the end
        entry("free_requested", 0x2200, 1024, **t),  # B: op 4 (no free_completed follows)
        entry("free_completed", 0x2600, 256, **t),   # D (allocated before the trace): op 5
        entry("oom", size=1 << 30, device_free=0, **t),
        entry("segment_map", 0x3000, 4096, **t),
        entry("segment_unmap", 0x3000, 4096, **t),
        entry("segment_alloc", 0x4000, 512, **t),
        entry("segment_free", 0x4000, 512, **t),
        entry("annotate", 0x1400, 0, user_metadata="x", **t),
        entry("snapshot", 0, 0, **t),
    ]
    device1 = [entry("alloc", 0x9000, 256, **t)]

    def block(address, size, state):
        return {"address": address, "size": size, "state": state, "frames": FRAMES,
                "requested_size": size if state != "inactive" else 0}

    segments = [
        {"device": 0, "address": 0x1000, "total_size": 4096, "stream": 0, "segment_type": "large",
         "segment_pool_id": (0, 0), "allocated_size": 1536, "active_size": 1536,
         "requested_size": 1536, "is_expandable": False, "frames": [],
         "blocks": [block(0x1000, 1024, "active_allocated"),   # W: weights, persistent
                    block(0x1400, 512, "active_allocated"),    # C
                    block(0x1600, 2560, "inactive")]},
        {"device": 0, "address": 0x2000, "total_size": 2048, "stream": 0, "segment_type": "large",
         "segment_pool_id": (0, 0), "allocated_size": 0, "active_size": 1024,
         "requested_size": 1024, "is_expandable": False, "frames": [],
         "blocks": [block(0x2000, 512, "inactive"),
                    block(0x2200, 1024, "active_awaiting_free"),  # B, free pending
                    block(0x2600, 512, "inactive")]},
        {"device": 1, "address": 0x9000, "total_size": 1024, "stream": 0, "segment_type": "small",
         "segment_pool_id": (0, 0), "allocated_size": 256, "active_size": 256,
         "requested_size": 256, "is_expandable": False, "frames": [],
         "blocks": [block(0x9000, 256, "active_allocated"), block(0x9100, 768, "inactive")]},
    ]
    return {"segments": segments, "device_traces": [device0, device1]}


def torch20_layout() -> dict:
    """torch 2.0: blocks without 'address' (computed from the segment's) and with 'history'."""
    history = [{"addr": 0x6400, "real_size": 500, "frames": FRAMES}]
    segments = [{"device": 0, "address": 0x6000, "total_size": 1536, "stream": 0,
                 "segment_type": "small", "allocated_size": 512, "active_size": 512,
                 "blocks": [{"size": 1024, "state": "inactive", "history": []},
                            {"size": 512, "state": "active_allocated", "history": history}]}]
    trace = [entry("alloc", 0x6400, 512), entry("alloc", 0x6000, 1024),
             entry("free_requested", 0x6000, 1024), entry("free_completed", 0x6000, 1024)]
    return {"segments": segments, "device_traces": [trace]}


def torch113_layout() -> list:
    """torch 1.13 ``memory_snapshot()``: only a list of segments, state 'active_pending_free'."""
    history = [{"addr": 0x5000, "real_size": 1000, "frames": FRAMES}]
    return [{"device": 0, "address": 0x5000, "total_size": 2048, "stream": 0,
             "segment_type": "small", "allocated_size": 1024, "active_size": 1536,
             "blocks": [{"size": 1024, "state": "active_allocated", "history": history},
                        {"size": 512, "state": "inactive", "history": []},
                        {"size": 512, "state": "active_pending_free", "history": history}]}]


FIXTURES = {"torch_snapshot_new.pickle": new_layout,
            "torch_snapshot_2_0.pickle": torch20_layout,
            "torch_snapshot_1_13.pickle": torch113_layout}

if __name__ == "__main__":
    for name, make in FIXTURES.items():
        (HERE / name).write_bytes(pickle.dumps(make(), protocol=4))
