"""PyTorch memory snapshot importer: layouts, every action, devices, malformed and malicious
pickles (fixtures: tests/data/README.md)."""

from __future__ import annotations

import gzip
import os
import pickle
from pathlib import Path

import pytest

from cupool.errors import InputError, TraceFormatError
from cupool.io import convert, load_trace
from cupool.io.torch_snapshot import snapshot_to_trace
from tests.data.make_fixtures import entry, new_layout

DATA = Path(__file__).resolve().parents[1] / "data"


def spans(trace):
    return [(b.size, b.start, b.end, b.kind) for b in trace.buffers]


def test_new_layout_every_action():
    trace = load_trace(DATA / "torch_snapshot_new.pickle")
    assert [op.name for op in trace.ops] == ["alloc", "alloc", "free_completed", "alloc",
                                             "free_requested", "free_completed"]
    assert spans(trace) == [(512, 0, 2, "temporary"), (256, 0, 5, "temporary"),
                            (1024, 1, 4, "temporary"), (512, 3, 6, "temporary"),
                            (1024, 0, 6, "persistent")]
    assert [b.uses for b in trace.buffers] == [(0, 1), (0, 4), (1, 3), (3, 5), (0, 5)]
    assert trace.name == "torch_snapshot_new" and "device 0" in trace.source


def test_older_layouts():
    assert spans(load_trace(DATA / "torch_snapshot_2_0.pickle")) == [
        (512, 0, 3, "temporary"), (1024, 1, 2, "temporary")]
    old = load_trace(DATA / "torch_snapshot_1_13.pickle")
    assert [op.name for op in old.ops] == ["snapshot"]
    assert spans(old) == [(1024, 0, 1, "persistent"), (512, 0, 1, "persistent")]


def test_device_choice():
    assert spans(load_trace(DATA / "torch_snapshot_new.pickle", device=1)) == [
        (256, 0, 1, "temporary")]
    with pytest.raises(TraceFormatError, match=r"device \(=2\) has no allocations.*: 0, 1"):
        load_trace(DATA / "torch_snapshot_new.pickle", device=2)


def test_free_of_a_block_allocated_before_the_trace_at_the_first_event():
    trace = snapshot_to_trace({"segments": [], "device_traces": [[
        entry("free_completed", 0x10, 64), entry("alloc", 0x10, 32)]]})
    assert spans(trace) == [(64, 0, 1, "temporary"), (32, 1, 2, "temporary")]


def test_detected_by_content_whatever_the_name(tmp_path):
    data = (DATA / "torch_snapshot_new.pickle").read_bytes()
    (tmp_path / "trace.csv").write_bytes(data)
    (tmp_path / "trace.json").write_bytes(gzip.compress(data))
    expected = spans(load_trace(DATA / "torch_snapshot_new.pickle"))
    assert spans(load_trace(tmp_path / "trace.csv")) == expected
    assert spans(load_trace(tmp_path / "trace.json")) == expected


def test_convert_to_csv_and_json(tmp_path):
    trace = convert(DATA / "torch_snapshot_new.pickle", tmp_path / "out.csv")
    assert (tmp_path / "out.csv").read_text().splitlines()[:2] == ["id,lower,upper,size",
                                                                  "0,0,2,512"]
    convert(DATA / "torch_snapshot_new.pickle", tmp_path / "out.json.gz")
    again = load_trace(tmp_path / "out.json.gz")
    assert again == trace
    with pytest.raises(InputError, match="output format"):
        convert(DATA / "torch_snapshot_new.pickle", tmp_path / "out.pickle")


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_global_is_refused_without_running(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps({"segments": [_Evil(marker)]}, protocol=4))
    with pytest.raises(TraceFormatError, match=r"global (posix|os|nt)\.system"):
        load_trace(path)
    assert not marker.exists()


@pytest.mark.parametrize("payload", [pickle.dumps(Path("x"), protocol=4),
                                     pickle.dumps({1, 2}.__class__, protocol=4)])
def test_any_global_is_refused(tmp_path, payload):
    (tmp_path / "s.pickle").write_bytes(payload)
    with pytest.raises(TraceFormatError, match="refers to the global"):
        load_trace(tmp_path / "s.pickle")


def test_truncated_pickle(tmp_path):
    data = (DATA / "torch_snapshot_new.pickle").read_bytes()
    (tmp_path / "s.pickle").write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match="not a readable pickle"):
        load_trace(tmp_path / "s.pickle")


def _with_entries(*entries):
    return {"segments": [], "device_traces": [list(entries)]}


@pytest.mark.parametrize(("document", "message"), [
    (42, "expected a snapshot dict or a list of segments, got int"),
    ({"device_traces": []}, "no 'segments'"),
    ({"segments": {}, "device_traces": []}, "'segments' must be a list"),
    ({"segments": [], "device_traces": [5]}, "per-device lists"),
    (_with_entries("alloc"), r"device_traces\[0\]\[0\]: expected a trace entry dict, got 'alloc'"),
    (_with_entries(entry("alloc", 0, 8), {"action": "malloc"}),
     r"device_traces\[0\]\[1\]: field 'action' \(='malloc'\)"),
    (_with_entries(entry("alloc", None, 8)), r"\[0\]\[0\]: field 'addr' \(=None\)"),
    (_with_entries(entry("alloc", 16, -8)), r"\[0\]\[0\]: field 'size' \(=-8\)"),
    (_with_entries(entry("alloc", 16, True)), r"\[0\]\[0\]: field 'size' \(=True\)"),
    (_with_entries(entry("alloc", 16, 8), entry("alloc", 16, 8)),
     r"\[0\]\[1\]: alloc at addr \(=0x10\) that is still allocated \(by entry 0\)"),
    (_with_entries(entry("alloc", 16, 8), entry("free_requested", 16, 8),
                   entry("free_requested", 16, 8)),
     r"\[0\]\[2\]: second free_requested of addr \(=0x10\) \(first: entry 1\)"),
    (_with_entries(entry("alloc", 16, 8), entry("free_completed", 16, 4)),
     r"\[0\]\[1\]: free_completed of addr \(=0x10\) with size \(=4\) differs"),
    ({"segments": [{"address": 0, "blocks": [{"size": 8, "state": "busy"}]}]},
     r"segments\[0\]\.blocks\[0\]: field 'state' \(='busy'\)"),
    ({"segments": [{"address": -1, "blocks": []}]}, r"segments\[0\]: field 'address' \(=-1\)"),
    ({"segments": [{"address": 0, "blocks": None}]}, r"segments\[0\]: field 'blocks'"),
    ({"segments": [], "device_traces": [[]]}, "no allocations on any device"),
    (_with_entries(entry("alloc", 16, 0)), "no allocations of more than 0 bytes"),
])
def test_malformed_snapshots(document, message):
    with pytest.raises(TraceFormatError, match=message):
        snapshot_to_trace(document)


def test_errors_name_the_file(tmp_path):
    document = new_layout()
    document["device_traces"][0][3]["size"] = "512"
    (tmp_path / "bad.pickle").write_bytes(pickle.dumps(document, protocol=4))
    with pytest.raises(TraceFormatError, match=r"bad\.pickle: device_traces\[0\]\[3\]: "
                                               r"field 'size' \(='512'\)"):
        load_trace(tmp_path / "bad.pickle")
