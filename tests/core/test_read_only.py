"""Persistent state declared read-only (inference traces without ``writes``): in Python
(:func:`read_only_state`, ``load_trace(read_only_state=True)``) and on the command line
(``--read-only-state`` on plan, simulate, replay and validate)."""

from __future__ import annotations

import io
import json

import pytest

from cupool.cli import main
from cupool.core.read_only import ReadOnlyStateError, read_only_state
from cupool.core.vocabulary import PERSISTENT, Buffer, Op, Trace
from cupool.io import load_trace, save_trace


def _inference(weight_writes=None) -> Trace:
    """Four layers, each reading its weight once; the weights are most of the bytes."""
    ops = tuple(Op(f"layer{i}", 20.0) for i in range(4))
    buffers = [Buffer(i, 1 << 20, 0, 4, (i,), PERSISTENT, name=f"w{i}",
                      writes=weight_writes if i == 2 else None) for i in range(4)]
    buffers += [Buffer(4 + i, 1 << 16, i, i + 2, (i, i + 1)) for i in range(3)]
    return Trace("infer", ops, tuple(buffers))


def test_unknown_writes_of_persistent_buffers_become_read_only_and_temporaries_stay():
    trace = _inference()
    declared = read_only_state(trace)
    assert [b.read_only for b in declared.buffers] == [True] * 4 + [False] * 3
    assert [b.writes for b in declared.buffers[4:]] == [b.writes for b in trace.buffers[4:]]
    assert declared.digest() == trace.digest()
    assert read_only_state(_inference(weight_writes=())).buffers[2].read_only


def test_a_written_persistent_buffer_is_named_with_the_op_that_writes_it():
    with pytest.raises(ReadOnlyStateError) as caught:
        read_only_state(_inference(weight_writes=(2,)))
    assert str(caught.value) == ("persistent buffer 2 ('w2'): op 2 writes it, so persistent "
                                 "state is not read-only during the iteration (its writes: "
                                 "[2])")


def test_load_trace_declares_it_and_names_the_file_when_it_cannot(tmp_path):
    path = tmp_path / "infer.json"
    save_trace(_inference(), path)
    assert all(b.writes is None for b in load_trace(path).buffers[:4])
    assert all(b.read_only for b in load_trace(path, read_only_state=True).buffers[:4])
    written = tmp_path / "written.json"
    save_trace(_inference(weight_writes=(2,)), written)
    with pytest.raises(ReadOnlyStateError) as caught:
        load_trace(written, read_only_state=True)
    assert str(caught.value).startswith(f"{written}: persistent buffer 2 ('w2'): op 2 writes")


def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main([str(a) for a in argv], out, err)
    return code, out.getvalue(), err.getvalue()


def test_the_flag_drops_weights_instead_of_copying_them_back(tmp_path):
    path = tmp_path / "infer.json"
    save_trace(_inference(), path)
    runs = {}
    for flag in ((), ("--read-only-state",)):
        code, out, _err = _cli("simulate", path, "--budget", "50%", "--link", "gen4",
                               "--json", *flag)
        assert code == 0
        runs[bool(flag)] = json.loads(out)
    assert runs[True]["feasible"] and runs[False]["feasible"]
    # nothing the step writes goes back: fewer bytes on the link, never a slower step
    assert runs[True]["swapped_bytes"] < runs[False]["swapped_bytes"]
    assert runs[True]["iteration_us"] <= runs[False]["iteration_us"]
    plan = tmp_path / "plan.json"
    assert _cli("plan", path, "--budget", "50%", "--read-only-state", "--out", plan)[0] == 0
    assert _cli("validate", path, plan, "--read-only-state")[0] == 0


def test_the_flag_on_a_trace_that_writes_its_state_is_bad_input(tmp_path):
    path = tmp_path / "written.json"
    save_trace(_inference(weight_writes=(2,)), path)
    for command in (("plan", path, "--budget", "50%"), ("simulate", path, "--budget", "50%"),
                    ("replay", path, "--budget", "50%")):
        code, out, err = _cli(*command, "--read-only-state")
        assert code == 2 and out == ""
        assert err.strip().splitlines() == [
            f"cupool: error: {path}: persistent buffer 2 ('w2'): op 2 writes it, so "
            f"persistent state is not read-only during the iteration (its writes: [2])"]
