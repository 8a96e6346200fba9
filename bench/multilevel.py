"""Benchmark of multi-level placement (device, pinned and pageable host memory): the ``tiers``
local search against the Capuchin-style plan and ``auto`` on the shared training traces at
70% and 50% of their lower bound, PCIe Gen5, simulated.

``tiers`` starts from the best two-level plan found here (the faster of ``auto`` and
``capuchin``) and keeps only faster plans, so its simulated time is never above that plan's
(the column ``<= best`` checks it). Every plan is checked by the independent swap
validator. A second run gives pinned host memory only half of what the two-level plan
keeps pinned at its peak: swaps that do not fit go to pageable memory (slower copies, see
:mod:`cupool.sim.cost`), longest gap per byte first (``repaired``), and the search then
improves that start (``searched``).

    python bench/multilevel.py                   # writes bench/results/multilevel.json
                                                 # (minutes: `auto` alone takes most)
    python bench/multilevel.py --quick           # one trace, 70% only
    python bench/multilevel.py --evaluations 300 # simulations per search (default 120)

Each search is bounded by a number of simulations (so the table repeats exactly on any
machine) and, as a safety, by ``--seconds`` (default 30) of wall time.

Overheads are fractions of the ideal iteration (0.05 = 5%).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from cupool.check import validate_plan
from cupool.io import load_trace
from cupool.planning.budget import plan_with_budget
from cupool.planning.budget.multilevel import TierParams, pinned_peak_bytes, search_tiers
from cupool.planning.budget.recipes import with_recompute_recipes
from cupool.sim import cost_model, simulate

TRACES = Path(__file__).resolve().parent.parent / "cupool" / "data" / "traces"


def _two_level(trace, budget, policy, cost):
    started = time.perf_counter()
    result = plan_with_budget(trace, budget, policy, cost)
    plan = result.plan
    entry = {"status": plan.status.value, "seconds": round(time.perf_counter() - started, 3)}
    if not result.feasible:
        entry["reason"] = result.reason
        return entry, None, None
    check = validate_plan(result.trace, plan)
    entry["valid"] = check.valid
    if not check.valid:
        entry["error"] = f"{check.rule}: {check.message}"
        return entry, None, None
    sim = simulate(result.trace, plan, cost, validate=False)
    entry.update(overhead=sim.overhead, iteration_us=sim.iteration_us,
                 swapped_bytes=sim.swapped_bytes)
    return entry, plan, sim


def _searched(trace, seed_plan, cost, params):
    started = time.perf_counter()
    plan = search_tiers(trace, seed_plan, cost, params)
    stats = plan.stats
    check = validate_plan(trace, plan)
    sim = simulate(trace, plan, cost, validate=False)
    return {"valid": check.valid, "error": check.message or None, "overhead": sim.overhead,
            "iteration_us": sim.iteration_us, "swapped_bytes": sim.swapped_bytes,
            "seconds": round(time.perf_counter() - started, 3),
            "moves_accepted": stats["moves_accepted"], "evaluations": stats["evaluations"],
            "pinned_peak_bytes": stats["pinned_peak_bytes"],
            "pageable_swaps": stats["pageable_swaps"]}


def run(quick: bool, seconds: float, evaluations: int) -> dict:
    paths = sorted(TRACES.glob("*train*.trace.json.gz"))
    fractions = (0.7, 0.5)
    if quick:
        paths = [p for p in paths if "resnet50_train_b32_bf16" in p.name]
        fractions = (0.7,)
    cost = cost_model("gen5")
    rows = []
    for path in paths:
        trace = with_recompute_recipes(load_trace(path))
        for fraction in fractions:
            budget = int(trace.lower_bound_bytes() * fraction)
            row = {"trace": path.name.split(".")[0], "fraction": fraction, "budget_bytes": budget}
            seeds = {}
            for policy in ("capuchin", "auto"):
                row[policy], plan, sim = _two_level(trace, budget, policy, cost)
                if plan is not None:
                    seeds[policy] = (sim.iteration_us, plan)
            if not seeds:
                row["tiers"] = None
                rows.append(row)
                print(f"{row['trace']:36s} {int(fraction * 100)}%  no two-level plan", flush=True)
                continue
            best_policy = min(seeds, key=lambda p: seeds[p][0])
            best_us, best_plan = seeds[best_policy]
            row["best_two_level"] = best_policy
            params = TierParams(time_limit_s=seconds, max_evaluations=evaluations)
            row["tiers"] = _searched(trace, best_plan, cost, params)
            row["tiers"]["not_worse"] = row["tiers"]["iteration_us"] <= best_us + 1e-6
            limit = pinned_peak_bytes(trace, best_plan) // 2
            row["pinned_limited"] = None  # the best plan swaps nothing: no pinned bytes to halve
            if limit > 0:
                limited = _searched(trace, best_plan, cost, replace(
                    params, pinned_host_bytes=limit))
                start_plan = search_tiers(trace, best_plan, cost, TierParams(
                    pinned_host_bytes=limit, max_evaluations=1))
                start = simulate(trace, start_plan, cost)
                row["pinned_limited"] = {"pinned_host_bytes": limit,
                                         "repaired_overhead": start.overhead,
                                         "repaired_valid": start.feasible, **limited}
            rows.append(row)
            auto = row["auto"].get("overhead")
            limited_note = ("n/a (no swaps)" if row["pinned_limited"] is None else
                            f"repaired {_pct(row['pinned_limited']['repaired_overhead'])} "
                            f"searched {_pct(row['pinned_limited']['overhead'])}")
            print(f"{row['trace']:36s} {int(fraction * 100)}%  capuchin "
                  f"{_pct(row['capuchin'].get('overhead'))}  auto {_pct(auto)}"
                  f"  tiers {_pct(row['tiers']['overhead'])} "
                  f"{'ok' if row['tiers']['not_worse'] else 'WORSE'} "
                  f"({'valid' if row['tiers']['valid'] else 'INVALID'}); pinned/2: "
                  f"{limited_note}", flush=True)
    return {"rows": rows, "link": "gen5", "search_seconds": seconds,
            "search_evaluations": evaluations,
            "pageable": {"fraction_of_pinned": cost.level_gbps("h2d", "pageable") / cost.h2d_gbps,
                         "latency_us": cost.level_latency_us("pageable")}}


def _pct(x) -> str:
    return "   -   " if x is None else f"{100 * x:6.2f}%"


def print_table(rows) -> None:
    print("\n| trace | budget | capuchin | auto | tiers | tiers <= best two-level | valid | "
          "moves accepted | pinned/2: repaired | pinned/2: searched | pageable swaps |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        t = r.get("tiers")
        if t is None:
            print(f"| {r['trace']} | {int(r['fraction'] * 100)}% | - | - | no plan | | | | | | |")
            continue
        p = r["pinned_limited"]
        valid = t["valid"] and (p is None or p["valid"])
        limited = ("n/a (no swaps) | n/a | 0" if p is None else
                   f"{_pct(p['repaired_overhead'])} | {_pct(p['overhead'])} | "
                   f"{p['pageable_swaps']}")
        print(f"| {r['trace']} | {int(r['fraction'] * 100)}% | "
              f"{_pct(r['capuchin'].get('overhead'))} | {_pct(r['auto'].get('overhead'))} | "
              f"{_pct(t['overhead'])} | {'yes' if t['not_worse'] else 'NO'} "
              f"({r['best_two_level']}) | {'valid' if valid else 'INVALID'} | "
              f"{sum(t['moves_accepted'].values())} | {limited} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--evaluations", type=int, default=120)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" /
                                             "multilevel.json"))
    args = parser.parse_args(argv)
    result = run(args.quick, args.seconds, args.evaluations)
    print_table(result["rows"])
    if not args.quick:
        Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    ok = all(r.get("tiers") is None or (
        r["tiers"]["valid"] and r["tiers"]["not_worse"]
        and (r["pinned_limited"] is None or r["pinned_limited"]["valid"]))
        for r in result["rows"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
