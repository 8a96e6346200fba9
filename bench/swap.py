"""Benchmark of the budget planners: every shared training trace at 90/70/50% of
its lower bound, on PCIe Gen5 and Gen4, every policy and the sound lower bound side by side.

Every plan is checked by the independent validator (an invalid plan is counted as a
failure and printed) and simulated; the bound is computed on the same trace the plans are
made for (with recompute recipes, derived when the trace has none).

    python bench/swap.py            # full table, writes bench/results/swap.json
    python bench/swap.py --quick    # one small trace, 70% only

Overheads are fractions (0.05 = 5%); medians are over the traces; "target" is
``auto <= 2 x bound + 5 percentage points``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from cupool.check import validate_plan
from cupool.io import load_trace
from cupool.planning.budget import POLICY_NAMES, plan_with_budget
from cupool.planning.budget.engine.residency import working_set_bytes
from cupool.planning.budget.recipes import with_recompute_recipes
from cupool.sim import cost_model, overhead_lower_bound, simulate

TRACES = Path(__file__).resolve().parent.parent / "cupool" / "data" / "traces"
POLICIES = POLICY_NAMES


def run(quick: bool) -> dict:
    paths = sorted(TRACES.glob("*train*.trace.json.gz"))
    fractions = (0.9, 0.7, 0.5)
    if quick:
        paths = [p for p in paths if "resnet50_train_b32_bf16" in p.name]
        fractions = (0.7,)
    rows = []
    for path in paths:
        trace = with_recompute_recipes(load_trace(path))
        for fraction in fractions:
            budget = int(trace.lower_bound_bytes() * fraction)
            for link in ("gen5", "gen4"):
                cost = cost_model(link)
                bound = overhead_lower_bound(trace, budget, cost)
                row = {"trace": path.name.split(".")[0], "fraction": fraction, "link": link,
                       "budget_bytes": budget, "bound": bound.overhead if bound.feasible
                       else None, "bound_method": bound.details.get("method"),
                       "policies": {}}
                for policy in POLICIES:
                    started = time.perf_counter()
                    result = plan_with_budget(trace, budget, policy, cost)
                    plan = result.plan
                    seconds = time.perf_counter() - started
                    entry = {"status": plan.status.value, "seconds": round(seconds, 3)}
                    if plan.status.value == "feasible":
                        check = validate_plan(result.trace, plan)
                        entry["valid"] = check.valid
                        if check.valid:
                            sim = simulate(result.trace, plan, cost, validate=False)
                            entry.update(overhead=sim.overhead, stall_us=sim.stall_us,
                                         recompute_us=sim.recompute_us,
                                         swapped_bytes=sim.swapped_bytes)
                        else:
                            entry["error"] = f"{check.rule}: {check.message}"
                            print(f"INVALID {policy} {row['trace']} {fraction} {link}: "
                                  f"{check.message}", file=sys.stderr)
                    else:
                        entry["reason"] = result.reason
                    if result.member is not None:
                        entry["member"] = result.member
                    if policy == "auto" and entry.get("valid"):
                        entry["breakdown"] = breakdown(result.trace, sim)
                    row["policies"][policy] = entry
                rows.append(row)
                auto = row["policies"]["auto"].get("overhead")
                meets = (row["bound"] is not None and auto is not None
                         and auto <= 2 * row["bound"] + 0.05)
                print(f"{row['trace']:40s} {int(fraction * 100):3d}% {link}  bound "
                      f"{_pct(row['bound'])}  auto {_pct(auto)} {'✓' if meets else '✗'} "
                      f"({row['policies']['auto'].get('member', '-')}, "
                      f"{row['policies']['auto']['seconds']:.1f} s)", flush=True)
    return {"rows": rows, "summary": summarize(rows)}


def breakdown(trace, sim) -> dict:
    """Where a plan's overhead goes, from its simulation: recompute, stalls before the
    last op ends, the copy-out tail past it, and how busy each copy engine is on either
    side of the op with the largest working set (the peak every plan must clear)."""
    ws = working_set_bytes(trace)
    peak = int(ws.argmax())
    peak_start = sim.op_times[peak][1]
    peak_end = sim.op_times[peak][2]
    last_end = sim.op_times[-1][2]

    def busy(direction, a, b):
        spans = [(c[4], c[5]) for c in sim.copies if c[1] == direction]
        return sum(max(0.0, min(e, b) - max(s, a)) for s, e in spans) / (b - a) if b > a else 0.0

    return {"ideal_us": sim.ideal_us, "recompute_us": sim.recompute_us,
            "stall_before_end_us": max(0.0, last_end - sim.ideal_us - sim.recompute_us),
            "tail_us": sim.iteration_us - last_end, "peak_op": peak,
            "peak_working_set_bytes": int(ws[peak]),
            "d2h_busy_before_peak": busy("d2h", 0.0, peak_start),
            "h2d_busy_after_peak": busy("h2d", peak_end, last_end)}


def _pct(x) -> str:
    return "   -   " if x is None else f"{100 * x:6.1f}%"


def summarize(rows) -> list[dict]:
    out = []
    for fraction in (0.9, 0.7, 0.5):
        for link in ("gen5", "gen4"):
            group = [r for r in rows if r["fraction"] == fraction and r["link"] == link]
            if not group:
                continue
            entry = {"fraction": fraction, "link": link, "traces": len(group)}
            for policy in POLICIES:
                values = [r["policies"][policy].get("overhead") for r in group]
                found = [v for v in values if v is not None]
                entry[policy] = statistics.median(found) if len(found) == len(values) else None
                entry[f"{policy}_found"] = len(found)
            bounds = [r["bound"] for r in group if r["bound"] is not None]
            entry["bound"] = statistics.median(bounds) if bounds else None
            entry["auto_meets_target"] = sum(
                1 for r in group if r["bound"] is not None
                and r["policies"]["auto"].get("overhead") is not None
                and r["policies"]["auto"]["overhead"] <= 2 * r["bound"] + 0.05)
            out.append(entry)
    return out


def print_table(summary) -> None:
    head = " | ".join(f"{p:>10s}" for p in POLICIES)
    print(f"\n| budget | link | {head} | {'bound':>8s} | auto meets target |")
    for e in summary:
        cells = " | ".join(_pct(e[p]) if e[p] is not None
                           else f"{e[p + '_found']}/{e['traces']} found" for p in POLICIES)
        print(f"| {int(e['fraction'] * 100)}% | {e['link']} | {cells} | {_pct(e['bound'])} | "
              f"{e['auto_meets_target']}/{e['traces']} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "swap.json"))
    args = parser.parse_args(argv)
    result = run(args.quick)
    print_table(result["summary"])
    if not args.quick:
        Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
