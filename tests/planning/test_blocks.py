"""Several models, one pool of blocks: size classes, slot rules, the shared layout, the CLI."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cupool.check import validate_plan
from cupool.cli import main
from cupool.core.vocabulary import PERSISTENT, Buffer, Op, Placement, Trace
from cupool.errors import SolverError
from cupool.io import load_plan, load_trace
from cupool.planning.blocks import (
    BlockParams,
    assign_slots,
    block_bytes,
    check_pool,
    plan_shared,
)
from tests.conftest import TRACES

INFER = [p for p in TRACES if "infer" in p.name]


def _trace(name, buffers, num_ops):
    return Trace(name, tuple(Op(f"op{i}", 1.0) for i in range(num_ops)), tuple(buffers))


def test_block_ladder_rounds_up_to_the_alignment_then_to_steps_per_octave():
    assert block_bytes(1) == 512
    assert block_bytes(1000) == 1024
    assert block_bytes(2048) == 2048
    assert block_bytes(5000) == 5120            # 4096 + 1024: 5 quarters of 4096
    assert block_bytes(9000) == 10240           # 8192 + 2048
    assert block_bytes(9000, 512, 1) == 16384   # one class per octave: powers of two
    assert block_bytes(7, 1, 4) == 7
    for size in (1, 511, 513, 4097, 123_456_789):
        b = block_bytes(size)
        assert b >= size and b % 512 == 0 and b <= max(512, size * 1.25 + 512)


def test_slots_are_taken_at_start_and_returned_after_end():
    # the module docstring's example: b1 [0,2), b2 [1,4), b3 [2,4), all in one class
    bufs = [Buffer(1, 4096, 0, 2), Buffer(2, 4000, 1, 4), Buffer(3, 3900, 2, 4)]
    slot_of, classes = assign_slots(bufs)
    assert slot_of == {1: (4096, 0), 2: (4096, 1), 3: (4096, 0)}
    assert [(c.block_bytes, c.blocks, c.buffers) for c in classes] == [(4096, 2, 3)]


def test_separate_classes_count_separately():
    bufs = [Buffer(1, 100, 0, 3), Buffer(2, 100, 0, 3), Buffer(3, 5000, 1, 2)]
    _slot_of, classes = assign_slots(bufs)
    assert [(c.block_bytes, c.blocks) for c in classes] == [(512, 2), (5120, 1)]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 20_000), st.integers(0, 9), st.integers(1, 5)),
                min_size=1, max_size=30))
def test_slot_count_is_the_maximum_live_count_and_no_slot_is_shared_in_time(raw):
    bufs = [Buffer(i, size, start, start + length) for i, (size, start, length) in
            enumerate(raw)]
    slot_of, classes = assign_slots(bufs)
    for c in classes:
        members = [b for b in bufs if slot_of[b.id][0] == c.block_bytes]
        live = max(sum(b.start <= op < b.end for b in members) for op in range(15))
        assert c.blocks == live
    for a in bufs:
        for b in bufs:
            if a.id < b.id and a.overlaps(b):
                assert slot_of[a.id] != slot_of[b.id]


def _two_models():
    a = _trace("a", [Buffer(0, 1000, 0, 4, (0, 3), PERSISTENT), Buffer(1, 3000, 0, 2, (0, 1)),
                     Buffer(2, 3000, 2, 4, (2, 3))], 4)
    b = _trace("b", [Buffer(0, 500, 0, 3, (0,), PERSISTENT), Buffer(5, 5000, 0, 3, (0, 2))], 3)
    return a, b


def test_two_small_models_share_the_temporary_region_and_keep_persistent_apart():
    a, b = _two_models()
    pool = plan_shared([a, b])
    assert check_pool([a, b], pool).valid
    assert [validate_plan(t, p).valid for t, p in zip([a, b], pool.plans, strict=True)] == [1, 1]
    # persistent: a at [0, 1024), b at [1024, 1536); one temporary region of max(3072, 5120)
    assert pool.persistent_regions == ((0, 1024), (1024, 512))
    assert pool.temporary_regions == ((1536, 5120), (1536, 5120))
    assert pool.arena_bytes == 1536 + 5120
    assert pool.arena_bytes <= pool.target_bytes
    assert pool.floor_bytes == 1500 + 5000
    assert pool.plans[0].offsets()[1] == pool.plans[0].offsets()[2] == 1536  # reused block


def test_concurrent_models_share_no_byte():
    a, b = _two_models()
    pool = plan_shared([a, b], BlockParams(concurrent=True))
    assert check_pool([a, b], pool).valid
    assert pool.temporary_regions == ((1536, 3072), (4608, 5120))
    assert pool.arena_bytes == 4608 + 5120


def test_gap_between_persistent_regions():
    a, b = _two_models()
    pool = plan_shared([a, b], BlockParams(gap_bytes=100))
    assert pool.persistent_regions == ((0, 1024), (1536, 512))
    assert check_pool([a, b], pool).valid


def test_check_pool_names_a_temporary_over_another_models_persistent_buffer():
    a, b = _two_models()
    pool = plan_shared([a, b])
    # model 0's buffer 1 moved onto model 1's persistent region [1024, 1536): each plan
    # alone stays valid, the pool does not
    bad_plan = replace(pool.plans[0], placements=tuple(
        Placement(p.buffer_id, 1024) if p.buffer_id == 1 else p for p in pool.plans[0].placements))
    assert validate_plan(a, bad_plan).valid
    report = check_pool([a, b], replace(pool, plans=(bad_plan, pool.plans[1])))
    assert not report.valid and report.rule == "shared"
    assert set(report.buffers) == {(0, 1), (1, 0)}


def test_check_pool_runs_the_validator_per_model():
    a, b = _two_models()
    pool = plan_shared([a, b])
    bad_plan = replace(pool.plans[0], placements=tuple(
        Placement(p.buffer_id, 0) if p.buffer_id == 2 else p
        for p in pool.plans[0].placements))
    report = check_pool([a, b], replace(pool, plans=(bad_plan, pool.plans[1])))
    assert not report.valid and report.rule == "overlap" and "model 0" in report.message


def test_bad_parameters_are_typed_errors():
    with pytest.raises(SolverError, match="alignment"):
        BlockParams(alignment=0)
    with pytest.raises(SolverError, match="steps_per_octave"):
        BlockParams(steps_per_octave=0)
    with pytest.raises(SolverError, match="gap_bytes"):
        BlockParams(gap_bytes=-1)
    with pytest.raises(SolverError, match="at least one trace"):
        plan_shared([])


@pytest.mark.parametrize("concurrent", [False, True])
def test_inference_traces_meet_the_target_and_validate(concurrent):
    traces = [load_trace(p) for p in INFER]
    assert len(traces) == 3
    pool = plan_shared(traces, BlockParams(concurrent=concurrent))
    assert check_pool(traces, pool).valid
    if not concurrent:
        assert pool.floor_bytes <= pool.arena_bytes <= pool.target_bytes
        assert pool.arena_bytes < pool.sum_peak_bytes
    for m in pool.models:
        assert m.temporary_bytes >= m.temporary_peak_bytes
        assert m.temporary_bytes == min(m.slot_layout_bytes, m.offsets_layout_bytes)
        assert m.slot_layout_bytes <= m.slot_bytes


def test_one_model_twice_is_two_replicas():
    trace = load_trace(INFER[0])
    pool = plan_shared([trace, trace])
    assert check_pool([trace, trace], pool).valid
    m = pool.models[0]
    assert pool.arena_bytes == 2 * m.persistent_region_bytes + m.temporary_bytes


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main([str(a) for a in argv], out, err)
    return code, out.getvalue(), err.getvalue()


def test_cli_plans_several_traces_with_blocks_and_writes_one_plan_per_model(tmp_path):
    code, out, err = cli("plan", *INFER, "--solver", "blocks", "--json", "--out", tmp_path)
    assert code == 0 and err == ""
    document = json.loads(out)
    assert set(document) >= {"trace", "solver", "buffers", "arena_bytes", "lower_bound_bytes",
                             "ratio", "solve_seconds", "valid"}
    assert document["ratio"] == round(document["arena_bytes"] / document["lower_bound_bytes"], 6)
    assert document["valid"] and document["within_target"] and document["models"] == 3
    assert len(document["per_model"]) == 3 and len(document["out"]) == 3
    assert document["arena_bytes"] <= document["target_bytes"]
    for path, trace_path in zip(document["out"], INFER, strict=True):
        assert load_plan(path).arena_bytes == document["arena_bytes"]
        assert cli("validate", trace_path, path)[0] == 0


def test_cli_blocks_budget_below_the_pool_exits_1():
    code, out, _ = cli("plan", *INFER, "--solver", "blocks", "--json", "--budget", "50%")
    assert code == 1 and json.loads(out)["fits"] is False


def test_cli_several_traces_need_blocks():
    code, out, err = cli("plan", INFER[0], INFER[1], "--solver", "greedy-size")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "--solver blocks" in err and "got 2" in err


def test_cli_blocks_out_must_be_a_directory(tmp_path):
    code, _out, err = cli("plan", INFER[0], "--solver", "blocks", "--out", tmp_path / "x.json")
    assert code == 2 and "existing directory" in err


def test_cli_single_trace_other_solvers_unchanged():
    code, out, _ = cli("plan", INFER[0], "--solver", "greedy-size", "--json")
    document = json.loads(out)
    assert code == 0 and document["trace"] == load_trace(INFER[0]).name
    assert document["valid"] and "per_model" not in document


def test_cli_blocks_with_a_missing_trace_is_bad_input(tmp_path):
    code, out, err = cli("plan", INFER[0], tmp_path / "absent.json", "--solver", "blocks")
    assert code == 2 and out == "" and err.count("\n") == 1 and "absent.json" in err


@st.composite
def _models(draw):
    traces = []
    for m in range(draw(st.integers(1, 3))):
        n = draw(st.integers(2, 8))
        buffers = []
        for i in range(draw(st.integers(1, 8))):
            start = draw(st.integers(0, n - 1))
            end = draw(st.integers(start + 1, n))
            persistent = draw(st.booleans())
            buffers.append(Buffer(i, draw(st.integers(1, 5000)), 0 if persistent else start,
                                  n if persistent else end, (), PERSISTENT if persistent
                                  else "temporary"))
        traces.append(_trace(f"m{m}", buffers, n))
    return traces


@settings(max_examples=30, deadline=None)
@given(_models(), st.booleans(), st.integers(0, 1000))
def test_random_models_give_valid_pools_within_the_target(traces, concurrent, gap):
    pool = plan_shared(traces, BlockParams(concurrent=concurrent, gap_bytes=gap))
    assert check_pool(traces, pool).valid
    if not concurrent:
        assert pool.arena_bytes >= pool.floor_bytes


def test_cli_blocks_alignment_for_abstract_units():
    from tests.conftest import DSA

    example = DSA / "example.12.csv"
    code, out, _ = cli("plan", example, example, "--solver", "blocks", "--alignment", 1,
                       "--json")
    document = json.loads(out)
    assert code == 0 and document["valid"] and document["arena_bytes"] == 12
    assert document["sum_peak_bytes"] == 24 and document["within_target"]
