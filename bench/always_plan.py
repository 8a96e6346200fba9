"""Benchmark: does ``auto`` plan every budget that every op's working set fits, on shapes
it was not tuned on?

Generated shapes (:mod:`cupool.planning.shapes`, seeded), each at 90/70/50/30% of its lower
bound and at its largest working set (the smallest budget any plan can have), on two cost
models each:

- ``recurrent``: a 4-layer recurrent cell unrolled over 14 steps, 423 ops of 15-60 µs, at
  55 GB/s with a fixed cost of 50 and of 100 µs per copy, pinned or pageable (what the
  emulated device measures: every copy costs more than an op);
- ``near-budget`` (seeds 0 and 1): 27 ops, 3 buffers of 312 MiB, 60 temporaries of 1-64 MiB,
  8 weights; Gen5 and Gen4;
- ``persistent-heavy``: weights, gradients and Adam moments over 80% of the peak; Gen5, Gen4;
- ``inference-no-writes``: a 40-layer forward pass whose trace has no ``writes`` (weights
  may be written, as far as the planner knows); Gen5, Gen4;
- ``inference-read-only``: the same trace with its persistent state declared read-only
  (``--read-only-state``: weights dropped, never copied back); Gen5, Gen4.

Per cell: whether ``auto`` returned a plan the independent validator accepts, its
simulated overhead, the sound lower bound, and whether the overhead is within
``2 x bound + 5 points`` (target) and ``1.2 x bound + 1 point`` (moonshot); a cell whose bound
is infeasible (no plan can exist) has no target. ::

    python bench/always_plan.py            # the table; writes bench/results/always_plan.json
    python bench/always_plan.py --only recurrent --fractions 0.3

The JSON holds every cell (with the member that won and ``auto``'s planning time), the
counts, the cells without a validated plan, the target misses, the commit and the machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from auto_speed import code_version, machine

from cupool.check import validate_plan
from cupool.core.read_only import read_only_state
from cupool.core.vocabulary import Trace
from cupool.planning.budget import plan_with_budget
from cupool.planning.budget.working_sets import required_bytes
from cupool.planning.shapes import (
    inference_trace,
    near_budget_trace,
    persistent_heavy,
    recurrent_trace,
)
from cupool.sim import cost_model, overhead_lower_bound

ROOT = Path(__file__).resolve().parent.parent
FRACTIONS = (0.9, 0.7, 0.5, 0.3)
WORKING_SET = "ws"
"""The budget column of the cells at the largest working set."""


class Shape(NamedTuple):
    name: str
    make: Callable[[], Trace]
    links: dict  # link label -> cost model


GEN = {"gen5": cost_model("gen5"), "gen4": cost_model("gen4")}
SHAPES = (
    Shape("recurrent", lambda: recurrent_trace(14, layers=4, batch=16, inputs=256, hidden=256),
          {"55GBps 50us": cost_model(55.0, latency_us=50.0, pageable_latency_us=50.0),
           "55GBps 100us": cost_model(55.0, latency_us=100.0, pageable_latency_us=100.0)}),
    Shape("near-budget-0", lambda: near_budget_trace(0), GEN),
    Shape("near-budget-1", lambda: near_budget_trace(1), GEN),
    Shape("persistent-heavy", persistent_heavy, GEN),
    Shape("inference-no-writes", inference_trace, GEN),
    Shape("inference-read-only", lambda: read_only_state(inference_trace()), GEN),
)


def budgets(trace: Trace, fractions) -> list[tuple[str, int]]:
    """``(label, bytes)``: each fraction of the lower bound, and the largest working set."""
    out = [(f"{round(f * 100)}%", int(f * trace.lower_bound_bytes())) for f in fractions]
    return [*out, (WORKING_SET, int(required_bytes(trace).max()))]


def plan_cell(shape: str, trace: Trace, label: str, budget: int, link: str, cost) -> dict:
    started = time.perf_counter()
    result = plan_with_budget(trace, budget, "auto", cost)
    seconds = time.perf_counter() - started
    bound = overhead_lower_bound(result.trace, budget, cost)
    row = {"shape": shape, "trace": trace.name, "ops": trace.num_ops,
           "buffers": len(trace.buffers), "budget": label, "budget_bytes": budget,
           "link": link, "bound": bound.overhead if bound.feasible else None,
           "status": result.plan.status.value, "member": result.member,
           "seconds": round(seconds, 2), "valid": False, "overhead": None}
    if result.feasible:
        check = validate_plan(result.trace, result.plan)
        row["valid"] = check.valid
        if check.valid:
            row["overhead"] = float(result.simulation.overhead)
        else:
            row["error"] = f"{check.rule}: {check.message}"
    else:
        row["reason"] = result.reason
    if row["bound"] is None:
        row["target_met"] = row["moonshot_met"] = None
    else:
        overhead = row["overhead"]
        row["target_met"] = bool(overhead is not None and overhead <= 2 * row["bound"] + 0.05)
        row["moonshot_met"] = bool(overhead is not None
                                   and overhead <= 1.2 * row["bound"] + 0.01)
    return row


def run_info() -> dict:
    """Where and from what the table is made: the commit and the paths under ``cupool/``
    that differ from it, the machine, the arguments."""
    return {**code_version(), **machine(), "argv": sys.argv[1:]}


def _pct(x) -> str:
    return "     -" if x is None else f"{100 * x:5.1f}%"


def _mark(met) -> str:
    return "-" if met is None else ("yes" if met else "NO")


def print_row(row: dict) -> None:
    plan = "yes" if row["valid"] else ("no plan can exist" if row["bound"] is None else "NO")
    print(f"| {row['shape']:<19} | {row['budget']:>4} | {row['link']:<12} | {plan:<5} | "
          f"{_pct(row['overhead'])} | {_pct(row['bound'])} | {_mark(row['target_met']):>6} | "
          f"{_mark(row['moonshot_met']):>8} | {row['seconds']:6.1f} | {row['member'] or '-'} |",
          flush=True)


def totals(rows: list[dict]) -> dict:
    judged = [r for r in rows if r["bound"] is not None]

    def cells(rule):
        return [f"{r['shape']} {r['budget']} {r['link']}" for r in judged if rule(r)]

    return {"cells": len(rows), "bound_feasible": len(judged),
            "validated": sum(1 for r in judged if r["valid"]),
            "without_validated_plan": cells(lambda r: not r["valid"]),
            "target_misses": cells(lambda r: not r["target_met"]),
            "moonshot_misses": cells(lambda r: not r["moonshot_met"])}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated: shapes whose name "
                                                    "contains one of these")
    parser.add_argument("--fractions", default=",".join(str(f) for f in FRACTIONS),
                        help="comma-separated fractions of each trace's lower bound")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "always_plan.json"))
    args = parser.parse_args(argv)
    only = [w for w in args.only.split(",") if w]
    fractions = [float(f) for f in args.fractions.split(",") if f]
    info, began, rows = run_info(), time.perf_counter(), []
    print("| shape               | budget | link       | valid plan | overhead | bound | "
          "target | moonshot | auto s | member |")
    for shape in SHAPES:
        if only and not any(w in shape.name for w in only):
            continue
        trace = shape.make()
        for label, budget in budgets(trace, fractions):
            for link, cost in shape.links.items():
                row = plan_cell(shape.name, trace, label, budget, link, cost)
                rows.append(row)
                print_row(row)
    counted = totals(rows)
    print(f"\n{counted['bound_feasible']} of {counted['cells']} cells have a feasible bound; "
          f"validated plans in {counted['validated']}; target misses: "
          f"{len(counted['target_misses'])}; moonshot misses: "
          f"{len(counted['moonshot_misses'])}")
    for cell in counted["without_validated_plan"]:
        print(f"  without a validated plan: {cell}")
    seconds = round(time.perf_counter() - began, 1)
    print(f"run: {seconds:.0f} s, commit {info['commit']}")
    if not only and args.fractions == ",".join(str(f) for f in FRACTIONS):
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(
            {"benchmark": "always_plan", "rows": rows, "totals": counted,
             "run": {**info, "seconds": seconds}}, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
