"""Render ``bench/results/REPORT.md`` from the benchmarks' saved results.

    python bench/report.py [--results DIR] [--out FILE] [--figures]

Everything here is a pure function of files: the JSON the benchmarks wrote
(``static.json``, ``pool.json``, ``swap.json``, ``replay.json``, ``multilevel.json``,
``blocks.json``, ``sharing.json``, ``stress.json``, and ``capture.json`` from
``bench/capture.py --bundled``), the text tables of the benchmarks that print rather than
write JSON (``capture.md``, ``exact_dsa.txt``, saved by ``bench/run_all.py``), the run
manifest ``run_all.json`` (machine, versions, commands; absent after a plain
``--render-only`` of committed results) and ``figures/figures.json`` (what the pictures
show). No number is written here by hand: every table cell comes from those files,
formatted by the helpers below (ratios 4 decimals, seconds 2, µs 2, overhead fractions as
percentages with 1 decimal, bytes as exact integers, per-switch byte means rounded to the
byte). A missing or unreadable file gives a section that says so, never an error.
:func:`draw_figures` plans the bundled ResNet-50 training trace (deterministically) and
draws the PNGs; it is the only part that needs matplotlib.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
TRACES = ROOT / "cupool" / "data" / "traces"

FIGURE_TRACE = "resnet50_train_b32_fp32"
FIGURE_BUDGET = 0.7
FIGURE_LINK = "gen5"
FIGURES = {
    "layout": "resnet50_train_layout.png",
    "memory": "resnet50_train_memory.png",
    "timeline": "resnet50_train_70pct_timeline.png",
    "budget_layout": "resnet50_train_70pct_layout.png",
}

COMMANDS = {
    "static": "python bench/static.py",
    "pool": "python bench/pool.py",
    "swap": "python bench/swap.py",
    "replay": "python bench/replay.py",
    "exact_dsa": "python bench/exact_dsa.py",
    "capture": "python bench/capture.py OUT_DIR",
    "capture_bundled": "python bench/capture.py --bundled",
    "multilevel": "python bench/multilevel.py",
    "blocks": "python bench/blocks.py",
    "sharing": "python bench/sharing.py",
    "stress": "python bench/stress.py",
    "figures": "python bench/run_all.py --render-only",
}

SWAP_TARGET = "auto <= 2 x bound + 5 percentage points"
SWAP_KINDS = {"train": "the training traces", "infer": "the inference traces",
              "lstm": "the LSTM-shaped trace"}
"""The kinds of trace ``bench/swap.py`` plans (a row or summary entry without ``kind`` is
a training one, as in results written before it planned the others)."""
REPLAY_RATIO_TARGET = 1.15
REPLAY_USE_TARGET_US = 5.0
REPLAY_CONVERGE_ITERATIONS = 3

# result name -> the JSON file its benchmark writes (``capture_bundled``: ``capture.py --bundled``)
JSON_FILES = {name: f"{name}.json" for name in
              ("static", "pool", "swap", "replay", "multilevel", "blocks", "sharing", "stress")}
JSON_FILES["capture_bundled"] = "capture.json"


# ---------------------------------------------------------------- formatting


def f_ratio(x) -> str:
    return "–" if x is None else f"{x:.4f}"


def f_s(x) -> str:
    return "–" if x is None else f"{x:.2f}"


def f_us(x) -> str:
    return "–" if x is None else f"{x:.2f}"


def f_pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def f_int(x) -> str:
    return "–" if x is None else str(int(x))


def f_round(x) -> str:
    """A mean of byte counts, to the byte."""
    return "–" if x is None else f"{x:.0f}"


def median(values: list) -> float | None:
    """Median of the values that are not ``None`` (``None`` when there are none)."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def f_mib(x) -> str:
    return "–" if x is None else f"{x / 2**20:.1f}"


def met(flag) -> str:
    return "–" if flag is None else ("met" if flag else "**MISSED**")


def table(header: list[str], rows: list[list[str]], align: str | None = None) -> str:
    """A Markdown table; ``align`` is one character per column (``l`` or ``r``)."""
    align = align or "l" * len(header)
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------- loading


def load_results(results_dir: Path) -> dict:
    """Every result file that exists under ``results_dir``: JSON parsed, text as text.

    A JSON file that does not parse (say, a benchmark killed while writing it) is left out
    and its error kept under ``"unreadable"`` (name -> message), so its section says so."""
    results_dir = Path(results_dir)
    out: dict = {"unreadable": {}}
    for name, file in (*JSON_FILES.items(), ("run_all", "run_all.json")):
        path = results_dir / file
        if path.is_file():
            try:
                out[name] = json.loads(path.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                out["unreadable"][name] = f"{type(exc).__name__}: {exc}"
    for name, file in (("capture", "capture.md"), ("exact_dsa", "exact_dsa.txt")):
        path = results_dir / file
        if path.is_file():
            out[name] = path.read_text()
    path = results_dir / "figures" / "figures.json"
    if path.is_file():
        out["figures"] = json.loads(path.read_text())
    return out


# ---------------------------------------------------------------- headline numbers


def headline_static(static: dict) -> list[str]:
    rows = static["rows"]
    lines = []
    auto = [r for r in rows if r["family"] == "trace" and r["solver"] == "auto"]
    if auto:
        ratios = [r["ratio"] for r in auto]
        at_lb = sum(1 for r in auto if r["ratio"] == 1.0)
        faster = sum(1 for r in auto if r["minimalloc_seconds"] is not None
                     and r["seconds"] < r["minimalloc_seconds"])
        lines.append(
            f"- **Static `auto` on the {len(auto)} real traces**: arena / lower bound "
            f"{f_ratio(min(ratios))}–{f_ratio(max(ratios))} ({at_lb}/{len(auto)} exactly at "
            f"the lower bound), {faster}/{len(auto)} faster than MiniMalloc; slowest "
            f"{f_s(max(r['seconds'] for r in auto))} s. — `{COMMANDS['static']}`")
    exact = [r for r in rows if r["family"] == "dsa" and r["solver"] == "exact"
             and r["instance"].startswith("challenging")]
    if exact:
        cells = ", ".join(f"{r['instance'].removeprefix('challenging-')} "
                          f"{f_s(r['seconds'])} s vs {r['minimalloc_seconds']} s"
                          for r in exact)
        fits = sum(1 for r in exact if r["fits"])
        lines.append(
            f"- **`exact` on MiniMalloc's {len(exact)} challenging instances**: {fits}/"
            f"{len(exact)} fit the capacity; ours vs MiniMalloc's time: {cells}. "
            f"— `{COMMANDS['static']}`")
    return lines


def headline_pool(pool: dict) -> list[str]:
    rows = pool["rows"]
    if not rows:
        return []
    over = [r["planned_over_floor"] for r in rows]
    reserved = [r["planned_ratio"] for r in rows]
    targets = sum(1 for r in rows if all(r["targets_met"].values()))
    return [f"- **`PlannedPool` through `cupy.empty`** ({len(rows)} traces): CPU time per "
            f"allocation / floor {f_ratio(min(over))}–{f_ratio(max(over))} (target <= 1.5); "
            f"reserved / lower bound {f_ratio(min(reserved))}–{f_ratio(max(reserved))} "
            f"(target <= 1.01, below the CuPy and PyTorch models); all targets met on "
            f"{targets}/{len(rows)} traces. — `{COMMANDS['pool']}`"]


def headline_swap(swap: dict) -> list[str]:
    lines = []
    for kind, words in SWAP_KINDS.items():
        cells = [f"{round(e['fraction'] * 100)}% {e['link']}: {f_pct(e['auto'])} vs bound "
                 f"{f_pct(e['bound'])} ({e['auto_meets_target']}/{e['traces']} within target)"
                 for e in swap["summary"] if e.get("kind", "train") == kind]
        if cells:
            lines.append(f"- **Budget planner `auto`, median iteration overhead over {words} "
                         f"vs the sound lower bound** ({SWAP_TARGET}): {'; '.join(cells)}. "
                         f"— `{COMMANDS['swap']}`")
    return lines


def headline_replay(replay: dict) -> list[str]:
    mistimed = replay.get("mistimed", {})
    runs = mistimed.get("runs", [])
    converged = sum(1 for run in runs if _converged(run))
    return [f"- **Swap runtime replay** ({replay['trace']} at {replay['budget']}): corrupt "
            f"bytes {f_int(replay['corrupt_bytes'])} of {f_int(replay['bytes_checked'])} "
            f"checked (mis-timed plan: {f_int(mistimed.get('corrupt_bytes'))}); replay / "
            f"simulator time {f_ratio(replay['replay_over_sim'])} (target <= "
            f"{REPLAY_RATIO_TARGET}); a mis-timed plan's late prefetches reach the "
            f"simulator's floor within {REPLAY_CONVERGE_ITERATIONS} iterations in "
            f"{converged} of {len(runs)} seeded runs. — `{COMMANDS['replay']}`"]


def _converged(run: dict) -> bool:
    """A mis-timed run's late prefetches reached its simulator floor within
    ``REPLAY_CONVERGE_ITERATIONS`` iterations."""
    return any(x <= run["sim_late_floor"]
               for x in run["late_prefetches"][:REPLAY_CONVERGE_ITERATIONS])


def multilevel_facts(multilevel: dict) -> dict:
    """Counts over ``multilevel.json``'s cases (a trace at a budget) that had a two-level plan."""
    rows = multilevel["rows"]
    cases = [r for r in rows if r.get("tiers") is not None]
    limited = [r["pinned_limited"] for r in cases if r.get("pinned_limited") is not None]
    return {
        "rows": len(rows), "cases": len(cases),
        "not_worse": sum(1 for r in cases if r["tiers"]["not_worse"]),
        "faster": sum(1 for r in cases if r["tiers"]["iteration_us"]
                      < r[r["best_two_level"]]["iteration_us"]),
        "valid": sum(1 for r in cases if r["tiers"]["valid"]
                     and (r.get("pinned_limited") is None or r["pinned_limited"]["valid"])),
        "best_median": median([r[r["best_two_level"]]["overhead"] for r in cases]),
        "tiers_median": median([r["tiers"]["overhead"] for r in cases]),
        "limited": len(limited),
        "repaired_median": median([p["repaired_overhead"] for p in limited]),
        "searched_median": median([p["overhead"] for p in limited]),
    }


def headline_multilevel(multilevel: dict) -> list[str]:
    f = multilevel_facts(multilevel)
    if not f["cases"]:
        return [f"- **Multi-level placement `tiers`**: no case had a two-level plan "
                f"({f['rows']} cases). — `{COMMANDS['multilevel']}`"]
    return [f"- **Multi-level placement `tiers`** ({multilevel.get('link', '–')}, "
            f"{f['cases']} trace × budget cases with a two-level plan): never slower than the "
            f"best two-level plan in {f['not_worse']}/{f['cases']}, strictly faster in "
            f"{f['faster']}/{f['cases']}; median overhead {f_pct(f['best_median'])} (best "
            f"two-level) → {f_pct(f['tiers_median'])} (`tiers`); with half the pinned host "
            f"memory ({f['limited']} cases that swap), median {f_pct(f['repaired_median'])} "
            f"repaired → {f_pct(f['searched_median'])} searched; valid plans "
            f"{f['valid']}/{f['cases']}. — `{COMMANDS['multilevel']}`"]


def headline_blocks(blocks: dict) -> list[str]:
    rows = blocks["rows"]
    if not rows:
        return []
    ratios = [r["ratio_to_sum_of_peaks"] for r in rows]
    within = sum(1 for r in rows if r["within_target"])
    valid = sum(1 for r in rows if r["valid"] and r["concurrent_valid"])
    big = max(rows, key=lambda r: r["n"])
    return [f"- **Several models in one pool of blocks** ({len(rows)} sets of "
            f"{min(r['n'] for r in rows)}–{big['n']} inference models): pool / sum of the "
            f"models' peaks {f_ratio(min(ratios))}–{f_ratio(max(ratios))} ({big['n']} models: "
            f"{f_int(big['pool_bytes'])} vs {f_int(big['sum_peak_bytes'])} bytes); within "
            f"max(peak) + sum(persistent) in {within}/{len(rows)} sets; shared and concurrent "
            f"pools valid in {valid}/{len(rows)}. — `{COMMANDS['blocks']}`"]


def headline_sharing(sharing: dict) -> list[str]:
    rows = sharing.get("rows") or []
    if not rows:
        return [f"- **Time-shared device**: `sharing.json` has no rows. "
                f"— `{COMMANDS['sharing']}`"]
    jobs = sorted({r.get("jobs") for r in rows if r.get("jobs") is not None})
    top = jobs[-1] if jobs else None
    by = {r.get("scenario"): r for r in rows if r.get("jobs") == top}
    fit, naive = by.get("fit", {}), by.get("naive", {})
    targets = sharing.get("targets", {})
    fit_most = max((r.get("persistent_bytes_per_switch") for r in rows
                    if r.get("scenario") == "fit"
                    and r.get("persistent_bytes_per_switch") is not None), default=None)
    return [f"- **Time-shared device, broker** ({', '.join(map(str, jobs))} jobs, sizes / "
            f"{sharing.get('scale', '–')}): persistent bytes copied per switch when every "
            f"slot fits, at most {f_round(fit_most)} (target 0: "
            f"{met(targets.get('persistent_bytes_per_switch_when_fitting_is_zero'))}); at {top} "
            f"jobs, bytes copied per switch {f_round(fit.get('bytes_moved_per_switch'))} (fit) "
            f"vs {f_round(naive.get('bytes_moved_per_switch'))} (naive), broker switch median "
            f"{f_us(fit.get('broker_switch_us_median'))} vs "
            f"{f_us(naive.get('broker_switch_us_median'))} µs; no corrupt or dirty byte: "
            f"{met(targets.get('no_corrupt_or_dirty_bytes'))}. — `{COMMANDS['sharing']}`"]


def headline_stress(stress: dict) -> list[str]:
    result = stress.get("result", {})
    return [f"- **Stress run** ({result.get('device', '–')}, {f_s(result.get('seconds'))} s, "
            f"{f_int(result.get('scenarios'))} scenarios): corrupt bytes "
            f"{f_int(result.get('corrupt_bytes'))} of {f_int(result.get('bytes_checked'))} "
            f"checked, leaked blocks {f_int(result.get('leaked_blocks'))}, errors "
            f"{f_int(result.get('errors'))} (target: all zero, {met(stress.get('target_met'))})."
            f" — `{COMMANDS['stress']}`"]


def identical(entry: dict, persistent_bytes: int) -> bool:
    """A re-capture equal to the bundled trace: ops, FLOPs, every buffer, lower bound."""
    return bool(entry["ops_equal"] and entry["buffers_identical"]
                and entry["lower_bound_equal"] and entry["persistent_bytes"] == persistent_bytes)


def capture_bundled_facts(capture: dict) -> dict:
    rows = capture["rows"]
    same = [r for r in rows if identical(r, r["bundled_persistent_bytes"])]
    lifted = [r for r in rows if r not in same and r.get("lifted_from_start")
              and identical(r["lifted_from_start"], r["bundled_persistent_bytes"])]
    return {"rows": len(rows), "identical": len(same), "lifted": len(lifted),
            "differ": len(rows) - len(same) - len(lifted)}


def headline_capture_bundled(capture: dict) -> list[str]:
    f = capture_bundled_facts(capture)
    return [f"- **Bundled traces re-captured** (torch {capture.get('torch', '–')}): "
            f"{f['identical']}/{f['rows']} identical to the bundled file (ops, FLOPs, every "
            f"buffer's size, lifetime, uses and kind); {f['lifted']} more identical with "
            f"`lifted_from_start=True`; {f['differ']} differ. — `{COMMANDS['capture_bundled']}`"]


def headline(results: dict) -> str:
    lines = ["## Headline numbers", "",
             "Each line is computed from the JSON named in its section; the command beside it "
             "regenerates that JSON (then `python bench/run_all.py --render-only` rebuilds this "
             "file).", ""]
    for name, fn in (("static", headline_static), ("pool", headline_pool),
                     ("swap", headline_swap), ("multilevel", headline_multilevel),
                     ("replay", headline_replay), ("blocks", headline_blocks),
                     ("sharing", headline_sharing), ("stress", headline_stress),
                     ("capture_bundled", headline_capture_bundled)):
        if name in results:
            lines += fn(results[name])
        elif name in results.get("unreadable", {}):
            lines.append(f"- {name}: `{JSON_FILES[name]}` could not be read — rerun "
                         f"`{COMMANDS[name]}`")
        else:
            lines.append(f"- {name}: not run (no `{JSON_FILES[name]}`) — run "
                         f"`{COMMANDS[name]}`")
    return "\n".join(lines)


# ---------------------------------------------------------------- machine


def _cell(value) -> str:
    return "–" if value in (None, "") else f"`{value}`"


def machine_section(results: dict) -> str:
    lines = ["## Machine and versions", ""]
    manifest = results.get("run_all")
    if manifest:
        m = manifest.get("machine", {})
        if manifest.get("mode") == "render-only":
            lines += ["Recorded by `bench/run_all.py --render-only` (no benchmark was run by "
                      "`run_all.py` here): the machine that rendered this report. The numbers "
                      "come from the benchmarks' own JSON; what each recorded itself is in the "
                      "second table.", ""]
        lines.append(table(["field", "value"], [[k, _cell(v)] for k, v in m.items()]))
        lines += ["", f"`bench/run_all.py` started {manifest.get('started', '–')}, "
                  f"mode: {manifest.get('mode', '–')}.", ""]
        runs = manifest.get("benchmarks", {})
        if runs:
            lines.append(table(
                ["benchmark", "command", "exit", "seconds", "wrote its results"],
                [[name, f"`{r['command']}`", r["returncode"], f_s(r["seconds"]),
                  "yes" if r.get("results_updated") else "no"] for name, r in runs.items()],
                "lllrl"))
            lines.append("")
    else:
        lines += ["`bench/run_all.py` has not recorded a run in this results directory (the "
                  "report was rendered from results committed by the individual benchmarks). "
                  "What each benchmark recorded itself:", ""]
    rows = []
    for name in ("static", "pool"):
        for key, value in results.get(name, {}).get("machine", {}).items():
            rows.append([name, key, _cell(value)])
    if rows:
        lines.append(table(["benchmark", "field", "value"], rows))
    return "\n".join(lines).rstrip()


# ---------------------------------------------------------------- sections


def static_section(static: dict) -> str:
    rows = static["rows"]
    solvers = list(dict.fromkeys(r["solver"] for r in rows))
    instances = list(dict.fromkeys((r["family"], r["instance"]) for r in rows))
    by = {(r["family"], r["instance"], r["solver"]): r for r in rows}
    body = []
    for family, name in instances:
        first = next(r for r in rows if r["family"] == family and r["instance"] == name)
        cells = []
        for solver in solvers:
            r = by.get((family, name, solver))
            cells.append("" if r is None else f"{f_ratio(r['ratio'])} ({f_s(r['seconds'])} s)")
        targets = [f"{r['solver']}: {met(r['target'] == 'met')}" for r in rows
                   if r["family"] == family and r["instance"] == name and r["target"]]
        mm = next((r["minimalloc_seconds"] for r in rows if r["family"] == family
                   and r["instance"] == name and r["minimalloc_seconds"] is not None), None)
        body.append([family, name, first["buffers"], *cells,
                     "" if mm is None else mm, "; ".join(targets)])
    n_met = sum(1 for r in rows if r["target"] == "met")
    n_missed = sum(1 for r in rows if r["target"] and r["target"] != "met")
    invalid = sum(1 for r in rows if not r["valid"])
    quick = " (**--quick run**: short limits, smaller synthetics)" if static.get("quick") else ""
    return "\n".join([
        "## Static offset planning (`bench/static.py`)", "",
        f"Regenerate: `{COMMANDS['static']}`{quick}. Cells: arena / lower bound (DSA rows: "
        "arena / capacity) and seconds including the validator. MiniMalloc seconds are its "
        "published reference figures. Targets: real traces — `auto` at the lower bound, "
        "faster than MiniMalloc; challenging — `exact` fits within 10x MiniMalloc's time; "
        "LSTM — `auto` at the lower bound; 100,000 random buffers — each greedy under 10 s.",
        "",
        f"Targets as recorded in the JSON: **{n_met} met, {n_missed} missed**; invalid plans: "
        f"{invalid}.", "",
        table(["family", "instance", "buffers", *solvers, "MiniMalloc s", "target"], body,
              "llr" + "l" * len(solvers) + "rl")])


def pool_section(pool: dict) -> str:
    rows = pool["rows"]
    target_names = list(dict.fromkeys(k for r in rows for k in r["targets_met"]))
    body = [[r["trace"], r["allocations"], f_us(r["us_per_alloc"]["planned"]),
             f_us(r["us_per_alloc"]["record"]), f_us(r["us_per_alloc"]["floor"]),
             f_ratio(r["planned_over_floor"]), f_ratio(r["planned_ratio"]),
             f_ratio(r["cupy_ratio"]), f_ratio(r["torch_ratio"]), f_mib(r["rss_bytes"]),
             *[met(r["targets_met"].get(t)) for t in target_names]] for r in rows]
    n_met = sum(1 for r in rows for v in r["targets_met"].values() if v)
    n_all = sum(len(r["targets_met"]) for r in rows)
    m = pool.get("machine", {})
    return "\n".join([
        "## Planned pool (`bench/pool.py`)", "",
        f"Regenerate: `{COMMANDS['pool']}` ({pool.get('iterations')} timed rounds after "
        f"{pool.get('warmup')} warm-up; load average before {m.get('loadavg_before')}, after "
        f"{m.get('loadavg_after')}). µs per allocation (malloc + free through `cupy.empty`) "
        "of the planned pool, the recording pool and the bump-allocator floor; reserved bytes "
        "/ lower bound of the planned pool and of the CuPy and PyTorch allocator models. "
        "Targets: planned <= 1.5x floor, reserved <= 1.01x lower bound and below "
        "both models.", "",
        f"Targets as recorded in the JSON: **{n_met}/{n_all} met**.", "",
        table(["trace", "allocs", "planned µs", "record µs", "floor µs", "planned/floor",
               "reserved/LB", "CuPy/LB", "PyTorch/LB", "RSS MiB", *target_names], body,
              "lrrrrrrrrr" + "l" * len(target_names))])


def swap_section(swap: dict) -> str:
    summary = swap["summary"]
    policies = [k for k in summary[0] if k + "_found" in summary[0]] if summary else []
    head = ["budget", "link", "traces", *policies, "bound", "auto within target"]
    body = [[_kind_prefix(e) + f"{round(e['fraction'] * 100)}%", e["link"], e["traces"],
             *[f_pct(e[p]) if e[p] is not None else f"{e[p + '_found']}/{e['traces']} found"
               for p in policies],
             f_pct(e["bound"]), f"{e['auto_meets_target']}/{e['traces']}"] for e in summary]
    row_policies = list(dict.fromkeys(p for r in swap["rows"] for p in r["policies"]))
    per_row = []
    for r in swap["rows"]:
        cells = []
        for p in row_policies:
            entry = r["policies"].get(p, {})
            cells.append(f_pct(entry["overhead"]) if entry.get("overhead") is not None
                         else entry.get("status", "–"))
        per_row.append([r["trace"], _kind_prefix(r) + f"{round(r['fraction'] * 100)}%", r["link"],
                        f_int(r["budget_bytes"]), f_pct(r["bound"]), *cells,
                        r["policies"].get("auto", {}).get("member", "–")])
    met_n = sum(e["auto_meets_target"] for e in summary)
    all_n = sum(e["traces"] for e in summary)
    methods = sorted({r.get("bound_method") or "dual" for r in swap["rows"]
                      if r["bound"] is not None})
    how = {"lp": "each examined op's relaxation solved as a linear program (HiGHS)",
           "dual": "the dual search of the relaxation (SciPy missing)"}
    return "\n".join([
        "## Budget planners (`bench/swap.py`)", "",
        f"Regenerate: `{COMMANDS['swap']}`. Iteration-time overhead (simulated; 5.0% = 5% "
        "slower than with unlimited memory) of every policy on every training trace, every "
        "inference trace and an LSTM-shaped training step at 90, 70 and 50% of its lower "
        "bound, PCIe Gen5 and Gen4, next to the sound lower bound on any "
        f"plan's overhead (bound: {'; '.join(how.get(m, m) for m in methods)}). Target: "
        f"{SWAP_TARGET}.", "",
        f"Target as recorded in the JSON summary: **auto within target in {met_n}/{all_n} "
        "cases**.", *_swap_totals(swap.get("targets")), "",
        "Medians over the traces (a policy that found no plan for some trace shows how many "
        "it found):", "",
        table(head, body, "llr" + "r" * len(policies) + "rr"), "",
        "Every case (a policy without a plan shows its status):", "",
        table(["trace", "budget", "link", "budget bytes", "bound", *row_policies, "auto chose"],
              per_row, "lllrr" + "r" * len(row_policies) + "l"),
        *loose_bound_part(swap["rows"])])


def _swap_totals(totals: dict | None) -> list[str]:
    """The JSON's cell counts (cells with a feasible bound, those without a validated auto
    plan, target and moonshot misses) as one sentence; nothing for older results."""
    if not totals:
        return []
    missing = totals["without_validated_plan"]
    return ["", f"{totals['bound_feasible']} of {totals['cells']} cells have a feasible bound "
            f"(in the others no plan can exist); without a validated `auto` plan: "
            f"{len(missing)}{' (' + ', '.join(missing) + ')' if missing else ''}; target "
            f"misses: {len(totals['target_misses'])}; moonshot (auto <= 1.2 x bound + 1 point) "
            f"misses: {len(totals['moonshot_misses'])}."]


def _kind_prefix(entry: dict) -> str:
    """``"infer "`` / ``"lstm "`` before a budget cell of those kinds; nothing for training."""
    kind = entry.get("kind", "train")
    return "" if kind == "train" else f"{kind} "


LOOSE_FACTOR = 1.5
"""A case's bound "looks loose" when auto's overhead exceeds ``LOOSE_FACTOR`` × the bound +
1 point; the report then shows where auto's time goes."""


def loose_bound_part(rows: list[dict]) -> list[str]:
    """Where auto's overhead goes in the cases whose bound looks loose, from the breakdown
    ``bench/swap.py`` measured in auto's simulation (empty when no case has one)."""
    picked = []
    for r in rows:
        auto = r["policies"].get("auto", {})
        parts = auto.get("breakdown")
        if (parts is None or r["bound"] is None or auto.get("overhead") is None
                or auto["overhead"] <= LOOSE_FACTOR * r["bound"] + 0.01):
            continue
        ideal = parts["ideal_us"]
        fill = f_pct(parts["peak_working_set_bytes"] / r["budget_bytes"])
        picked.append([r["trace"], f"{round(r['fraction'] * 100)}%", r["link"],
                       f_pct(r["bound"]), f_pct(auto["overhead"]),
                       f_pct(parts["recompute_us"] / ideal),
                       f_pct(max(0.0, parts["stall_before_end_us"]) / ideal),
                       f_pct(parts["tail_us"] / ideal), f"{parts['peak_op']} ({fill})",
                       f_pct(parts["d2h_busy_before_peak"]),
                       f_pct(parts["h2d_busy_after_peak"])])
    if not picked:
        return []
    return ["", "Where auto's overhead goes where the bound looks loose (auto > "
            f"{LOOSE_FACTOR:g} × bound + 1 point), from auto's simulation, as fractions of the "
            "ideal time: recompute; "
            "stalls before the last op ends; the copy-out tail after it (persistent state "
            "offloaded across the iteration boundary); the op with the largest working set "
            "(share of the budget it fills) and how busy the D2H engine is before it and the "
            "H2D engine after it. A D2H engine busy nearly all the time before that op means "
            "the link could not take more off the device by then: what else had to leave was "
            "recomputed (overhead that is all recompute) or was persistent state offloaded "
            "across the boundary (a copy-out tail, and stalls while the H2D engine brings it "
            "back). The bound relaxes each op on its own and lets a buffer be part swapped, "
            "part recomputed, so it never meets that saturation.", "",
            table(["trace", "budget", "link", "bound", "auto", "recompute", "stalls",
                   "copy-out tail", "peak op (of budget)", "D2H busy before", "H2D busy after"],
                  picked, "lllrrrrrrrr")]


def replay_checks(replay: dict) -> list[tuple[str, str, str, bool | None]]:
    """``(what, value, target, met)``: the targets of ``bench/replay.py``, checked on its JSON."""
    mistimed = replay.get("mistimed", {})
    runs = mistimed.get("runs", [])
    converged = sum(1 for run in runs if _converged(run))
    return [
        ("replay / simulator iteration time", f_ratio(replay["replay_over_sim"]),
         f"<= {REPLAY_RATIO_TARGET}", replay["replay_over_sim"] <= REPLAY_RATIO_TARGET),
        ("`h.use()` median on a resident tensor (µs)", f_us(replay["use_median_us"]),
         f"<= {REPLAY_USE_TARGET_US}", replay["use_median_us"] <= REPLAY_USE_TARGET_US),
        ("mis-timed plan: seeded runs at the simulator's floor",
         f"{converged} of {len(runs)}",
         f"late prefetches <= floor within {REPLAY_CONVERGE_ITERATIONS} iterations",
         None if not runs else converged == len(runs)),
        ("corrupt bytes (plan / mis-timed plan)",
         f"{f_int(replay['corrupt_bytes'])} / {f_int(mistimed.get('corrupt_bytes'))}", "0",
         replay["corrupt_bytes"] == 0 and mistimed.get("corrupt_bytes", 0) == 0),
    ]


def replay_section(replay: dict) -> str:
    mistimed = replay.get("mistimed", {})
    facts = [
        ["trace / budget / policy", f"{replay['trace']} / {replay['budget']} "
         f"({f_int(replay['budget_bytes'])} bytes) / {replay['policy']}"],
        ["scaling", f"sizes / {replay['size_scale']}, op times x {replay['time_scale']}, "
         f"link {replay['link_gbps']} GB/s"],
        ["iteration µs (replay)", ", ".join(f_us(x) for x in replay["iteration_us"])],
        ["mean iteration µs (replay / simulator)",
         f"{f_us(replay['mean_iteration_us'])} / {f_us(replay['sim_iteration_us'])}"],
        ["late prefetches per iteration", str(replay["late_prefetches"])],
        ["stall µs per iteration", ", ".join(f_us(x) for x in replay["stall_us"])],
        ["peak device bytes", f_int(replay["peak_device_bytes"])],
        ["bytes checked / corrupt", f"{f_int(replay['bytes_checked'])} / "
         f"{f_int(replay['corrupt_bytes'])}"],
    ]
    runs = [[str(run["seed"]), str(run["late_prefetches"]), str(run["sim_late_floor"]),
             ", ".join(f_us(x) for x in run["stall_us"]), str(run["feedback_moves"]),
             ", ".join(f_us(x) for x in run["iteration_us"]), _yes(_converged(run))]
            for run in mistimed.get("runs", [])]
    checks = [[what, value, target, met(ok)] for what, value, target, ok in
              replay_checks(replay)]
    return "\n".join([
        "## Swap runtime replay (`bench/replay.py`)", "",
        f"Regenerate: `{COMMANDS['replay']}`. The JSON records values, not verdicts: the "
        "targets below are those `bench/replay.py` states, checked here on its "
        "numbers.", "",
        table(["what", "value", "target", "target met"], checks), "",
        table(["measured", "value"], facts), "",
        f"Mis-timed {mistimed.get('policy', '–')} plan (every swap-in triggered at its due "
        f"op), one replay per seed; simulator's iteration time for the mis-timed plan "
        f"{f_us(mistimed.get('sim_iteration_us'))} µs:", "",
        table(["seed", "late prefetches per iteration", "simulator floor",
               "stall µs per iteration", "feedback moves", "iteration µs",
               f"at floor within {REPLAY_CONVERGE_ITERATIONS}"], runs)])


def _yes(flag) -> str:
    return "–" if flag is None else ("yes" if flag else "**no**")


def _two_level_cell(entry: dict | None) -> str:
    """A two-level plan's overhead, or its status when it found none."""
    if not entry:
        return "–"
    if entry.get("overhead") is not None:
        return f_pct(entry["overhead"])
    return entry.get("status", "–")


def multilevel_section(multilevel: dict) -> str:
    body = []
    for r in multilevel["rows"]:
        t, p = r.get("tiers"), r.get("pinned_limited")
        head = [r["trace"], f"{round(r['fraction'] * 100)}%", f_int(r["budget_bytes"]),
                _two_level_cell(r.get("capuchin")), _two_level_cell(r.get("auto"))]
        if t is None:
            body.append([*head, "no two-level plan", *[""] * 9])
            continue
        valid = t["valid"] and (p is None or p["valid"])
        body.append([
            *head, f_pct(t["overhead"]), f"{_yes(t['not_worse'])} ({r['best_two_level']})",
            "valid" if valid else "**INVALID**", sum(t["moves_accepted"].values()),
            t["evaluations"], f_s(t["seconds"]),
            *(["no swaps", "", "", ""] if p is None else
              [f_int(p["pinned_host_bytes"]), f_pct(p["repaired_overhead"]),
               f_pct(p["overhead"]), p["pageable_swaps"]])])
    f = multilevel_facts(multilevel)
    pageable = multilevel.get("pageable", {})
    return "\n".join([
        "## Multi-level placement (`bench/multilevel.py`)", "",
        f"Regenerate: `{COMMANDS['multilevel']}` (several minutes; `--quick` runs one trace at "
        "70% and prints its table without writing the JSON). Simulated iteration-time overhead "
        f"on PCIe {multilevel.get('link', '–')} of the Capuchin-style plan, `auto` and the "
        "`tiers` local search started from the faster of the two (`<= best` checks that it "
        f"never ends slower; each search at most {multilevel.get('search_evaluations', '–')} "
        f"simulations or {f_s(multilevel.get('search_seconds'))} s). The `pinned/2` columns "
        "give pinned host memory half of what that plan keeps pinned at its peak: swaps that "
        f"do not fit go to pageable memory ({f_pct(pageable.get('fraction_of_pinned'))} of "
        f"the pinned bandwidth, {f_us(pageable.get('latency_us'))} µs latency), first "
        "`repaired`, then `searched`. Every plan is checked by the independent swap "
        "validator.", "",
        f"As recorded in the JSON: `tiers` not slower than the best two-level plan in "
        f"**{f['not_worse']}/{f['cases']}** cases (strictly faster in {f['faster']}); valid "
        f"plans {f['valid']}/{f['cases']}; {f['rows'] - f['cases']} of {f['rows']} cases had "
        "no two-level plan.", "",
        table(["trace", "budget", "budget bytes", "capuchin", "auto", "tiers",
               "<= best (best)", "valid", "moves accepted", "simulations", "search s",
               "pinned/2 bytes", "pinned/2 repaired", "pinned/2 searched", "pageable swaps"],
              body, "llrrrrllrrrrrrr")])


def blocks_section(blocks: dict) -> str:
    body = [[r["n"], " + ".join(r["models"]), f_int(r["sum_peak_bytes"]),
             f_int(r["target_bytes"]), f_int(r["floor_bytes"]), f_int(r["pool_bytes"]),
             f_ratio(r["ratio_to_sum_of_peaks"]), f_ratio(r["pool_bytes"] / r["floor_bytes"]),
             _yes(r["within_target"]), "valid" if r["valid"] else "**INVALID**",
             f"{f_int(r['concurrent_pool_bytes'])} "
             f"({'valid' if r['concurrent_valid'] else '**INVALID**'})",
             ", ".join(r["layouts"]), f_s(r["solve_seconds"])] for r in blocks["rows"]]
    params = blocks.get("params", {})
    within = sum(1 for r in blocks["rows"] if r["within_target"])
    return "\n".join([
        "## Several models in one pool of blocks (`bench/blocks.py`)", "",
        f"Regenerate: `{COMMANDS['blocks']}`. Sets of inference models (a name twice: two "
        "replicas) in one shared pool of blocks, models never running at the same time, "
        "against one arena per model (sum of peaks), the target max(peak) + "
        "sum(persistent), and the floor sum(persistent) + max(temporary peak) that no layout "
        "keeping persistent regions apart can beat. `concurrent`: the pool when the models "
        "may run at once (no byte shared). Each model's plan is checked by the independent "
        "validator on its own trace and the pool by `check_pool`. Bytes; parameters: "
        + ", ".join(f"`{k}={', '.join(map(str, v)) if isinstance(v, list) else v}`"
                    for k, v in params.items()) + ".", "",
        f"As recorded in the JSON: within the target in **{within}/{len(blocks['rows'])}** "
        "sets.", "",
        table(["N", "models", "sum of peaks", "max(peak)+sum(persistent)", "floor", "pool",
               "pool/sum of peaks", "pool/floor", "within target", "validator",
               "concurrent pool", "layouts", "solve s"], body, "rlrrrrrrlllll")])


def sharing_section(sharing: dict) -> str:
    """Written against a layout still settling: every field is optional."""
    rows = sharing.get("rows") or []
    body = []
    for r in rows:
        corrupt, dirty = r.get("persistent_corrupt_bytes"), r.get("temporary_dirty_bytes")
        body.append([
            r.get("jobs", "–"), r.get("scenario", "–"), f_int(r.get("capacity_bytes")),
            f_int(r.get("switches")), f_int(r.get("evictions")),
            f_round(r.get("persistent_bytes_per_switch")),
            f_round(r.get("bytes_moved_per_switch")),
            f_round(r.get("temporary_bytes_zeroed_per_switch")),
            f"{f_us(r.get('broker_switch_us_median'))} / {f_us(r.get('broker_switch_us_max'))}",
            f_us(r.get("client_handoff_us_median")), f_ratio(r.get("bytes_vs_naive")),
            f_ratio(r.get("switch_time_vs_naive")), f"{f_int(corrupt)} / {f_int(dirty)}"])
    jobs = sharing.get("jobs") or {}
    job_rows = [[name, f_int(j.get("persistent_bytes")), f_int(j.get("temporary_bytes"))]
                for name, j in jobs.items()]
    targets = sharing.get("targets") or {}
    parts = [
        "## Time-shared device (`bench/sharing.py`)", "",
        f"Regenerate: `{COMMANDS['sharing']}` (`--quick`: 2 jobs only). Jobs are separate "
        "processes built from the bundled inference traces (persistent bytes: the trace's "
        "persistent buffers; temporary: a validated static plan's arena of the rest), sizes "
        f"divided by {sharing.get('scale', '–')}, {sharing.get('iterations', '–')} checked "
        "iterations per job, one per slice, round robin, with the broker in its own process: "
        "`fit` (every persistent slot resident), `evict` (persistent area "
        f"{f_pct(sharing.get('evict_fraction'))} of the slots' bytes: slots evicted to host "
        "and restored), `naive` (each switch copies the whole footprint out and in). Bytes "
        "per switch are means; times are medians (broker: end of a slice to the next grant; "
        "client: last byte touched to the next job's grant, across processes).", "",
        "Targets as recorded in the JSON: "
        + ("; ".join(f"{name.replace('_', ' ')}: {met(ok)}" for name, ok in targets.items())
           or "none recorded") + ".", ""]
    if body:
        parts += [table(["jobs", "scenario", "capacity", "switches", "evictions",
                         "persistent B/switch", "copied B/switch", "zeroed B/switch",
                         "broker switch µs (median / max)", "client handoff µs",
                         "bytes vs naive", "time vs naive", "corrupt / dirty bytes"],
                        body, "rlrrrrrrrrrrr"), ""]
    else:
        parts += ["No rows in `sharing.json`.", ""]
    if job_rows:
        parts.append(table(["job", "persistent bytes", "temporary bytes"], job_rows, "lrr"))
    return "\n".join(parts).rstrip()


def stress_section(stress: dict) -> str:
    result = stress.get("result", {})
    zero = "0"
    rows = [["device", result.get("device", "–"), ""],
            ["seconds", f_s(result.get("seconds")), ""],
            ["scenarios", f_int(result.get("scenarios")), ""],
            ["bytes checked", f_int(result.get("bytes_checked")), ""],
            ["corrupt bytes", f_int(result.get("corrupt_bytes")), zero],
            ["leaked blocks", f_int(result.get("leaked_blocks")), zero],
            ["late prefetches", f_int(result.get("late_prefetches")), ""],
            ["errors", f_int(result.get("errors")), zero],
            ["exit code", f_int(stress.get("exit_code")), zero]]
    return "\n".join([
        "## Stress run (`bench/stress.py`)", "",
        f"Regenerate: `{COMMANDS['stress']}` (emulated device, 2 minutes; `--minutes M` for "
        f"another length). It ran `{stress.get('command', '–')}`. Target: zero "
        "corrupt bytes, zero leaked blocks and no scenario error.", "",
        f"Target as recorded in the JSON: {met(stress.get('target_met'))}.", "",
        table(["quantity", "value", "target"], rows, "lrr")])


def capture_bundled_section(capture: dict) -> str:
    def legacy_cell(r):
        legacy = r.get("lifted_from_start")
        if legacy is None:
            return ""
        return (f"{f_int(legacy['lower_bound_bytes'])}, identical "
                f"{_yes(identical(legacy, r['bundled_persistent_bytes']))}")

    body = [[r["trace"], f"{r['model']} {r['mode']} b{r['batch']}{' amp' if r['amp'] else ''}",
             f_int(r["bundled_lower_bound_bytes"]), f_int(r["lower_bound_bytes"]),
             f"{f_int(r['bundled_buffers'])} / {f_int(r['buffers'])}",
             _yes(r["persistent_bytes"] == r["bundled_persistent_bytes"]),
             _yes(r["ops_equal"]), _yes(r["buffers_identical"]),
             _yes(identical(r, r["bundled_persistent_bytes"])), legacy_cell(r),
             f_s(r["seconds"])] for r in capture["rows"]]
    f = capture_bundled_facts(capture)
    differences = [f"- {r['trace']}: {r['first_difference']}" for r in capture["rows"]
                   if r.get("first_difference")]
    parts = [
        "## Bundled traces re-captured (`bench/capture.py --bundled`)", "",
        f"Regenerate: `{COMMANDS['capture_bundled']}` (about 2 minutes; `--quick` in "
        "`run_all.py` re-captures two small inference traces only). Each bundled trace is "
        "captured again with the configuration its `source` line names (torch "
        f"{capture.get('torch', '–')}, Python {capture.get('python', '–')}) and compared "
        "with the bundled file: lower bound, buffer count, persistent bytes, op names and "
        "FLOPs, and every buffer's (size, start, end, uses, kind) in order. Where they "
        "differ, the capture is re-run with `lifted_from_start=True`, the one convention in "
        "which the recorder of the bundled traces differs.", "",
        f"As recorded in the JSON: **{f['identical']}/{f['rows']}** identical; "
        f"{f['lifted']} more identical with `lifted_from_start=True`; {f['differ']} differ.",
        "",
        table(["trace", "captured as", "bundled lower bound", "re-captured lower bound",
               "buffers (bundled / ours)", "persistent equal", "ops & FLOPs equal",
               "buffers identical", "identical", "with lifted_from_start", "seconds"],
              body, "llrrrlllllr")]
    if differences:
        parts += ["", "Where the default re-capture first differs:", "", *differences]
    return "\n".join(parts)


def missing_section(title: str, name: str, results: dict) -> str:
    """The section of a benchmark whose JSON is absent or does not parse."""
    file = JSON_FILES[name]
    problem = results.get("unreadable", {}).get(name)
    if problem:
        text = f"Could not read `{file}` ({problem}): rerun `{COMMANDS[name]}`."
    else:
        text = f"Not run yet. No `{file}`: run `{COMMANDS[name]}` (or `python " \
               f"bench/run_all.py --only {name}`)."
    return f"## {title}\n\n{text}"


def text_section(title: str, name: str, text: str | None, explain: str) -> str:
    lines = [f"## {title}", "", explain, ""]
    if text is None:
        lines.append(f"Not run yet: `python bench/run_all.py --only {name}` saves its output.")
    elif text.lstrip().startswith("|"):
        lines.append(text.strip())
    else:
        lines += ["```", text.rstrip(), "```"]
    return "\n".join(lines)


def figures_section(figures: dict | None, results_dir: Path) -> str:
    lines = ["## Pictures", ""]
    if not figures:
        return "\n".join([*lines, f"Not drawn yet: `{COMMANDS['figures']}` draws them."])
    lines += [f"`{figures['trace']}`, drawn by `{COMMANDS['figures']}` (matplotlib "
              f"{figures.get('matplotlib', '–')}) from the bundled trace, planned here "
              "(deterministically).", ""]
    captions = {
        "layout": "Static layout of the `{solver}` plan: address × time, arena {arena} bytes, "
                  "lower bound {lower_bound} bytes.",
        "memory": "Memory over time: the plan's resident bytes vs the CuPy-pool and "
                  "PyTorch-allocator models' reserved bytes (peaks: plan {planned}, CuPy "
                  "{cupy}, PyTorch {torch}, lower bound {lower_bound} bytes).",
        "timeline": "Stream timeline (compute, H2D, D2H, stalls) of the `auto` plan at "
                    "{percent}% of the lower bound ({budget} bytes, {link}, chose {member}): "
                    "simulated overhead {overhead}, {swapped} bytes swapped, {recompute} µs "
                    "of recompute.",
        "budget_layout": "Layout of the same {percent}% plan, swapped and recomputed "
                         "intervals marked.",
    }
    for key, file in FIGURES.items():
        info = figures.get("pictures", {}).get(key)
        if info is None or not (Path(results_dir) / "figures" / file).is_file():
            continue
        lines += [captions[key].format(**info["caption"]), "", f"![{key}](figures/{file})", ""]
    return "\n".join(lines).rstrip()


# the JSON sections in report order (``capture_bundled`` comes after the capture table)
SECTIONS = (("static", static_section), ("pool", pool_section), ("swap", swap_section),
            ("multilevel", multilevel_section), ("replay", replay_section),
            ("blocks", blocks_section), ("sharing", sharing_section),
            ("stress", stress_section))
SECTION_TITLES = {
    "static": "Static offset planning (`bench/static.py`)",
    "pool": "Planned pool (`bench/pool.py`)",
    "swap": "Budget planners (`bench/swap.py`)",
    "multilevel": "Multi-level placement (`bench/multilevel.py`)",
    "replay": "Swap runtime replay (`bench/replay.py`)",
    "blocks": "Several models in one pool of blocks (`bench/blocks.py`)",
    "sharing": "Time-shared device (`bench/sharing.py`)",
    "stress": "Stress run (`bench/stress.py`)",
    "capture_bundled": "Bundled traces re-captured (`bench/capture.py --bundled`)",
}


def render(results_dir: Path = RESULTS) -> str:
    """The whole report, a pure function of the files under ``results_dir``."""
    results = load_results(results_dir)
    parts = [
        "# cupool benchmark report", "",
        "Generated by `bench/run_all.py` (`--render-only` rebuilds it from the saved results "
        "without running anything). Every number below is read from the JSON files in "
        "`bench/results/`; none is typed by hand.",
        "", headline(results), "", machine_section(results)]
    for name, fn in SECTIONS:
        parts += ["", fn(results[name]) if name in results else
                  missing_section(SECTION_TITLES[name], name, results)]
    parts += ["", text_section(
        "Exact solver driver (`bench/exact_dsa.py`)", "exact_dsa", results.get("exact_dsa"),
        f"Regenerate: `{COMMANDS['exact_dsa']}`. Its printed table (it writes no JSON), as "
        "saved by `bench/run_all.py`.")]
    parts += ["", text_section(
        "Capture (`bench/capture.py`)", "capture", results.get("capture"),
        f"Regenerate: `{COMMANDS['capture']}`. The table it prints (it writes traces, no "
        "JSON), as saved by `bench/run_all.py` (`--quick`: tiny `--small` configurations).")]
    parts += ["", capture_bundled_section(results["capture_bundled"])
              if "capture_bundled" in results else
              missing_section(SECTION_TITLES["capture_bundled"], "capture_bundled", results)]
    parts += ["", figures_section(results.get("figures"), results_dir), ""]
    return "\n".join(parts)


# ---------------------------------------------------------------- pictures


def draw_figures(results_dir: Path = RESULTS, traces_dir: Path = TRACES) -> dict:
    """Plan the ResNet-50 training trace (static ``auto`` and budget ``auto`` at 70%), draw
    the PNGs under ``results_dir/figures`` and write ``figures.json`` (what they show)."""
    import matplotlib

    from cupool.io import load_trace
    from cupool.planning import plan as plan_trace
    from cupool.planning.budget import plan_with_budget
    from cupool.planning.budget.recipes import with_recompute_recipes
    from cupool.sim import cost_model
    from cupool.viz import plot_layout, plot_memory, plot_timeline

    out = Path(results_dir) / "figures"
    out.mkdir(parents=True, exist_ok=True)
    trace = load_trace(Path(traces_dir) / f"{FIGURE_TRACE}.trace.json.gz")
    static = plan_trace(trace, "auto")
    plot_layout(trace, static, out / FIGURES["layout"])
    peaks = plot_memory(trace, static, out / FIGURES["memory"])
    cost = cost_model(FIGURE_LINK)
    budget_trace = with_recompute_recipes(trace)
    budget = int(budget_trace.lower_bound_bytes() * FIGURE_BUDGET)
    budgeted = plan_with_budget(budget_trace, budget, "auto", cost)
    if not budgeted.feasible:
        raise RuntimeError(f"no plan at {FIGURE_BUDGET:.0%}: {budgeted.reason}")
    summary = plot_timeline(budgeted.trace, budgeted.plan, cost, out / FIGURES["timeline"])
    plot_layout(budgeted.trace, budgeted.plan, out / FIGURES["budget_layout"])
    percent = round(FIGURE_BUDGET * 100)
    document = {
        "trace": trace.name, "matplotlib": matplotlib.__version__,
        "pictures": {
            "layout": {"file": FIGURES["layout"], "caption": {
                "solver": "auto", "arena": static.arena_bytes,
                "lower_bound": static.lower_bound_bytes}},
            "memory": {"file": FIGURES["memory"], "peaks": peaks, "caption": {
                "planned": peaks.get("planned_resident_peak_bytes"),
                "cupy": peaks.get("cupy_peak_reserved_bytes"),
                "torch": peaks.get("torch_peak_reserved_bytes"),
                "lower_bound": peaks.get("lower_bound_bytes")}},
            "timeline": {"file": FIGURES["timeline"], "summary": summary, "caption": {
                "percent": percent, "budget": budget, "link": FIGURE_LINK,
                "member": budgeted.member or "–",
                "overhead": f_pct(summary.get("overhead")),
                "swapped": f_int(summary.get("swapped_bytes")),
                "recompute": f_us(summary.get("recompute_us"))}},
            "budget_layout": {"file": FIGURES["budget_layout"], "caption": {
                "percent": percent}},
        },
    }
    (out / "figures.json").write_text(json.dumps(document, indent=1, default=str) + "\n")
    return document


def write_report(results_dir: Path = RESULTS, out: Path | None = None) -> Path:
    out = Path(out) if out else Path(results_dir) / "REPORT.md"
    out.write_text(render(results_dir))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--figures", action="store_true", help="(re)draw the PNGs first")
    args = parser.parse_args(argv)
    if args.figures:
        draw_figures(args.results)
    print(f"wrote {write_report(args.results, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
