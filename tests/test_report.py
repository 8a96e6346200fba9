"""The benchmark report (issue 6, item 5): rendered offline from JSON, no benchmark is run."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _load(name: str):
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


report = _load("report")
run_all = _load("run_all")


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
          "mistimed": {"policy": "capuchin", "late_prefetches": [9, 8, 7, 6],
                       "stall_us": [1.0], "feedback_moves": [3, 0], "sim_late_floor": 2,
                       "iteration_us": [300.0], "sim_iteration_us": 250.0,
                       "corrupt_bytes": 0}}


@pytest.fixture
def results(tmp_path):
    for name, doc in (("static", STATIC), ("pool", POOL), ("swap", SWAP), ("replay", REPLAY)):
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
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


def test_replay_targets_are_checked_on_the_json_values(results):
    text = _section(report.render(results), "Swap runtime replay")
    checks = {r[0]: r for r in _table_rows(text, "what")}
    assert checks["replay / simulator iteration time"][1:] == ["1.0750", "<= 1.15", "met"]
    assert checks["`h.use()` median on a resident tensor (µs)"][1:] == [
        "6.50", "<= 5.0", "**MISSED**"]
    late = checks["mis-timed plan: late prefetches per iteration"]
    assert late[1] == "[9, 8, 7, 6]" and late[3] == "**MISSED**"  # floor 2 never reached
    facts = dict((r[0], r[1]) for r in _table_rows(text, "measured"))
    assert facts["iteration µs (replay)"] == "100.25, 200.75"
    assert facts["bytes checked / corrupt"] == "4096 / 0"


def test_headline_block_quotes_the_json_with_commands(results):
    text = _section(report.render(results), "Headline numbers")
    assert "arena / lower bound 1.0000–1.0000 (1/1 exactly at the lower bound)" in text
    assert "Z 1.75 s vs 0.125 s" in text and "0/1 fit the capacity" in text
    assert "1.1875–1.1875" in text and "1.0625–1.0625" in text
    assert "70% gen5: 25.0% vs bound 12.5% (1/1 within target)" in text
    assert "corrupt bytes 0 of 4096 checked (mis-timed plan: 0)" in text
    for command in ("python bench/static.py", "python bench/pool.py", "python bench/swap.py",
                    "python bench/replay.py"):
        assert f"`{command}`" in text


def test_missing_results_give_sections_saying_so(tmp_path):
    text = report.render(tmp_path)
    assert "No `static.json`" in text and "No `replay.json`" in text
    assert "Not drawn yet" in text and "Not run yet" in text


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
    names = [n for n in ("static", "pool", "swap", "replay") if (committed / f"{n}.json").exists()]
    if not names:
        pytest.skip("no committed results")
    for name in names:
        shutil.copy(committed / f"{name}.json", tmp_path)
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
    assert not re.search(r"\bnan\b|None", _section(text, "Headline numbers"))


def test_run_all_commands_and_filter():
    assert run_all.command("static", True, "/t")[2:] == ["--quick"]
    assert run_all.command("capture", True, "/t")[2:] == ["/t", "--small"]
    assert run_all.command("pool", True, "/t")[2:] == []
    assert run_all.selected("swap, pool") == ["swap", "pool"]
    assert run_all.selected(None) == list(run_all.BENCHMARKS)
    with pytest.raises(SystemExit, match="unknown benchmark"):
        run_all.selected("nope")
    machine = run_all.machine()
    for key in ("python", "numpy", "cupy", "torch", "cpus", "platform", "git_commit"):
        assert key in machine
