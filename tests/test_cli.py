"""The command line in process: JSON, exit codes, one-line errors, no writes on bad input."""

from __future__ import annotations

import io
import json

import pytest

from cupool.cli import main
from cupool.io import load_plan, load_trace
from tests.conftest import DSA, TRACES, tiny_document

EXAMPLE = str(DSA / "example.12.csv")
PLAN_FIELDS = {"trace", "solver", "buffers", "arena_bytes", "lower_bound_bytes", "ratio",
               "solve_seconds", "valid"}


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main([str(a) for a in argv], out, err)
    return code, out.getvalue(), err.getvalue()


def test_plan_json_has_the_contract_fields_and_writes_the_plan(tmp_path):
    out_path = tmp_path / "plan.json"
    code, out, err = cli("plan", EXAMPLE, "--solver", "greedy-size", "--json", "--out", out_path)
    assert code == 0 and err == ""
    document = json.loads(out)
    assert set(document) >= PLAN_FIELDS
    assert document["buffers"] == 5 and document["lower_bound_bytes"] == 12
    assert document["valid"] is True
    assert document["ratio"] == document["arena_bytes"] / 12
    plan = load_plan(out_path)
    assert plan.arena_bytes == document["arena_bytes"]
    code, out, _ = cli("validate", EXAMPLE, out_path)
    assert code == 0 and out.strip() == "valid"


def test_plan_writes_minimalloc_csv_with_offsets(tmp_path):
    out_path = tmp_path / "plan.csv"
    code, _, _ = cli("plan", EXAMPLE, "--solver", "exact", "--out", out_path)
    assert code == 0
    lines = out_path.read_text().splitlines()
    assert lines[0] == "id,lower,upper,size,offset" and len(lines) == 6
    assert cli("validate", EXAMPLE, out_path)[0] == 0


def test_budget_forms(tmp_path):
    code, out, _ = cli("plan", EXAMPLE, "--solver", "exact", "--budget", "100%", "--json")
    assert code == 0 and json.loads(out)["budget_bytes"] == 12
    code, out, _ = cli("plan", EXAMPLE, "--solver", "exact", "--budget", "11", "--json")
    document = json.loads(out)
    assert code == 1 and document["status"] == "infeasible" and document["valid"] is False


def test_validate_reports_the_first_broken_rule(tmp_path):
    plan_path = tmp_path / "plan.csv"
    plan_path.write_text("id,lower,upper,size,offset\nb1,0,3,4,0\nb2,3,9,4,0\nb3,0,9,4,2\n"
                         "b4,9,21,4,4\nb5,0,21,4,8\n")
    code, out, _ = cli("validate", EXAMPLE, plan_path, "--json")
    document = json.loads(out)
    assert code == 1 and document["valid"] is False and document["rule"] == "overlap"
    assert "buffers 0 and 2" in document["message"]


def test_validate_refuses_a_plan_for_another_trace(tmp_path):
    plan_path = tmp_path / "p.json"
    assert cli("plan", EXAMPLE, "--solver", "greedy-size", "--out", plan_path)[0] == 0
    other = tmp_path / "other.csv"
    other.write_text("id,lower,upper,size\n0,0,2,4\n")
    code, out, err = cli("validate", other, plan_path)
    assert code == 2 and out == "" and "not for 'other'" in err


def test_info_on_a_real_trace():
    path = next(p for p in TRACES if "mobilenetv2_infer_b1" in p.name)
    code, out, _ = cli("info", path, "--json", "--top", "2")
    document = json.loads(out)
    trace = load_trace(path)
    assert code == 0 and document["ops"] == 203 and document["buffers"] == 431
    assert document["lower_bound_bytes"] == 25195072
    assert document["persistent_bytes"] == sum(
        b.size for b in trace.buffers if b.kind == "persistent")
    assert [b["size"] for b in document["biggest"]] == sorted(
        (b.size for b in trace.buffers), reverse=True)[:2]
    code, out, _ = cli("info", path)
    assert code == 0 and "lower bound       25195072 B" in out


BAD = [
    (("plan", "missing.json"), "missing.json: no such file"),
    (("plan", EXAMPLE, "--solver", "magic"), "invalid choice: 'magic'"),
    (("plan", EXAMPLE, "--budget", "lots"), "--budget (='lots') is not a byte count"),
    (("plan", EXAMPLE, "--budget=-5%"), "must be a percentage > 0"),
    (("plan", EXAMPLE, "--time-limit", "nan"), "(='nan') must be a number of seconds > 0"),
    (("plan", EXAMPLE, "--seed=-1"), "(='-1') must be an integer >= 0"),
    (("plan", EXAMPLE, "--out", "/nonexistent/dir/p.json"), "does not exist"),
    (("validate", EXAMPLE, "missing-plan.json"), "no such file"),
    (("frobnicate",), "invalid choice: 'frobnicate'"),
]


@pytest.mark.parametrize("argv,message", BAD, ids=[" ".join(a[:2]) + f"-{i}"
                                                    for i, (a, _) in enumerate(BAD)])
def test_bad_input_exits_2_with_one_line(argv, message):
    code, out, err = cli(*argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err
    assert "Traceback" not in err


@pytest.mark.parametrize("override,message", [
    ({"version": 7}, "unknown trace format version (=7)"),
    ({"buffers": []}, "empty trace"),
])
def test_bad_trace_exits_2_and_writes_nothing(tmp_path, override, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(tiny_document(**override)))
    out_path = tmp_path / "plan.json"
    code, _, err = cli("plan", path, "--out", out_path)
    assert code == 2 and message in err and not out_path.exists()


def test_plan_for_a_nan_duration_trace_names_the_op(tmp_path):
    path = tmp_path / "nan.json"
    path.write_text(json.dumps(tiny_document()).replace('"duration_us": 3.0', '"duration_us": NaN'))
    code, _, err = cli("plan", path)
    assert code == 2 and "op 2: 'duration_us' (=nan)" in err


def test_help_exits_0():
    code, out, _ = cli("--help")
    assert code == 0 and "plan" in out


SIM_FIELDS = {"trace", "policy", "budget_bytes", "link_gbps", "feasible", "iteration_us",
              "ideal_us", "overhead", "peak_bytes", "swapped_bytes", "recompute_us", "stall_us"}
RESNET_TRAIN = next(p for p in TRACES if "resnet50_train_b32_fp32" in p.name)
RESNET_INFER = next(p for p in TRACES if "resnet50_infer_b8" in p.name)


def test_simulate_plans_under_a_budget_and_reports_the_contract_fields(tmp_path):
    """On an inference capture (the bound of a training trace's plan, with its recipes,
    takes most of a minute: the planning tests and ``plan`` below cover those)."""
    code, out, err = cli("simulate", RESNET_INFER, "--budget", "70%", "--link", "gen4", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert set(document) >= SIM_FIELDS
    assert document["feasible"] is True and document["link_gbps"] == 25.0
    assert document["budget_bytes"] == load_trace(RESNET_INFER).lower_bound_bytes() * 70 // 100
    assert document["peak_bytes"] <= document["budget_bytes"]
    assert document["overhead"] == pytest.approx(
        document["iteration_us"] / document["ideal_us"] - 1)
    assert 0 <= document["lower_bound_overhead"] <= document["overhead"]
    assert document["lower_bound_method"] in ("lp", "dual", "memory-time")


def test_plan_with_worker_processes_writes_the_same_plan(tmp_path):
    """``--workers`` changes where ``auto``'s members run, never the plan."""
    plans = []
    for workers in ("1", "2"):
        out_path = tmp_path / f"workers{workers}.json"
        code, _, err = cli("plan", RESNET_TRAIN, "--budget", "50%", "--workers", workers,
                           "--out", out_path)
        assert code == 0, err
        plans.append(json.loads(out_path.read_text()))
    for plan_ in plans:
        assert plan_["actions"] and plan_.pop("solve_seconds") >= 0
    assert plans[0] == plans[1]


def test_plan_below_the_lower_bound_writes_a_swapping_plan_that_validates(tmp_path):
    out_path = tmp_path / "p70.json"
    code, out, _ = cli("plan", RESNET_TRAIN, "--budget", "70%", "--json", "--out", out_path)
    document = json.loads(out)
    assert code == 0 and document["valid"] is True and document["out"] == str(out_path)
    assert json.loads(out_path.read_text())["version"] == 2
    assert cli("validate", RESNET_TRAIN, out_path)[0] == 0
    code, out, _ = cli("simulate", RESNET_TRAIN, "--budget", "70%", "--plan", out_path, "--json")
    assert code == 0 and json.loads(out)["policy"] == "plan:auto"


def test_simulating_a_static_plan_costs_nothing(tmp_path):
    plan_path = tmp_path / "static.json"
    assert cli("plan", RESNET_TRAIN, "--solver", "exact", "--out", plan_path)[0] == 0
    code, out, _ = cli("simulate", RESNET_TRAIN, "--budget", "100%", "--plan", plan_path, "--json")
    document = json.loads(out)
    assert code == 0 and document["overhead"] == 0.0 and document["stall_us"] == 0.0


@pytest.mark.parametrize("argv,message", [
    (("--budget", "1MiB"), "infeasible: op "),
    (("--budget", "70%", "--link", "gen9"), "gen9"),
    (("--budget", "70%", "--policy", "magic"), "invalid choice: 'magic'"),
    (("--budget", "70%", "--latency-us=-1"), "(='-1') must be a number >= 0"),
    (("--budget", "70%", "--workers=-1"), "argument --workers: (='-1') must be an integer"),
])
def test_simulate_bad_input_exits_2(argv, message):
    code, out, err = cli("simulate", RESNET_TRAIN, *argv)
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1


def test_demo_plans_every_bundled_trace_and_writes_valid_plans(tmp_path):
    code, out, _ = cli("demo", "--out", tmp_path / "plans", "--time-limit", "0.5", "--json")
    document = json.loads(out)
    assert code == 0 and len(document["traces"]) == len(TRACES)
    for row in document["traces"]:
        # Whether auto proves the bound within 0.5 s depends on the machine's load; that it
        # is valid and never worse than the heuristics it starts from does not.
        auto = row["solvers"]["auto"]
        assert auto["valid"] and auto["ratio"] >= 1.0
        assert auto["arena_bytes"] <= min(row["solvers"][name]["arena_bytes"]
                                          for name in ("greedy-size", "greedy-breadth", "best-fit"))
        trace_path = next(p for p in TRACES if p.name.startswith(row["trace"] + "."))
        assert cli("validate", trace_path, row["plan"])[0] == 0
    assert document["replay"]["corrupt_bytes"] == 0
    assert len(document["replay"]["late_prefetches"]) == 3
    program = document["program"]
    assert program["example"] == "gpt_decoder" and program["params_identical"]
    assert program["losses"][-1] < program["losses"][0]
    assert program["modes"] == ["passive"] + ["planned"] * 5
    assert max(program["device_peak_bytes"]) <= program["budget_bytes"]
    half = program["peak_bytes"] // 2
    assert program["budget_bytes"] == half - half % 512  # whole 512-byte units
    budgets = {row["budget_percent"]: row for row in document["budgets"]}
    assert set(budgets) == {70, 50}
    for row in budgets.values():
        assert row["lower_bound_overhead"] <= row["overhead"]["auto"]
        assert all(row["overhead"]["auto"] <= value
                   for value in row["overhead"].values() if value is not None)


REPLAY_FIELDS = {"iterations", "mean_iteration_us", "late_prefetches", "stall_us",
                 "peak_device_bytes", "bytes_checked", "corrupt_bytes"}


def test_replay_runs_the_swap_runtime_and_checks_every_byte():
    code, out, err = cli("replay", RESNET_TRAIN, "--budget", "70%", "--iterations", "2", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert set(document) >= REPLAY_FIELDS
    assert document["iterations"] == 2 and len(document["late_prefetches"]) == 2
    assert document["corrupt_bytes"] == 0 and document["bytes_checked"] > 0


@pytest.mark.parametrize("argv,message", [
    (("--budget", "70%", "--iterations", "0"), "(='0') must be an integer >= 1"),
    (("--budget", "1MiB"), "infeasible: op "),
])
def test_replay_bad_input_exits_2(argv, message):
    code, out, err = cli("replay", RESNET_TRAIN, *argv)
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1


def test_replay_on_cuda_without_a_gpu_exits_2_with_one_line():
    from cupool.devices import probe_cuda

    if probe_cuda()[0]:
        pytest.skip("a GPU is usable here: tests/gpu/test_replay_cuda.py runs the replay")
    code, out, err = cli("replay", RESNET_TRAIN, "--budget", "70%", "--device", "cuda")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "device kind 'cuda' is unavailable" in err


def test_convert_a_pytorch_snapshot_to_csv_and_plan_it(tmp_path):
    from pathlib import Path

    snapshot = next(p for p in (Path(__file__).parent / "data").glob("*.pickle"))
    out_path = tmp_path / "snap.csv"
    code, out, _ = cli("convert", snapshot, out_path, "--json")
    document = json.loads(out)
    assert code == 0 and document["buffers"] == len(load_trace(out_path).buffers) > 0
    assert out_path.read_text().startswith("id,lower,upper,size\n")
    assert cli("plan", snapshot, "--solver", "greedy-size")[0] == 0


def test_convert_refuses_an_unknown_output_format_and_writes_nothing(tmp_path):
    code, out, err = cli("convert", EXAMPLE, tmp_path / "out.xml")
    assert code == 2 and out == "" and ".json, .json.gz, .csv" in err
    assert list(tmp_path.iterdir()) == []


def test_capture_writes_a_trace_the_strict_reader_accepts(tmp_path):
    pytest.importorskip("torch")
    out_path = tmp_path / "gpt2.json.gz"
    code, out, err = cli("capture", "gpt2", "--small", "--batch", "2", "--out", out_path, "--json")
    assert code == 0, err
    document = json.loads(out)
    trace = load_trace(out_path)
    assert document["buffers"] == len(trace.buffers) and document["ops"] == trace.num_ops
    assert document["persistent_bytes"] > 0


def test_capture_bad_preset_exits_2(tmp_path):
    pytest.importorskip("torch")
    code, out, err = cli("capture", "gpt2", "--small", "--out", tmp_path / "t.json",
                         "--device-preset", "Z9000")
    assert code == 2 and out == "" and "Z9000" in err and not (tmp_path / "t.json").exists()


def test_viz_draws_a_layout_svg_and_refuses_other_extensions(tmp_path):
    pytest.importorskip("matplotlib")
    out_path = tmp_path / "layout.svg"
    code, out, err = cli("viz", EXAMPLE, "--out", out_path, "--json")
    assert code == 0, err
    assert json.loads(out)["kind"] == "layout"
    assert out_path.read_text().lstrip().startswith("<?xml")
    code, out, err = cli("viz", EXAMPLE, "--out", tmp_path / "layout.bmp")
    assert code == 2 and out == "" and ".bmp" in err


def test_plan_out_to_a_full_device_exits_2_and_leaves_the_device(tmp_path):
    import os
    import stat

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    code, out, err = cli("plan", EXAMPLE, "--solver", "greedy-size", "--out", "/dev/full")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("cupool: error: /dev/full: cannot write here")
    assert "ENOSPC" in err and stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_plan_out_through_a_symlink_and_to_dev_stdout(tmp_path, capfd):
    import os

    (tmp_path / "store").mkdir()
    link = tmp_path / "plan.json"
    link.symlink_to(tmp_path / "store" / "real.json")
    code, _, err = cli("plan", EXAMPLE, "--solver", "greedy-size", "--out", link)
    assert code == 0 and err == "" and link.is_symlink()
    written = load_plan(tmp_path / "store" / "real.json")
    if not os.path.islink("/dev/stdout"):
        pytest.skip("no /dev/stdout link")
    capfd.readouterr()
    code, out, err = cli("plan", EXAMPLE, "--solver", "greedy-size", "--out", "/dev/stdout")
    assert code == 0 and err == "" and "plan written to /dev/stdout" in out
    (tmp_path / "stdout.json").write_text(capfd.readouterr().out)
    assert load_plan(tmp_path / "stdout.json").offsets() == written.offsets()
    assert os.path.islink("/dev/stdout")
