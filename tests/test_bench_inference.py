"""The inference and LSTM parts of the benchmarks: which traces ``bench/swap.py`` plans, how
a cell is judged and counted, the stored inference captures and their regeneration, and the
helpers of ``bench/replay_inference.py``. No benchmark is run."""

from __future__ import annotations

import pytest

from cupool.core.vocabulary import PERSISTENT
from cupool.io import load_trace
from tests.bench_modules import load_bench

swap = load_bench("swap")
capture_inference = load_bench("capture_inference")
replay_inference = load_bench("replay_inference")
report = load_bench("report")


def test_swap_plans_every_model_at_batch_1_and_8_once_from_the_captures_with_writes():
    traces = swap.bench_traces(("infer",))
    names = [t.name for t in traces]
    expected = {f"{model}_infer_b{batch}"
                for model in ("resnet50", "mobilenetv2", "gpt2", "bert-base", "vit-b16",
                              "llama") for batch in (1, 8)}
    assert set(names) == expected and len(names) == len(expected)
    assert all(t.path.parent == swap.CAPTURED for t in traces)
    assert all(t.kind == "infer" and t.path.exists() for t in traces)


def test_swap_trace_kinds_order_and_filter():
    kinds = [t.kind for t in swap.bench_traces()]
    assert kinds == sorted(kinds, key=swap.KINDS.index)
    assert kinds.count("train") == 5 and kinds.count("lstm") == 1
    (lstm,) = swap.bench_traces(("lstm",), lstm="full")
    assert lstm.name == "lstm_s250_l4_h1024"
    only = swap.bench_traces(only=["gpt2_infer", "lstm"])
    assert [t.name for t in only] == ["gpt2_infer_b1", "gpt2_infer_b8", "lstm_s100_l2_h512"]


def test_small_lstm_keeps_the_weights_share_of_the_full_one():
    """The default LSTM is smaller but as weight-heavy as the full one, within 10 points."""
    def share(shape):
        trace = swap.BenchTrace(shape.name, "lstm", lstm=shape).load()
        persistent = sum(b.size for b in trace.buffers if b.kind == PERSISTENT)
        return persistent / trace.lower_bound_bytes(), len(trace.buffers)

    small, small_buffers = share(swap.LSTM_SHAPES["small"])
    full, full_buffers = share(swap.LSTM_SHAPES["full"])
    assert small_buffers == 2816 and full_buffers == 13024
    assert abs(small - full) < 0.10


def _row(bound, overhead, valid=True, trace="t", fraction=0.7, kind="infer"):
    auto = {"status": "feasible", "valid": valid}
    if overhead is not None:
        auto["overhead"] = overhead
    row = {"trace": trace, "kind": kind, "fraction": fraction, "link": "gen5",
           "bound": bound, "policies": {policy: dict(auto) for policy in swap.POLICIES}}
    row.update(swap.judge(row))
    return row


def test_a_cell_meets_the_target_at_twice_the_bound_plus_five_points():
    assert _row(0.10, 0.25)["target_met"] is True
    assert _row(0.10, 0.2501)["target_met"] is False
    assert _row(0.10, 0.13)["moonshot_met"] is True
    assert _row(0.10, 0.1301)["moonshot_met"] is False
    infeasible = _row(None, None, valid=False)
    assert (infeasible["target_met"], infeasible["moonshot_met"]) == (None, None)
    no_plan = _row(0.10, None, valid=False)
    assert (no_plan["validated"], no_plan["target_met"]) == (False, False)


def test_totals_and_medians_leave_infeasible_cells_out():
    rows = [_row(0.10, 0.20, trace="a"), _row(0.10, 0.40, trace="b"),
            _row(0.10, None, valid=False, trace="c"), _row(None, None, valid=False, trace="d")]
    totals = swap.targets(rows)
    assert totals["cells"] == 4 and totals["bound_feasible"] == 3
    assert totals["without_validated_plan"] == ["c 70% gen5"]
    assert totals["target_misses"] == ["b 70% gen5", "c 70% gen5"]
    (entry,) = swap.summarize(rows)
    assert (entry["kind"], entry["traces"], entry["infeasible"]) == ("infer", 3, 1)
    assert entry["auto"] is None and entry["auto_found"] == 2
    assert entry["auto_meets_target"] == 1
    (both,) = swap.summarize(rows[:2])
    assert both["auto"] == pytest.approx(0.30)


def test_report_names_the_kind_of_each_swap_cell():
    rows = [_row(0.10, 0.20, trace="a"), _row(0.05, 0.06, trace="b", kind="train")]
    lines = report.headline_swap({"summary": swap.summarize(rows)})
    assert len(lines) == 2
    assert "over the training traces" in lines[0] and "over the inference traces" in lines[1]
    assert report._kind_prefix(rows[0]) == "infer " and report._kind_prefix(rows[1]) == ""


def test_stored_inference_traces_read_back_and_match_their_table():
    readme = (capture_inference.OUT_DIR / "README.md").read_text()
    paths = sorted(capture_inference.OUT_DIR.glob("*.trace.json.gz"))
    assert len(paths) == 12
    for path in paths:
        trace = load_trace(path)
        assert trace.name == path.name.split(".")[0]
        assert f"| {path.name} | {trace.num_ops} | {len(trace.buffers)} | " \
               f"{trace.lower_bound_bytes()} |" in readme


def test_capture_writes_the_same_bytes_twice_and_the_stored_buffers(tmp_path):
    pytest.importorskip("torch")
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    first = capture_inference.capture_one("mobilenetv2", 1, tmp_path / "a")
    capture_inference.capture_one("mobilenetv2", 1, tmp_path / "b")
    name = first.file
    assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    fresh = load_trace(tmp_path / "a" / name)
    stored = load_trace(capture_inference.OUT_DIR / name)
    assert [(b.size, b.start, b.end, b.uses, b.kind) for b in fresh.buffers] == \
        [(b.size, b.start, b.end, b.uses, b.kind) for b in stored.buffers]
    assert first.lower_bound_bytes == stored.lower_bound_bytes()


def test_replay_settles_from_the_first_iteration_at_the_floor_for_good():
    settled = replay_inference._first_settled
    assert settled([4, 2, 1, 1], 1) == 3
    assert settled([0, 0, 0, 4], 0) is None
    assert settled([0, 0], 0) == 1
    assert settled([5, 0, 3, 0], 0) == 4


def test_replay_stretches_short_passes_to_the_minimum_wall_time():
    trace = load_trace(swap.TRACES / "mobilenetv2_infer_b1.trace.json.gz")
    scale = replay_inference.time_scale_for(trace, "gen5")
    ideal = sum(swap.cost_model("gen5").op_times(trace))
    assert scale > replay_inference.TIME_SCALE
    assert scale * ideal == pytest.approx(replay_inference.MIN_IDEAL_WALL_US)
    long_pass = load_trace(capture_inference.OUT_DIR / "gpt2_infer_b8.trace.json.gz")
    assert replay_inference.time_scale_for(long_pass, "gen5") == replay_inference.TIME_SCALE


swap_diagnose = load_bench("swap_diagnose")


def test_diagnosis_takes_the_misses_of_the_chosen_kinds():
    rows = [_row(0.10, 0.20, trace="met"), _row(0.10, 0.40, trace="missed"),
            _row(0.10, None, valid=False, trace="no_plan"),
            _row(None, None, valid=False, trace="infeasible"),
            _row(0.10, 0.40, trace="training", kind="train")]
    picked = swap_diagnose.misses({"rows": rows}, ["infer"])
    assert [r["trace"] for r in picked] == ["missed", "no_plan"]
    assert [r["trace"] for r in swap_diagnose.misses({"rows": rows}, ["infer", "train"],
                                                     only=["train"])] == ["training"]


def test_diagnosis_splits_copies_by_direction_and_kind_and_finds_the_waits():
    from types import SimpleNamespace

    from cupool.core.vocabulary import Buffer, Op, Trace

    trace = Trace(name="toy", ops=tuple(Op(f"op{i}") for i in range(3)),
                  buffers=(Buffer(0, 64, 0, 3, uses=(0, 2), kind=PERSISTENT),
                           Buffer(1, 32, 0, 2, uses=(0, 1))))
    # copies: (buffer, direction, bytes, enqueued, start, end); op 2 waits 5 us for buffer 0
    sim = SimpleNamespace(
        copies=((0, "d2h", 64, 1.0, 1.0, 3.0), (1, "d2h", 32, 1.0, 3.0, 4.0),
                (0, "h2d", 64, 4.0, 4.0, 12.0)),
        op_times=((0.0, 0.0, 1.0), (1.0, 1.0, 7.0), (7.0, 12.0, 13.0)))
    copied = swap_diagnose.copied_bytes(trace, sim)
    assert copied == {"h2d_persistent": 64, "h2d_temporary": 0, "d2h_persistent": 64,
                      "d2h_temporary": 32, "h2d_busy_us": 8.0, "d2h_busy_us": 3.0}
    assert swap_diagnose.waits(trace, sim) == [
        {"op": 2, "name": "op2", "wait_us": 5.0, "h2d_landed": 1, "h2d_landed_bytes": 64}]


def test_cell_verdicts_are_json_booleans_with_numpy_overheads():
    import json

    import numpy as np

    row = _row(np.float64(0.10), np.float64(0.40))
    assert json.loads(json.dumps({k: row[k] for k in ("target_met", "moonshot_met")},
                                 default=str)) == {"target_met": False, "moonshot_met": False}
