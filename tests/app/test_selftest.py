"""``cupool selftest``: the harness runs on the emulated device; ``--device cuda`` without a
GPU exits 2 with one line; every piece of arithmetic is checked on hand-made numbers."""

from __future__ import annotations

import io
import json
import math
import textwrap

import pytest

from cupool.app.selftest import SelftestOptions, run_selftest, runners
from cupool.app.selftest.allocators import ALLOCATE, FREE, allocation_loop, compare_pools
from cupool.app.selftest.link import (
    DirectionMeasurement,
    LineFit,
    compare_with_presets,
    fit_line,
    measure_link,
)
from cupool.app.selftest.ops import TimedOp, compare_op_times, roofline_calibration
from cupool.app.selftest.steps import junit_counts, replay_step, run_test_suite
from cupool.app.stress import training_trace
from cupool.cli import main
from cupool.core.vocabulary import Op
from cupool.devices import open_device, probe_cuda
from cupool.errors import InputError
from tests.swap_cases import six_op_trace

NO_GPU = not probe_cuda()[0]


def test_fit_line_recovers_bandwidth_and_latency_exactly():
    sizes = [1_000, 1_000_000, 10_000_000]
    times = [4.0 + n / 50_000.0 for n in sizes]  # 4 µs + n / (50 GB/s)
    fit = fit_line(sizes, times)
    assert math.isclose(fit.gbps, 50.0) and math.isclose(fit.latency_us, 4.0)
    assert fit.residual_us < 1e-6
    with pytest.raises(InputError, match="does not grow with size"):
        fit_line([1, 2, 3], [5.0, 4.0, 3.0])
    with pytest.raises(InputError, match="distinct sizes"):
        fit_line([8, 8], [1.0, 2.0])


def _measured(gbps: float, latency_us: float) -> DirectionMeasurement:
    return DirectionMeasurement("h2d", (1, 2), (1.0, 2.0), LineFit(gbps, latency_us, 0.0), gbps)


def test_the_nearest_preset_and_whether_it_is_off():
    close = compare_with_presets({"h2d": _measured(52.0, 3.2), "d2h": _measured(53.0, 2.9)})
    assert close["nearest_preset"] == "gen5" and not close["calibration_needed"]
    assert math.isclose(close["directions"]["h2d"]["gbps_difference"], 52.0 / 55.0 - 1)
    slow = compare_with_presets({"h2d": _measured(20.0, 3.0), "d2h": _measured(24.0, 3.0)})
    assert slow["nearest_preset"] == "gen4"
    assert slow["directions"]["h2d"]["preset_off"] and not slow["directions"]["d2h"]["preset_off"]
    late = compare_with_presets({"h2d": _measured(55.0, 9.0)})
    assert late["directions"]["h2d"]["preset_off"] and late["calibration_needed"]


def test_link_measurement_on_a_paced_emulated_device_returns_its_memory():
    # 2 MB/s: a 16 KiB copy takes 8 ms, far above any thread wake-up jitter
    with open_device("emulated", capacity="8MiB", h2d_gbps=0.002, d2h_gbps=0.002) as device:
        before = device.stats()
        measured = measure_link(device, sizes=(4 << 10, 64 << 10, 256 << 10), scale=16,
                                repeats=1, max_copies=4)
        after = device.stats()
    assert set(measured) == {"h2d", "d2h"}
    for m in measured.values():
        assert m.sizes == (4 << 10, 64 << 10, 256 << 10)  # reported at trace scale
        assert m.fit.gbps > 0 and math.isfinite(m.fit.latency_us)
    assert after["reserved_bytes.current"] == before["reserved_bytes.current"]
    assert after["pinned_bytes.current"] == before["pinned_bytes.current"]
    # per direction and size: one warm-up copy and 4 timed ones
    assert after["copy_count.h2d"] - before["copy_count.h2d"] == 3 * 5
    with pytest.raises(InputError, match="scale"):
        measure_link(device, scale=0)


def test_the_allocation_loop_frees_before_it_allocates_at_each_op():
    trace = six_op_trace()
    loop = allocation_loop(trace)
    assert loop.persistent_sizes == (8,)
    # buffer 1 [0, 5), buffer 2 [1, 3): allocations at their start, frees at their end
    assert loop.events == ((ALLOCATE, 1, 16), (ALLOCATE, 2, 16), (FREE, 2, 0), (FREE, 1, 0))
    assert loop.allocations == 2


def test_pool_comparison_on_the_emulated_device_serves_from_the_plan():
    trace = training_trace(3)
    with open_device("emulated", capacity="64MiB") as device:
        row = compare_pools(trace, device, rounds=2, warmup=1)
        assert device.stats()["reserved_bytes.current"] == 0
    temporaries = sum(1 for b in trace.buffers if b.kind != "persistent")
    assert row["allocations"] == temporaries
    assert row["planned_hits"] == temporaries * 3  # two timed rounds and one warm-up
    assert row["fallback_allocations"] == 0
    assert row["planned_reserved_bytes"] >= trace.lower_bound_bytes()
    assert row["cupy_us"] is None and row["cupy_reserved_bytes"] is None  # needs a GPU
    assert row["cupy_model_reserved_bytes"] >= trace.lower_bound_bytes()


def test_op_times_are_compared_over_the_ops_matched_by_name():
    estimated = [Op("aten.mm.default", 10.0), Op("aten.relu.default", 2.0),
                 Op("aten.cpu_only.default", 5.0), Op("aten.add.Tensor", 1.0)]
    measured = [TimedOp("aten.mm.default", 20.0), TimedOp("aten.relu.default", 2.0),
                TimedOp("aten.gpu_only.default", 7.0), TimedOp("aten.add.Tensor", 4.0)]
    result = compare_op_times(estimated, measured)
    assert result["matched_ops"] == 3
    assert result["estimated_total_us"] == 18.0 and result["measured_total_us"] == 33.0
    assert result["median_ratio"] == 2.0  # ratios 2, 1, 4
    assert result["largest_differences"][0] == {"name": "aten.mm.default",
                                                "estimated_us": 10.0, "measured_us": 20.0}


def test_roofline_calibration_recovers_efficiency_and_launch_overhead():
    # measured = 5 µs + estimated / 0.5
    pairs = [(estimated, 5.0 + estimated / 0.5) for estimated in (1.0, 10.0, 100.0)]
    calibration = roofline_calibration(pairs)
    assert math.isclose(calibration["efficiency"], 0.5)
    assert math.isclose(calibration["launch_overhead_us"], 5.0)
    assert calibration["ops"] == 3
    # faster than the roofline: efficiency clamped to 1; a negative intercept to 0
    fast = roofline_calibration([(10.0, 4.0), (20.0, 9.0)])
    assert fast["efficiency"] == 1.0 and fast["launch_overhead_us"] == 0.0
    assert roofline_calibration([(3.0, 4.0), (3.0, 5.0)]) is None


def test_a_real_model_step_is_timed_op_by_op_on_the_cpu():
    pytest.importorskip("torch")
    from cupool.app.selftest.ops import measure_model

    result = measure_model("resnet50", "train", 2, device="cpu", small=True)
    assert result["measured_ops"] == result["estimated_ops"] > 0
    assert result["matched_ops"] == result["measured_ops"]
    assert result["measured_total_us"] > 0


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.gpu.a" name="test_ok"/>
<testcase classname="tests.gpu.a" name="test_bad"><failure message="x"/></testcase>
<testcase classname="tests.gpu.a" name="test_skip">
  <skipped message="needs a usable GPU: no"/></testcase>
<testcase classname="tests.gpu.b" name="test_broken"><error message="y"/></testcase>
</testsuite></testsuites>"""


def test_junit_counts(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    counts = junit_counts(path)
    assert {k: counts[k] for k in ("tests", "passed", "failed", "errors", "skipped")} == {
        "tests": 4, "passed": 1, "failed": 1, "errors": 1, "skipped": 1}
    assert counts["failures"] == ["tests.gpu.a::test_bad", "tests.gpu.b::test_broken"]
    assert counts["skip_reasons"] == {"needs a usable GPU: no": 1}


def test_the_test_suite_runs_in_a_child_process_and_counts(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_marked.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.mark.gpu
        def test_passes():
            assert True

        @pytest.mark.gpu
        def test_fails():
            assert 1 == 2

        @pytest.mark.gpu
        def test_skips():
            pytest.skip("opt-in")

        def test_unmarked_is_not_run():
            raise AssertionError("deselected")
    """))
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs a GPU\n")
    result = run_test_suite(tests, timeout_s=120)
    assert result["ran"] and not result["timed_out"]
    assert (result["passed"], result["failed"], result["skipped"]) == (1, 1, 1)
    assert result["failures"] == ["tests.test_marked::test_fails"]
    assert run_test_suite(tmp_path / "absent")["ran"] is False


def test_replay_step_measures_steady_iterations_against_the_simulator():
    row = replay_step(training_trace(1), "50%", "emulated", iterations=3)
    assert len(row["iteration_us"]) == 3 and row["corrupt_bytes"] == 0
    assert row["bytes_checked"] > 0
    assert math.isclose(row["steady_us"], row["iteration_us"][2])
    assert math.isclose(row["steady_over_sim"], row["steady_us"] / row["sim_iteration_us"])
    with pytest.raises(InputError, match="iterations"):
        replay_step(training_trace(1), "50%", "emulated", iterations=2)


@pytest.mark.skipif(not NO_GPU, reason="checks the answer where no GPU is present")
def test_selftest_on_cuda_without_a_gpu_exits_2_with_one_line(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    assert main(["selftest", "--out", str(tmp_path)], out, err) == 2
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and "needs a usable GPU" in lines[0]
    assert out.getvalue() == "" and not any(tmp_path.iterdir())


def test_selftest_on_the_emulated_device_writes_both_files(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    code = main(["selftest", "--device", "emulated", "--out", str(tmp_path), "--steps",
                 "environment,link,gpu_tests", "--json"], out, err)
    assert code == 0, err.getvalue()
    document = json.loads(out.getvalue())
    assert document["passed"] and document["device"] == "emulated"
    steps = document["steps"]
    assert [steps[name]["status"] for name in ("environment", "link", "gpu_tests")] == [
        "pass", "pass", "not_run"]
    assert steps["environment"]["result"]["device_kind"] == "emulated"
    assert json.loads((tmp_path / "selftest_emulated.json").read_text()) == document
    markdown = (tmp_path / "selftest_emulated.md").read_text()
    assert markdown.startswith("# cupool selftest on emulated: PASS")
    assert "## link: pass" in markdown and "h2d link within 10%" in markdown


def test_a_step_that_breaks_is_recorded_and_the_next_step_runs(tmp_path, monkeypatch):
    def broken(context):
        raise RuntimeError("the step\nbroke")

    monkeypatch.setitem(runners.RUNNERS, "link", broken)
    report = run_selftest(SelftestOptions(device="emulated", out_dir=tmp_path,
                                          steps=("link", "gpu_tests")))
    assert [(s.name, s.status) for s in report.steps] == [("link", "error"),
                                                          ("gpu_tests", "not_run")]
    assert report.steps[0].message == "RuntimeError: the step broke"
    assert not report.passed
    saved = json.loads((tmp_path / "selftest_emulated.json").read_text())
    assert saved["steps"]["link"]["status"] == "error" and saved["passed"] is False


@pytest.mark.parametrize(("argv", "words"), [
    (["--steps", "environment,warp"], "must be a non-empty subset"),
    (["--steps", " , "], "names nothing"),
    (["--replay-traces", "no_such_trace", "--steps", "replay"], None),
    (["--stress-minutes", "0"], "must be a number of minutes > 0"),
])
def test_bad_selftest_arguments(tmp_path, argv, words):
    out, err = io.StringIO(), io.StringIO()
    code = main(["selftest", "--device", "emulated", "--out", str(tmp_path), *argv], out, err)
    if words is None:  # a bad trace name breaks that step, recorded with the names bundled
        assert code == 1
        saved = json.loads((tmp_path / "selftest_emulated.json").read_text())
        assert "no bundled trace matches 'no_such_trace'" in saved["steps"]["replay"]["message"]
        return
    assert code == 2 and words in err.getvalue() and len(err.getvalue().splitlines()) == 1


def test_verdict_says_how_many_steps_ran():
    from cupool.app.selftest import STEP_NAMES, SelftestReport, StepRecord

    report = SelftestReport("cuda", "2026-01-01T00:00:00+00:00")
    report.steps = [StepRecord(name, "pass", 1.0) for name in STEP_NAMES]
    assert report.verdict == "PASS"
    report.steps[5] = StepRecord(STEP_NAMES[5], "not_run", 0.0, message="why")
    assert report.verdict == f"PASS ({len(STEP_NAMES) - 1} of {len(STEP_NAMES)} steps run)"
    report.steps = [*report.steps[:2], StepRecord("replay", "fail", 1.0)]
    assert report.verdict == f"FAIL (3 of {len(STEP_NAMES)} steps run)"
    assert report.document()["verdict"] == report.verdict


def test_the_programs_step_trains_the_examples_bitwise_as_without_cupool(tmp_path):
    report = run_selftest(SelftestOptions(device="emulated", out_dir=tmp_path,
                                          steps=("programs",), replay_budgets=("50%",),
                                          program_steps=3))
    [step] = report.steps
    assert step.status == "pass", step.message
    assert [(r["example"], r["budget"]) for r in step.result] == [("mlp_sgd", "50%"),
                                                                  ("gpt_decoder", "50%")]
    for row in step.result:
        assert row["params_identical"] and row["losses_identical"] and row["within_budget"]
        assert row["modes"] == ["passive", "planned", "planned"]
    markdown = (tmp_path / "selftest_emulated.md").read_text()
    assert "## programs: pass" in markdown and "| mlp_sgd | 50% | p p p |" in markdown
