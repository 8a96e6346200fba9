"""The self-test's two files: ``selftest_<device>.json`` (everything measured) and
``selftest_<device>.md`` (the same, as tables a person reads), and the targets derived
from the steps. Both are pure functions of the report, rewritten after every step."""

from __future__ import annotations

import json
from pathlib import Path

from cupool.core.units import format_bytes


def _target(name: str, measured: str, met: bool | None) -> dict:
    """One row: ``met`` is ``None`` where the step that measures it did not run."""
    return {"target": name, "measured": measured, "met": met}


def _result(report, name: str):
    step = next((s for s in report.steps if s.name == name), None)
    return (step.result if step is not None and step.status in ("pass", "fail") else None)


def targets(report) -> list[dict]:
    """Every target the issue of record asks for, with what was measured and whether it
    was met (``None``: not measured in this run)."""
    rows = []
    tests = _result(report, "gpu_tests")
    rows.append(_target("0 failed GPU tests",
                        f"{tests['passed']} passed, {tests['failed']} failed, "
                        f"{tests['errors']} errors, {tests['skipped']} skipped"
                        if tests else "not run",
                        (tests["failed"] + tests["errors"] == 0) if tests else None))
    stress = _result(report, "stress")
    replays = _result(report, "replay") or []
    corrupt = (stress["corrupt_bytes"] if stress else 0) + sum(r["corrupt_bytes"]
                                                               for r in replays)
    measured_corrupt = stress is not None or bool(replays)
    rows.append(_target("0 corrupt bytes (stress and replay)", str(corrupt) if measured_corrupt
                        else "not run", corrupt == 0 if measured_corrupt else None))
    for key, label in (("leaked_blocks", "0 leaked blocks"), ("errors", "0 errors")):
        rows.append(_target(label, str(stress[key]) if stress else "not run",
                            stress[key] == 0 if stress else None))
    for r in replays:
        rows.append(_target(f"replay {r['trace']} at {r['budget']} within 15% of the simulator",
                            f"{r['steady_over_sim']:.3f}× ({r['steady_us']:.0f} vs "
                            f"{r['sim_iteration_us']:.0f} µs)", r["within_tolerance"]))
        rows.append(_target(f"replay {r['trace']} at {r['budget']}: late prefetches at the "
                            f"simulator's floor from iteration 3",
                            f"{r['late_prefetches']} (floor "
                            f"{r.get('sim_late_floor_planned', r['sim_late_floor'])}, after "
                            f"feedback {r['sim_late_floor']})",
                            r["late_at_floor"]))
    for r in _result(report, "programs") or []:
        rows.append(_target(f"program {r['example']} at {r['budget']}: parameters bitwise "
                            f"those of the run without cupool, device peak within the budget",
                            f"identical: {r['params_identical']}, peak "
                            f"{max(r['device_peak_bytes'])} of {r['budget_bytes']} B",
                            r["passed"]))
    for r in _result(report, "pool") or []:
        if r["cupy_us"] is None:
            continue
        rows.append(_target(f"pool {r['trace']}: malloc+free within 1.5× of CuPy's MemoryPool",
                            f"{r['planned_us']:.2f} vs {r['cupy_us']:.2f} µs "
                            f"({r['planned_over_cupy_us']:.2f}×)", r["cost_within_1_5x"]))
        rows.append(_target(f"pool {r['trace']}: reserved bytes below CuPy's MemoryPool",
                            f"{format_bytes(r['planned_reserved_bytes'])} vs "
                            f"{format_bytes(r['cupy_reserved_bytes'])}",
                            r["reserved_below_cupy"]))
    link = _result(report, "link")
    if link is not None:
        for direction, row in link["directions"].items():
            rows.append(_target(f"{direction} link within 10% of the {link['nearest_preset']} "
                                f"preset", f"{row['gbps']:.1f} GB/s, {row['latency_us']:.1f} µs "
                                f"(preset {row['preset_gbps']:.0f} GB/s, "
                                f"{row['preset_latency_us']:.0f} µs)", not row["preset_off"]))
    return rows


def _cell(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return lines


def _section(step) -> list[str]:
    lines = [f"## {step.name}: {step.status} ({step.seconds:.1f} s)", ""]
    if step.message:
        lines += [step.message, ""]
    result = step.result
    if result is None:
        return lines
    if step.name == "environment":
        facts = {k: v for k, v in result.items() if k != "device"}
        lines += _table(["fact", "value"], [[k, v] for k, v in facts.items()])
    elif step.name == "link":
        lines += _table(["direction", "GB/s (fit)", "latency µs (fit)", "GB/s (largest copy)",
                         "preset GB/s", "preset µs", "off by > 10%"],
                        [[d, r["gbps"], r["latency_us"], r["largest_copy_gbps"],
                          r["preset_gbps"], r["preset_latency_us"], r["preset_off"]]
                         for d, r in result["directions"].items()])
    elif step.name == "pool":
        lines += _table(["trace", "allocs", "planned µs", "CuPy µs", "planned reserved",
                         "CuPy reserved", "CuPy model reserved", "lower bound"],
                        [[r["trace"], r["allocations"], r["planned_us"], r["cupy_us"],
                          format_bytes(r["planned_reserved_bytes"]),
                          format_bytes(r["cupy_reserved_bytes"])
                          if r["cupy_reserved_bytes"] is not None else None,
                          format_bytes(r["cupy_model_reserved_bytes"]),
                          format_bytes(r["lower_bound_bytes"])] for r in result])
    elif step.name == "ops":
        lines += _table(["model", "device", "ops (measured/estimated/matched)",
                         "measured total µs", "estimated total µs", "total ratio",
                         "median ratio", "p10-p90 ratio"],
                        [[f"{result['model']} {result['mode']} b{result['batch']}",
                          result["device"], f"{result['measured_ops']}/"
                          f"{result['estimated_ops']}/{result['matched_ops']}",
                          result["measured_total_us"], result["estimated_total_us"],
                          result["total_ratio"], result["median_ratio"],
                          f"{_cell(result['p10_ratio'])}-{_cell(result['p90_ratio'])}"]])
        calibration = result.get("calibration")
        if calibration:
            lines += ["", f"Least-squares fit over {calibration['ops']} ops that do work: "
                          f"measured ≈ {calibration['intercept_us']:.2f} µs + "
                          f"{calibration['slope']:.3g} × estimated, i.e. roofline efficiency "
                          f"{_cell(calibration['efficiency'])} and launch overhead "
                          f"{calibration['launch_overhead_us']:.2f} µs."]
    elif step.name == "replay":
        lines += _table(["trace", "budget", "iteration µs", "simulator µs", "steady / sim",
                         "late per iteration", "floor", "floor after feedback",
                         "corrupt bytes"],
                        [[r["trace"], r["budget"],
                          " ".join(f"{t:.0f}" for t in r["iteration_us"]),
                          r["sim_iteration_us"], r["steady_over_sim"], r["late_prefetches"],
                          r.get("sim_late_floor_planned", r["sim_late_floor"]),
                          r["sim_late_floor"], r["corrupt_bytes"]] for r in result])
    elif step.name == "programs":
        lines += _table(["example", "budget", "modes", "loss first → last", "params identical",
                         "device peak / budget", "late per step", "steady µs", "simulator µs"],
                        [[r["example"], r["budget"], " ".join(m[0] for m in r["modes"]),
                          f"{r['losses'][0]:.4f} → {r['losses'][-1]:.4f}",
                          r["params_identical"],
                          f"{max(r['device_peak_bytes'])} / {r['budget_bytes']}",
                          r["late_prefetches"], r["steady_us"], r["sim_iteration_us"]]
                         for r in result])
    elif step.name == "stress":
        lines += _table(["seconds", "scenarios", "bytes checked", "corrupt bytes",
                         "leaked blocks", "late prefetches", "errors"],
                        [[result["seconds"], result["scenarios"], result["bytes_checked"],
                          result["corrupt_bytes"], result["leaked_blocks"],
                          result["late_prefetches"], result["errors"]]])
        lines += [f"- {m}" for m in result["messages"]]
    elif step.name == "gpu_tests" and result.get("ran"):
        lines += _table(["tests", "passed", "failed", "errors", "skipped", "seconds"],
                        [[result["tests"], result["passed"], result["failed"],
                          result["errors"], result["skipped"], result["seconds"]]])
        lines += [f"- failed: {name}" for name in result["failures"]]
        lines += [f"- skipped ×{n}: {reason}" for reason, n in result["skip_reasons"].items()]
    return [*lines, ""]


def render_markdown(document: dict, report) -> str:
    lines = [f"# cupool selftest on {report.device}: {report.verdict}", "",
             f"Started {report.started}. Every number below was measured in this run.", ""]
    environment = _result(report, "environment")
    if environment and environment.get("gpu_name"):
        lines += [f"GPU: {environment['gpu_name']} (compute {environment['compute_capability']}"
                  f", {format_bytes(environment['gpu_total_bytes'])}), driver CUDA "
                  f"{environment['driver_cuda_version']}, runtime CUDA "
                  f"{environment['runtime_cuda_version']}, CuPy {environment['cupy']}.", ""]
    lines += ["## Targets", ""]
    lines += _table(["target", "measured", "met"],
                    [[t["target"], t["measured"],
                      {True: "yes", False: "**no**", None: "not run"}[t["met"]]]
                     for t in document["targets"]])
    lines.append("")
    for step in report.steps:
        lines += _section(step)
    return "\n".join(lines)


def save_json(document: dict, path: Path) -> None:
    from cupool.io import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, (json.dumps(document, indent=1, default=str) + "\n").encode())


def report_paths(out_dir: Path, device: str) -> tuple[Path, Path]:
    out_dir = Path(out_dir)
    return out_dir / f"selftest_{device}.json", out_dir / f"selftest_{device}.md"


def write_report(report, out_dir: Path) -> dict:
    """Write both files for ``report`` into ``out_dir``; the JSON document."""
    from cupool.io import write_atomic

    document = report.document()
    json_path, md_path = report_paths(out_dir, report.device)
    save_json(document, json_path)
    write_atomic(md_path, (render_markdown(document, report) + "\n").encode())
    return document
