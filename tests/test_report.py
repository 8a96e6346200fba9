"""The benchmark report: rendered offline from JSON, no benchmark is run."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from tests.bench_modules import BENCH, load_bench

report = load_bench("report")
run_all = load_bench("run_all")


def _static_row(family, instance, solver, ratio, seconds, target="", mm=None, fits=True):
    return {"family": family, "instance": instance, "buffers": 12, "solver": solver,
            "status": "optimal", "arena_bytes": 100, "lower_bound_bytes": 100,
            "capacity_bytes": None, "ratio": ratio, "fits": fits, "seconds": seconds,
            "time_limit_s": None, "valid": True, "minimalloc_seconds": mm, "target": target}


STATIC = {"benchmark": "static", "quick": False,
          "machine": {"python": "3.0.1", "cpus": 7},
          "rows": [
              _static_row("trace", "toy_train", "greedy-size", 1.125, 0.25),
              _static_row("trace", "toy_train", "auto", 1.0, 0.5, "met", 2.5),
              _static_row("dsa", "challenging-Z", "exact", 0.9375, 1.75, "MISSED", 0.125,
                          fits=False),
          ]}
POOL = {"benchmark": "pool", "iterations": 3, "warmup": 1,
        "machine": {"python": "3.0.1", "cpus": 7, "cupy": "9.9.9"},
        "rows": [{"trace": "toy_train", "allocations": 321,
                  "us_per_alloc": {"planned": 4.25, "record": 9.5, "floor": 3.75},
                  "planned_over_floor": 1.1875, "planned_ratio": 1.0625, "cupy_ratio": 1.5,
                  "torch_ratio": 1.25, "rss_bytes": 3 * 2**20,
                  "targets_met": {"overhead<=1.5x_floor": True, "ratio<=1.01": False}}]}
SWAP = {"rows": [{"trace": "toy_train", "fraction": 0.7, "link": "gen5", "budget_bytes": 777,
                  "bound": 0.125, "policies": {
                      "auto": {"status": "feasible", "overhead": 0.25, "member": "greedy(x)"},
                      "vdnn": {"status": "over_capacity"}}}],
        "summary": [{"fraction": 0.7, "link": "gen5", "traces": 1, "auto": 0.25,
                     "auto_found": 1, "vdnn": None, "vdnn_found": 0, "bound": 0.125,
                     "auto_meets_target": 1}]}
REPLAY = {"trace": "toy_train", "budget": "70%", "policy": "auto", "budget_bytes": 555,
          "link_gbps": 55.0, "size_scale": 8, "time_scale": 2.0, "iterations": 2,
          "mean_iteration_us": 150.5, "iteration_us": [100.25, 200.75],
          "sim_iteration_us": 140.0, "late_prefetches": [0, 1], "stall_us": [0.0, 1.5],
          "feedback_moves": [0, 0], "sim_late_floor": 0, "peak_device_bytes": 999,
          "bytes_checked": 4096, "corrupt_bytes": 0, "replay_over_sim": 1.075,
          "use_median_us": 6.5,
          "mistimed": {"policy": "capuchin", "sim_iteration_us": 250.0, "corrupt_bytes": 0,
                       "runs": [{"seed": 0, "late_prefetches": [9, 8, 7, 6],
                                 "stall_us": [1.0], "feedback_moves": [3, 0],
                                 "sim_late_floor": 2, "iteration_us": [300.0],
                                 "corrupt_bytes": 0},
                                {"seed": 1, "late_prefetches": [9, 4, 2, 3],
                                 "stall_us": [1.0], "feedback_moves": [3, 0],
                                 "sim_late_floor": 2, "iteration_us": [300.0],
                                 "corrupt_bytes": 0}]}}



def _two_level(overhead, iteration_us):
    return {"status": "feasible", "seconds": 0.5, "valid": True, "overhead": overhead,
            "iteration_us": iteration_us, "swapped_bytes": 64}


def _tiers(overhead, iteration_us, not_worse=True, valid=True, **extra):
    return {"valid": valid, "error": None, "overhead": overhead, "iteration_us": iteration_us,
            "swapped_bytes": 64, "seconds": 2.25, "moves_accepted": {"level": 3, "cancel": 2},
            "evaluations": 77, "pinned_peak_bytes": 32, "pageable_swaps": 0,
            "not_worse": not_worse, **extra}


MULTILEVEL = {
    "link": "gen5", "search_seconds": 30.0, "search_evaluations": 120,
    "pageable": {"fraction_of_pinned": 0.5, "latency_us": 10.0},
    "rows": [
        {"trace": "toy_train", "fraction": 0.7, "budget_bytes": 700,
         "capuchin": _two_level(0.25, 125.0), "auto": _two_level(0.125, 112.5),
         "best_two_level": "auto", "tiers": _tiers(0.0625, 106.25),
         "pinned_limited": {"pinned_host_bytes": 16, "repaired_overhead": 0.5,
                            "repaired_valid": True, **_tiers(0.375, 137.5)}},
        {"trace": "toy_train", "fraction": 0.5, "budget_bytes": 500,
         "capuchin": {"status": "over_capacity", "seconds": 0.5, "reason": "op 3"},
         "auto": _two_level(0.75, 175.0), "best_two_level": "auto",
         "tiers": _tiers(0.75, 175.0), "pinned_limited": None},
        {"trace": "other_train", "fraction": 0.5, "budget_bytes": 9,
         "capuchin": {"status": "over_capacity", "seconds": 0.5, "reason": "op 1"},
         "auto": {"status": "over_capacity", "seconds": 0.5, "reason": "op 1"},
         "tiers": None},
    ]}


def _blocks_row(models, sum_peak, target, floor, pool, within=True):
    return {"models": models, "n": len(models), "sum_peak_bytes": sum_peak,
            "target_bytes": target, "floor_bytes": floor, "pool_bytes": pool,
            "ratio_to_sum_of_peaks": pool / sum_peak, "within_target": within, "valid": True,
            "invalid_reason": None, "concurrent_pool_bytes": sum_peak + 1,
            "concurrent_valid": True, "layouts": ["offsets"] * len(models),
            "blocks": [3] * len(models), "slot_layout_bytes": [1] * len(models),
            "offsets_layout_bytes": [1] * len(models), "solve_seconds": 0.125}


BLOCKS = {"rows": [_blocks_row(["a_infer"], 1000, 1500, 1000, 1024),
                   _blocks_row(["a_infer", "b_infer"], 2000, 1200, 1200, 1250, within=False)],
          "params": {"alignment": 512, "offset_solvers": ["greedy-size", "best-fit"]}}


def _sharing_row(jobs, scenario, persistent, moved, switch_us, naive_bytes=1.0):
    return {"scenario": scenario, "jobs": jobs, "capacity_bytes": 4096 * jobs,
            "switches": 5, "evictions": 0 if scenario == "fit" else 6,
            "persistent_bytes_per_switch": persistent, "bytes_moved_per_switch": moved,
            "temporary_bytes_zeroed_per_switch": 333.5, "broker_switch_us_median": switch_us,
            "broker_switch_us_max": 2 * switch_us, "client_handoff_us_median": 44.0,
            "persistent_corrupt_bytes": 0, "temporary_dirty_bytes": 0,
            "bytes_checked": 10, "wall_seconds": 1.0, "bytes_vs_naive": naive_bytes,
            "switch_time_vs_naive": switch_us / 800.0}


SHARING = {"benchmark": "sharing", "scale": 16, "iterations": 10, "evict_fraction": 0.6,
           "jobs": {"a_infer#0": {"persistent_bytes": 111, "temporary_bytes": 222}},
           "rows": [_sharing_row(2, "fit", 0.0, 0.0, 100.0, 0.0),
                    _sharing_row(2, "naive", 700.0, 1700.25, 800.0)],
           "targets": {"persistent_bytes_per_switch_when_fitting_is_zero": True,
                       "no_corrupt_or_dirty_bytes": False}}
STRESS = {"command": "cupool stress --device emulated --minutes 2 --seed 0 --json",
          "exit_code": 0, "target_met": True,
          "result": {"device": "emulated", "seconds": 121.5, "scenarios": 83,
                     "bytes_checked": 987654321, "corrupt_bytes": 0, "leaked_blocks": 0,
                     "late_prefetches": 138, "errors": 0}}


def _capture_row(trace, lower_bound, same=True):
    compared = {"lower_bound_bytes": lower_bound if same else lower_bound - 4,
                "lower_bound_equal": same, "buffers": 12, "persistent_bytes": 40,
                "ops_equal": True, "buffers_identical": same, "op_time_ms": 1.0,
                "first_difference": "" if same else "buffer 7 (x): bundled [0, 5)"}
    lifted = None if same else {**compared, "lower_bound_bytes": lower_bound,
                                "lower_bound_equal": True, "buffers_identical": True,
                                "first_difference": ""}
    return {"trace": trace, "model": "toy", "mode": "train", "batch": 4, "amp": not same,
            "bundled_lower_bound_bytes": lower_bound, "bundled_buffers": 12,
            "bundled_persistent_bytes": 40, "bundled_op_time_ms": 1.0, **compared,
            "lifted_from_start": lifted, "seconds": 1.5}


CAPTURE_BUNDLED = {"rows": [_capture_row("toy_train_b4", 4096),
                            _capture_row("big_train_b4", 8192, same=False)],
                   "torch": "9.9.9", "python": "3.0.1"}

JSON_DOCS = {"static.json": STATIC, "pool.json": POOL, "swap.json": SWAP,
             "replay.json": REPLAY, "multilevel.json": MULTILEVEL, "blocks.json": BLOCKS,
             "sharing.json": SHARING, "stress.json": STRESS, "capture.json": CAPTURE_BUNDLED}


@pytest.fixture
def results(tmp_path):
    for file, doc in JSON_DOCS.items():
        (tmp_path / file).write_text(json.dumps(doc))
    return tmp_path


def _table_rows(text: str, first_header: str) -> list[list[str]]:
    """Cells of the Markdown table whose header starts with ``| first_header |``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def _section(text: str, title_start: str) -> str:
    part = text.split(f"## {title_start}", 1)[1]
    return part.split("\n## ", 1)[0]


def test_static_table_has_exactly_the_json_numbers(results):
    text = _section(report.render(results), "Static")
    rows = _table_rows(text, "family")
    assert rows[0][:5] == ["trace", "toy_train", "12", "1.1250 (0.25 s)", "1.0000 (0.50 s)"]
    assert rows[0][5:] == ["", "2.5", "auto: met"]
    assert rows[1][:4] == ["dsa", "challenging-Z", "12", ""]
    assert rows[1][5:] == ["0.9375 (1.75 s)", "0.125", "exact: **MISSED**"]
    assert "**1 met, 1 missed**" in text


def test_pool_table_and_targets_come_from_the_json(results):
    text = _section(report.render(results), "Planned pool")
    (row,) = _table_rows(text, "trace")
    assert row == ["toy_train", "321", "4.25", "9.50", "3.75", "1.1875", "1.0625", "1.5000",
                   "1.2500", "3.0", "met", "**MISSED**"]
    assert "**1/2 met**" in text
    assert "3 timed rounds after 1 warm-up" in text


def test_swap_tables_show_medians_found_counts_and_statuses(results):
    text = _section(report.render(results), "Budget planners")
    (summary,) = _table_rows(text, "budget")
    assert summary == ["70%", "gen5", "1", "25.0%", "0/1 found", "12.5%", "1/1"]
    (case,) = _table_rows(text, "trace")
    assert case == ["toy_train", "70%", "gen5", "777", "12.5%", "25.0%", "over_capacity",
                    "greedy(x)"]


def test_loose_bound_cases_show_where_autos_time_goes():
    """Only the case whose auto overhead exceeds 1.5 × bound + 1 point gets a row, with the
    breakdown's numbers as fractions of the ideal time."""
    parts = {"ideal_us": 100.0, "recompute_us": 25.0, "stall_before_end_us": 12.5,
             "tail_us": 50.0, "peak_op": 7, "peak_working_set_bytes": 600,
             "d2h_busy_before_peak": 0.875, "h2d_busy_after_peak": 1.0}

    def row(trace, bound, overhead):
        return {"trace": trace, "fraction": 0.5, "link": "gen4", "budget_bytes": 800,
                "bound": bound, "policies": {"auto": {"overhead": overhead,
                                                      "breakdown": parts}}}

    text = "\n".join(report.loose_bound_part([row("tight", 0.5, 0.76), row("loose", 0.5, 0.875)]))
    assert _table_rows(text, "trace") == [["loose", "50%", "gen4", "50.0%", "87.5%", "25.0%",
                                           "12.5%", "50.0%", "7 (75.0%)", "87.5%", "100.0%"]]
    assert report.loose_bound_part([row("tight", 0.5, 0.76)]) == []


def test_replay_targets_are_checked_on_the_json_values(results):
    text = _section(report.render(results), "Swap runtime replay")
    checks = {r[0]: r for r in _table_rows(text, "what")}
    assert checks["replay / simulator iteration time"][1:] == ["1.0750", "<= 1.15", "met"]
    assert checks["`h.use()` median on a resident tensor (µs)"][1:] == [
        "6.50", "<= 5.0", "**MISSED**"]
    # seed 0 never reaches its floor of 2; seed 1 does in its third iteration
    late = checks["mis-timed plan: seeded runs at the simulator's floor"]
    assert late[1] == "1 of 2" and late[3] == "**MISSED**"
    runs = _table_rows(text, "seed")
    assert [(r[0], r[1], r[2], r[-1]) for r in runs] == [
        ("0", "[9, 8, 7, 6]", "2", "**no**"), ("1", "[9, 4, 2, 3]", "2", "yes")]
    facts = dict((r[0], r[1]) for r in _table_rows(text, "measured"))
    assert facts["iteration µs (replay)"] == "100.25, 200.75"
    assert facts["bytes checked / corrupt"] == "4096 / 0"


def test_multilevel_table_counts_and_missing_plans(results):
    text = _section(report.render(results), "Multi-level placement")
    rows = _table_rows(text, "trace")
    assert rows[0] == ["toy_train", "70%", "700", "25.0%", "12.5%", "6.2%", "yes (auto)",
                       "valid", "5", "77", "2.25", "16", "50.0%", "37.5%", "0"]
    assert rows[1][:7] == ["toy_train", "50%", "500", "over_capacity", "75.0%", "75.0%",
                           "yes (auto)"]
    assert rows[1][11:] == ["no swaps", "", "", ""]
    assert rows[2][3:6] == ["over_capacity", "over_capacity", "no two-level plan"]
    assert "in **2/2** cases (strictly faster in 1)" in text
    assert "1 of 3 cases had no two-level plan" in text


def test_blocks_table_comes_from_the_json(results):
    text = _section(report.render(results), "Several models in one pool of blocks")
    rows = _table_rows(text, "N")
    assert rows[0] == ["1", "a_infer", "1000", "1500", "1000", "1024", "1.0240", "1.0240",
                       "yes", "valid", "1001 (valid)", "offsets", "0.12"]
    assert rows[1][:9] == ["2", "a_infer + b_infer", "2000", "1200", "1200", "1250", "0.6250",
                           "1.0417", "**no**"]
    assert "within the target in **1/2** sets" in text
    assert "`offset_solvers=greedy-size, best-fit`" in text


def test_sharing_table_targets_and_jobs(results):
    text = _section(report.render(results), "Time-shared device")
    fit, naive = _table_rows(text, "jobs")
    assert fit == ["2", "fit", "8192", "5", "0", "0", "0", "334", "100.00 / 200.00", "44.00",
                   "0.0000", "0.1250", "0 / 0"]
    assert naive[5:8] == ["700", "1700", "334"]
    assert "no corrupt or dirty bytes: **MISSED**" in text
    assert "persistent bytes per switch when fitting is zero: met;" in text
    assert _table_rows(text, "job") == [["a_infer#0", "111", "222"]]


def test_sharing_section_tolerates_missing_fields(tmp_path):
    (tmp_path / "sharing.json").write_text(json.dumps(
        {"rows": [{"jobs": 3, "scenario": "fit", "switches": 7}]}))
    text = report.render(tmp_path)
    (row,) = _table_rows(_section(text, "Time-shared device"), "jobs")
    assert row[:4] == ["3", "fit", "–", "7"] and row[8] == "– / –"
    assert "Targets as recorded in the JSON: none recorded." in text
    assert "at 3 jobs, bytes copied per switch – (fit) vs – (naive)" in text


def test_stress_table_and_target(results):
    text = _section(report.render(results), "Stress run")
    rows = {r[0]: r[1:] for r in _table_rows(text, "quantity")}
    assert rows["bytes checked"] == ["987654321", ""]
    assert rows["corrupt bytes"] == ["0", "0"] and rows["leaked blocks"] == ["0", "0"]
    assert rows["seconds"] == ["121.50", ""] and rows["scenarios"] == ["83", ""]
    assert "Target as recorded in the JSON: met." in text
    assert "`cupool stress --device emulated --minutes 2 --seed 0 --json`" in text


def test_capture_bundled_table_and_differences(results):
    text = _section(report.render(results), "Bundled traces re-captured")
    same, differs = _table_rows(text, "trace")
    assert same == ["toy_train_b4", "toy train b4", "4096", "4096", "12 / 12", "yes", "yes",
                    "yes", "yes", "", "1.50"]
    assert differs[:9] == ["big_train_b4", "toy train b4 amp", "8192", "8188", "12 / 12",
                           "yes", "yes", "**no**", "**no**"]
    assert differs[9] == "8192, identical yes"
    assert "**1/2** identical; 1 more identical with `lifted_from_start=True`; 0 differ" in text
    assert "- big_train_b4: buffer 7 (x): bundled [0, 5)" in text
    assert "torch 9.9.9" in text


def test_headline_block_quotes_the_json_with_commands(results):
    text = _section(report.render(results), "Headline numbers")
    assert "arena / lower bound 1.0000–1.0000 (1/1 exactly at the lower bound)" in text
    assert "Z 1.75 s vs 0.125 s" in text and "0/1 fit the capacity" in text
    assert "1.1875–1.1875" in text and "1.0625–1.0625" in text
    assert "70% gen5: 25.0% vs bound 12.5% (1/1 within target)" in text
    assert "corrupt bytes 0 of 4096 checked (mis-timed plan: 0)" in text
    assert ("never slower than the best two-level plan in 2/2, strictly faster in 1/2; "
            "median overhead 43.8% (best two-level) → 40.6% (`tiers`)") in text
    assert "(1 cases that swap), median 50.0% repaired → 37.5% searched" in text
    assert "pool / sum of the models' peaks 0.6250–1.0240 (2 models: 1250 vs 2000 bytes)" in text
    assert "within max(peak) + sum(persistent) in 1/2 sets" in text
    assert "at 2 jobs, bytes copied per switch 0 (fit) vs 1700 (naive)" in text
    assert "broker switch median 100.00 vs 800.00 µs; no corrupt or dirty byte: **MISSED**" in text
    assert "corrupt bytes 0 of 987654321 checked, leaked blocks 0, errors 0" in text
    assert "1/2 identical to the bundled file" in text and "1 more identical" in text
    for command in ("python bench/static.py", "python bench/pool.py", "python bench/swap.py",
                    "python bench/replay.py", "python bench/multilevel.py",
                    "python bench/blocks.py", "python bench/sharing.py",
                    "python bench/stress.py", "python bench/capture.py --bundled"):
        assert f"`{command}`" in text


def test_missing_results_give_sections_saying_so(tmp_path):
    text = report.render(tmp_path)
    assert "No `static.json`" in text and "No `replay.json`" in text
    assert "Not drawn yet" in text and "Not run yet" in text
    for title, file in (("Multi-level placement", "multilevel.json"),
                        ("Several models", "blocks.json"), ("Time-shared device", "sharing.json"),
                        ("Stress run", "stress.json"),
                        ("Bundled traces re-captured", "capture.json")):
        assert f"Not run yet. No `{file}`" in _section(text, title)
        assert f"not run (no `{file}`)" in _section(text, "Headline numbers")


def test_unreadable_json_is_reported_not_raised(results):
    (results / "sharing.json").write_text('{"rows": [')  # cut short while being written
    text = report.render(results)
    assert "Could not read `sharing.json` (JSONDecodeError" in _section(text, "Time-shared")
    assert "sharing: `sharing.json` could not be read" in _section(text, "Headline numbers")
    assert "| 1 | a_infer |" in text  # the other sections are still there


def test_saved_text_tables_and_manifest_are_rendered(results):
    (results / "capture.md").write_text("| file | ops |\n| --- | ---: |\n| toy.gz | 17 |\n")
    (results / "exact_dsa.txt").write_text("instance status\nA optimal\n")
    (results / "run_all.json").write_text(json.dumps({
        "machine": {"python": "3.0.1", "torch": None}, "mode": "quick", "started": "then",
        "benchmarks": {"static": {"command": "python bench/static.py --quick",
                                  "returncode": 0, "seconds": 1.5,
                                  "results_updated": True}}}))
    text = report.render(results)
    assert "| toy.gz | 17 |" in text
    assert "```\ninstance status\nA optimal\n```" in text
    assert "| static | `python bench/static.py --quick` | 0 | 1.50 | yes |" in text
    assert "| torch | – |" in text


def test_committed_results_render_only_into_tmp(tmp_path):
    committed = BENCH / "results"
    files = {name: file for name, file in report.JSON_FILES.items()
             if (committed / file).exists()}
    names = list(files)
    if not names:
        pytest.skip("no committed results")
    for file in files.values():
        shutil.copy(committed / file, tmp_path)
    assert run_all.main(["--render-only", "--no-figures", "--results", str(tmp_path)]) == 0
    text = (tmp_path / "REPORT.md").read_text()
    assert json.loads((tmp_path / "run_all.json").read_text())["mode"] == "render-only"
    if "pool" in names:
        pool = json.loads((tmp_path / "pool.json").read_text())
        rows = {r[0]: r for r in _table_rows(_section(text, "Planned pool"), "trace")}
        for row in pool["rows"]:
            cells = rows[row["trace"]]
            assert cells[5] == f"{row['planned_over_floor']:.4f}"
            assert cells[6] == f"{row['planned_ratio']:.4f}"
    if "static" in names:
        static = json.loads((tmp_path / "static.json").read_text())
        table = _table_rows(_section(text, "Static"), "family")
        for row in static["rows"]:
            if row["solver"] == "auto":
                cells = next(c for c in table if c[1] == row["instance"])
                assert f"{row['ratio']:.4f} ({row['seconds']:.2f} s)" in cells
    if "blocks" in names:
        blocks = json.loads((tmp_path / "blocks.json").read_text())
        table = _table_rows(_section(text, "Several models"), "N")
        assert [c[5] for c in table] == [str(r["pool_bytes"]) for r in blocks["rows"]]
    if "stress" in names:
        stress = json.loads((tmp_path / "stress.json").read_text())
        facts = dict((r[0], r[1]) for r in _table_rows(_section(text, "Stress run"), "quantity"))
        assert facts["bytes checked"] == str(stress["result"]["bytes_checked"])
    for name in ("multilevel", "sharing", "capture_bundled"):
        if name not in names:
            assert f"No `{report.JSON_FILES[name]}`" in text
    assert not re.search(r"\bnan\b|None", _section(text, "Headline numbers"))


def test_run_all_commands_and_filter():
    assert run_all.command("static", True, "/t")[2:] == ["--quick"]
    assert run_all.command("capture", True, "/t")[2:] == ["/t", "--small"]
    assert run_all.command("pool", True, "/t")[2:] == []
    assert run_all.command("stress", True, "/t")[2:] == ["--minutes", "0.2"]
    assert run_all.command("stress", False, "/t")[2:] == []
    assert run_all.command("multilevel", True, "/t")[2:] == ["--quick"]
    assert run_all.command("capture_bundled", False, "/t")[1:] == [
        str(BENCH / "capture.py"), "--bundled"]
    assert run_all.command("capture", False, "/t")[2:] == ["/t"]  # the OUT_DIR capture stays
    for name, (script, *_rest, file) in run_all.BENCHMARKS.items():
        assert (BENCH / script).is_file(), name
        if name not in run_all.STDOUT_KEPT:  # the report reads every JSON a benchmark writes
            assert file in report.JSON_FILES.values(), name
    assert run_all.selected("swap, pool") == ["swap", "pool"]
    assert run_all.selected(None) == list(run_all.BENCHMARKS)
    with pytest.raises(SystemExit, match="unknown benchmark"):
        run_all.selected("nope")
    machine = run_all.machine()
    for key in ("python", "numpy", "cupy", "torch", "cpus", "platform", "git_commit"):
        assert key in machine
