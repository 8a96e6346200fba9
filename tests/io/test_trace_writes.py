"""Trace v1's optional ``writes`` list: read strictly, written back, and refused with one
line naming the buffer and the op (exit 2 from the CLI)."""

from __future__ import annotations

import json

import pytest

from cupool.cli import main
from cupool.core.vocabulary import Buffer
from cupool.errors import TraceFormatError
from cupool.io import load_trace, save_trace
from tests.conftest import tiny_document


def _document(buffer_index: int, **fields) -> dict:
    document = tiny_document()
    document["buffers"][buffer_index].update(fields)
    return document


def _write(tmp_path, document):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(document))
    return path


def test_writes_round_trip_and_absent_means_unknown(tmp_path):
    document = tiny_document()
    document["buffers"][0]["writes"] = []          # persistent, read-only
    document["buffers"][1]["writes"] = [0]         # written by its producer only
    trace = load_trace(_write(tmp_path, document))
    assert trace.buffer(0).writes == () and trace.buffer(0).read_only
    assert trace.buffer(1).writes == (0,) and trace.buffer(1).write_ops == (0,)
    assert trace.buffer(2).writes is None and trace.buffer(2).write_ops == (2, 3)
    out = tmp_path / "again.json"
    save_trace(trace, out)
    again = json.loads(out.read_text())
    assert again["buffers"][0]["writes"] == [] and again["buffers"][1]["writes"] == [0]
    assert "writes" not in again["buffers"][2]
    assert load_trace(out) == trace


def test_a_temporarys_producer_is_one_of_its_writes():
    buffer = Buffer(7, 64, start=2, end=9, uses=(5, 8), writes=(8,))
    assert buffer.uses == (2, 5, 8) and buffer.writes == (2, 8)
    assert buffer.written_in(3, 7) is False and buffer.written_in(3, 8) is True
    assert Buffer(1, 8, 0, 4, (0, 3), "persistent", writes=()).written_in(0, 3) is False


BAD_WRITES = [
    ("outside uses", 1, {"writes": [1], "uses": [0]},
     "buffer 1: write at op 1 is not one of its uses"),
    ("outside lifetime", 1, {"writes": [0, 3]},
     "buffer 1: write at op 3 is outside the lifetime [0, 2)"),
    ("unsorted", 2, {"writes": [3, 2]},
     "buffer 2: writes must be strictly increasing; 2 follows 3"),
    ("duplicate", 2, {"writes": [2, 2]},
     "buffer 2: writes must be strictly increasing; 2 follows 2"),
    ("not ints", 2, {"writes": [2.5]}, "buffer 2: writes (=[2.5]) must be a list of op indices"),
    ("not a list", 2, {"writes": 3}, "buffer 2: writes (=3) must be a list of op indices"),
    ("read-only recomputed", 0, {"writes": [], "recompute": {"op": 0, "inputs": []}},
     "buffer 0: a read-only persistent buffer (writes []) cannot have a recompute recipe: "
     "re-running op 0 would write it"),
]


@pytest.mark.parametrize("label,index,fields,message", BAD_WRITES,
                         ids=[c[0] for c in BAD_WRITES])
def test_bad_writes_are_a_format_error_naming_the_buffer(tmp_path, label, index, fields,
                                                         message):
    path = _write(tmp_path, _document(index, **fields))
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    assert message in str(info.value)


@pytest.mark.parametrize("label,index,fields,message", BAD_WRITES,
                         ids=[c[0] for c in BAD_WRITES])
def test_the_cli_answers_bad_writes_with_exit_2_and_one_line(tmp_path, capsys, label, index,
                                                             fields, message):
    path = _write(tmp_path, _document(index, **fields))
    for argv in (["info", str(path)], ["plan", str(path), "--budget", "80%"]):
        code = main(argv)
        captured = capsys.readouterr()
        assert code == 2 and captured.out == ""
        assert len(captured.err.strip().splitlines()) == 1 and message in captured.err


def test_a_drop_round_trips_in_plan_json_and_is_written_only_when_true(tmp_path):
    from dataclasses import replace

    from cupool.core.vocabulary import SwapOut
    from cupool.errors import PlanFormatError
    from cupool.io import load_plan, save_plan
    from cupool.io.plan_json import parse_plan, plan_to_document
    from tests.swap_cases import six_op_swap_plan, six_op_trace

    plan = six_op_swap_plan(six_op_trace())
    assert "drop" not in plan_to_document(plan)["actions"][0]  # files of copies unchanged
    dropped = replace(plan, actions=tuple(replace(a, drop=True) if isinstance(a, SwapOut)
                                          else a for a in plan.actions))
    document = plan_to_document(dropped)
    assert document["actions"][0] == {"kind": "swap_out", "id": 1, "after_op": 0,
                                      "drop": True}
    path = tmp_path / "plan.json"
    save_plan(dropped, path)
    assert load_plan(path) == dropped
    document["actions"][0]["drop"] = "yes"
    with pytest.raises(PlanFormatError, match=r"swap_out field 'drop' \(='yes'\)"):
        parse_plan(document)
