"""Why ``auto`` misses its target in ``bench/always_plan.py``'s cells: the numbers behind each.

    python bench/always_plan_diagnose.py                    # every miss of always_plan.json
    python bench/always_plan_diagnose.py --only recurrent

Reads ``bench/results/always_plan.json``, re-plans every cell whose bound is feasible and
whose ``auto`` plan misses the target (``2 x bound + 5 points``) or was not validated, on
the shape, budget and link of the row, and writes
``bench/results/always_plan_diagnosis.json``: per cell what
:func:`swap_diagnose.take_apart` finds (the deficit, the bound's numbers, every member's
result, the bytes and copies each way, and where the simulated time goes: waits while a
copy in ran against waits with the link idle, recompute, the longest waits).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from always_plan import SHAPES, WORKING_SET, budgets, run_info
from swap_diagnose import take_apart, write_diagnoses

from cupool.planning.budget import plan_with_budget
from cupool.sim import overhead_lower_bound

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def misses(results: dict, only=()) -> list[dict]:
    """The rows of ``results`` (``bench/always_plan.py``'s JSON) with a feasible bound whose
    plan misses the target or was not validated, of the shapes named in ``only`` (all when
    empty)."""
    return [r for r in results["rows"] if r["bound"] is not None
            and not (r["valid"] and r["target_met"])
            and (not only or any(word in r["shape"] for word in only))]


def diagnose(row: dict) -> dict:
    """Re-plan the cell of ``row`` with ``auto`` and take its simulation apart."""
    shape = next((s for s in SHAPES if s.name == row["shape"]), None)
    if shape is None or row["link"] not in shape.links:
        raise SystemExit(f"{row['shape']} {row['link']}: not a cell of bench/always_plan.py")
    trace = shape.make()
    label = row["budget"]
    fractions = [float(label[:-1]) / 100] if label[:-1].isdigit() and label[-1] == "%" else []
    budget = dict(budgets(trace, fractions)).get(label)
    if budget is None:
        raise SystemExit(f"{row['shape']}: budget {label!r} is not a cell of "
                         f"bench/always_plan.py (expected a percentage such as '70%' or "
                         f"'{WORKING_SET}')")
    cost = shape.links[row["link"]]
    result = plan_with_budget(trace, budget, "auto", cost)
    bound = overhead_lower_bound(result.trace, budget, cost)
    return {"trace": row["shape"], "shape": row["shape"],
            "budget": row["budget"], "fraction": budget / trace.lower_bound_bytes(),
            "link": row["link"], "budget_bytes": budget,
            **take_apart(result.trace, budget, cost, result, bound)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS / "always_plan.json")
    parser.add_argument("--only", default="",
                        help="comma-separated: only shapes whose name contains one of these")
    parser.add_argument("--out", type=Path, default=RESULTS / "always_plan_diagnosis.json")
    args = parser.parse_args(argv)
    results = json.loads(args.results.read_text())
    rows = misses(results, [w for w in args.only.split(",") if w])
    write_diagnoses(rows, diagnose, run_info(), args.out,
                    {"always_plan_run": results.get("run")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
