"""Readers and writers: round trips, content detection, and every malformed-input rule."""

from __future__ import annotations

import copy
import gzip
import json
import pickle

import pytest

from cupool.core.vocabulary import Placement, Plan, SolveStatus
from cupool.errors import InputError, PlanFormatError, TraceFormatError
from cupool.io import load_plan, load_trace, load_trace_and_offsets, save_plan, save_trace
from tests.conftest import DSA, TRACES, tiny_document


def write(tmp_path, name, content):
    path = tmp_path / name
    if isinstance(content, (dict, list)):
        content = json.dumps(content)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name.split(".")[0])
def test_real_traces_round_trip(path, tmp_path):
    trace = load_trace(path)
    assert len(trace.buffers) > 400
    for name in ("copy.json", "copy.json.gz"):
        save_trace(trace, tmp_path / name)
        assert load_trace(tmp_path / name) == trace


def test_real_trace_lower_bound_matches_the_published_table():
    # shared/traces/README.md lists the lower bound of each trace.
    table = {}
    for line in (TRACES[0].parent / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 4 and cells[1].endswith(".gz"):
            table[cells[1]] = int(cells[4])
    assert len(table) == len(TRACES)
    for path in TRACES:
        assert load_trace(path).lower_bound_bytes() == table[path.name]


def test_csv_with_labels_round_trips_with_offsets(tmp_path):
    trace, offsets = load_trace_and_offsets(DSA / "example.12.csv")
    assert offsets is None
    assert [b.name for b in trace.buffers] == ["b1", "b2", "b3", "b4", "b5"]
    assert [b.id for b in trace.buffers] == [0, 1, 2, 3, 4]
    assert trace.num_ops == 21 and trace.lower_bound_bytes() == 12
    plan = Plan(trace.name, trace.digest(), "hand", SolveStatus.OPTIMAL, 12, 12,
                tuple(Placement(i, o) for i, o in enumerate([0, 0, 4, 4, 8])))
    save_plan(plan, tmp_path / "plan.csv", trace)
    text = (tmp_path / "plan.csv").read_text()
    assert text.splitlines() == ["id,lower,upper,size,offset", "b1,0,3,4,0", "b2,3,9,4,0",
                                 "b3,0,9,4,4", "b4,9,21,4,4", "b5,0,21,4,8"]
    again, again_offsets = load_trace_and_offsets(tmp_path / "plan.csv")
    assert again.digest() == trace.digest() and again_offsets == plan.offsets()
    assert load_plan(tmp_path / "plan.csv", trace).offsets() == plan.offsets()


def test_csv_integer_ids_are_kept(tmp_path):
    path = write(tmp_path, "ints.csv", "id,lower,upper,size\n7,0,2,10\n3,1,4,5\n")
    trace = load_trace(path)
    assert [(b.id, b.start, b.end, b.size) for b in trace.buffers] == [(7, 0, 2, 10), (3, 1, 4, 5)]
    save_trace(trace, tmp_path / "out.csv")
    assert (tmp_path / "out.csv").read_text() == "id,lower,upper,size\n7,0,2,10\n3,1,4,5\n"


def test_content_not_name_decides_the_format(tmp_path):
    gz = write(tmp_path, "trace.weird", gzip.compress(json.dumps(tiny_document()).encode()))
    assert load_trace(gz).name == "tiny"
    csv_named_json = write(tmp_path, "t.json", "id,lower,upper,size\n0,0,1,4\n")
    assert load_trace(csv_named_json).buffers[0].size == 4


def test_plan_json_round_trip(tmp_path):
    plan = Plan("t", "abc", "greedy-size", SolveStatus.FEASIBLE, 40, 32,
                (Placement(0, 0), Placement(1, 8)), 0.5, 64, {"nodes": 3})
    save_plan(plan, tmp_path / "p.json")
    assert load_plan(tmp_path / "p.json") == plan


BAD_TRACES = [
    ("empty ops", {"ops": []}, "no ops"),
    ("empty buffers", {"buffers": []}, "no buffers"),
    ("unknown version", {"version": 2}, "unknown trace format version (=2)"),
    ("wrong format", {"format": "other"}, "field 'format' (='other')"),
    ("NaN duration", {"ops": [{"name": "a", "duration_us": float("nan")}] * 4},
     "op 0: 'duration_us' (=nan)"),
]
BAD_BUFFERS = [
    ("zero size", {"size": 0}, "buffer 1: size (=0) must be an integer > 0"),
    ("negative size", {"size": -5}, "buffer 1: size (=-5)"),
    ("float size", {"size": 1.5}, "buffer 1: size (=1.5)"),
    ("end before start", {"start": 2, "end": 1, "uses": []},
     "buffer 1: end (=1) must be > start (=2)"),
    ("end equals start", {"start": 1, "end": 1, "uses": []}, "end (=1) must be > start (=1)"),
    ("end past ops", {"end": 9}, "buffer 1: end (=9) must be <= the number of ops (=4)"),
    ("use outside", {"uses": [0, 3]}, "buffer 1: use at op 3 is outside the lifetime [0, 2)"),
    ("unsorted uses", {"uses": [1, 0]}, "uses must be strictly increasing; 0 follows 1"),
    ("bad kind", {"kind": "scratch"}, "kind (='scratch')"),
    ("short persistent", {"kind": "persistent"}, "persistent buffer must live [0, 4)"),
    ("negative id", {"id": -1}, "'id' (=-1) must be an integer >= 0"),
    ("duplicate id", {"id": 0}, "buffer 0: duplicate buffer id (=0)"),
    ("recompute unknown input", {"recompute": {"op": 0, "inputs": [99]}},
     "recompute input (=99)"),
]


@pytest.mark.parametrize("label,override,message", BAD_TRACES, ids=[c[0] for c in BAD_TRACES])
def test_malformed_traces_are_rejected_with_the_value(tmp_path, label, override, message):
    path = write(tmp_path, "bad.json", json.dumps(tiny_document(**override)))
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("label,override,message", BAD_BUFFERS, ids=[c[0] for c in BAD_BUFFERS])
def test_malformed_buffers_are_rejected_with_id_and_value(tmp_path, label, override, message):
    document = tiny_document()
    document["buffers"][1].update(override)
    path = write(tmp_path, "bad.json", document)
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    assert message in str(info.value)


BAD_CSV = [
    ("missing column", "id,lower,size\n0,0,4\n", "lacks column(s) upper"),
    ("unknown column", "id,lower,upper,size,gaps\n0,0,1,4,x\n", "unsupported CSV column(s) 'gaps'"),
    ("header only", "id,lower,upper,size\n", "no buffers"),
    ("empty", "", "empty"),
    ("short row", "id,lower,upper,size\n0,0,1\n", "line 2: expected 4 fields, got 3"),
    ("non-integer", "id,lower,upper,size\n0,0,1,4.5\n", "line 2: buffer 0: size (='4.5')"),
    ("zero size", "id,lower,upper,size\n0,0,1,0\n", "line 2: buffer 0: size (=0)"),
    ("upper <= lower", "id,lower,upper,size\nx,5,5,1\n",
     "line 2: buffer x: upper (=5) must be > lower (=5)"),
    ("duplicate id", "id,lower,upper,size\na,0,1,4\na,1,2,4\n",
     "line 3: duplicate id 'a' (first on line 2)"),
    ("negative offset", "id,lower,upper,size,offset\n0,0,1,4,-1\n", "offset (=-1)"),
]


@pytest.mark.parametrize("label,text,message", BAD_CSV, ids=[c[0] for c in BAD_CSV])
def test_malformed_csv_is_rejected_with_line_and_value(tmp_path, label, text, message):
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    assert message in str(info.value)


def test_invalid_json_and_binary_are_rejected(tmp_path):
    with pytest.raises(TraceFormatError, match="invalid JSON at line 1"):
        load_trace(write(tmp_path, "a.json", "{nope"))
    with pytest.raises(TraceFormatError, match="not UTF-8"):
        load_trace(write(tmp_path, "b.bin", b"\xff\xfe\x00id"))
    with pytest.raises(InputError, match="corrupt gzip"):
        load_trace(write(tmp_path, "c.gz", b"\x1f\x8bnot really"))


def test_bad_plan_documents(tmp_path):
    good = {"format": "cupool-plan", "version": 1, "trace": "t", "trace_digest": "d",
            "solver": "s", "status": "feasible", "arena_bytes": 8, "lower_bound_bytes": 8,
            "placements": [{"id": 0, "offset": 0}]}
    cases = [({"version": 9}, "unknown plan format version (=9)"),
             ({"status": "great"}, "field 'status' (='great')"),
             ({"arena_bytes": -1}, "field 'arena_bytes' (=-1)"),
             ({"placements": [{"id": 0}]}, "placements[0]"),
             ({"placements": [{"id": 3, "offset": -2}]}, "buffer 3: offset (=-2)")]
    for override, message in cases:
        document = copy.deepcopy(good)
        document.update(override)
        with pytest.raises(PlanFormatError) as info:
            load_plan(write(tmp_path, "p.json", document))
        assert message in str(info.value)


def test_errors_pickle_with_their_fields():
    error = TraceFormatError("size (=0) must be > 0", "buffer 3", "t.json")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is TraceFormatError and str(again) == str(error)
    assert again.where == "buffer 3" and again.path == "t.json"


def test_writes_are_atomic_and_do_not_create_directories(tmp_path):
    trace = load_trace(DSA / "example.12.csv")
    with pytest.raises(InputError, match="does not exist"):
        save_trace(trace, tmp_path / "missing" / "t.csv")
    save_trace(trace, tmp_path / "t.csv")
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"]


# --- files that are not what they claim to be -------------------------------------------

def test_json_nested_too_deep_is_a_format_error_not_a_recursion_error(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    with pytest.raises(TraceFormatError, match="nested too deeply") as trace_error:
        load_trace(deep)
    assert str(deep) in str(trace_error.value)
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(PlanFormatError, match="nested too deeply"):
        load_plan(deep)


@pytest.mark.parametrize(("content", "expected"), [
    (b"", "the file is empty, expected plan JSON"),
    (b"  \n\t\n", "the file is empty, expected plan JSON"),
    (bytes(range(256)), "not a plan: byte 128 is not UTF-8 text, expected plan JSON"),
])
def test_an_empty_or_binary_plan_file_is_named_as_a_plan(tmp_path, content, expected):
    path = tmp_path / "plan.json"
    path.write_bytes(content)
    for trace in (None, load_trace(TRACES[0])):
        with pytest.raises(PlanFormatError, match=expected) as caught:
            load_plan(path, trace)
        assert str(path) in str(caught.value) and "trace" not in str(caught.value)


@pytest.mark.parametrize("target", ["/proc/cupool-plan.json", "/proc/self/cupool-plan.json"])
def test_writing_where_nothing_can_be_written_is_an_input_error(target):
    trace = load_trace(TRACES[0])
    with pytest.raises(InputError, match="cannot write here") as caught:
        save_trace(trace, target)
    assert target in str(caught.value)


def test_the_cli_answers_unwritable_and_deep_files_with_exit_2(tmp_path, capsys):
    from cupool.cli import main

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert main(["info", str(deep)]) == 2
    assert main(["validate", str(TRACES[0]), str(deep)]) == 2
    assert main(["plan", str(TRACES[0]), "--out", "/proc/cupool-plan.json"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("cupool: error: ") for line in lines)
    assert "nested too deeply" in lines[0] and "cannot write here" in lines[2]
