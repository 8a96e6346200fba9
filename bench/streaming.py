"""Benchmark of weight streaming: ``auto`` on inference traces with and without ``writes``.

For each inference trace (the bundled ``*infer*`` traces and any trace given on the
command line), at 90/70/50% of its lower bound on PCIe Gen5 and Gen4, ``auto`` plans the
trace twice, the way ``bench/swap.py`` does (recompute recipes derived, every plan
validated and simulated, the sound bound beside it):

- ``unknown``: the trace without ``writes`` (every use may write: each eviction is a copy
  out; what cupool did before ``writes`` existed, and still does for such traces);
- ``writes``: the trace with its ``writes`` -- as captured, or, for a trace captured before
  captures recorded them, every persistent buffer read-only (``writes: []``: an inference
  step writes no weight) and temporaries unknown.

The bound is computed for each variant on the trace it plans (clean data needs no copy
out, so the bound with ``writes`` is lower or equal). "target" is
``auto <= 2 x bound + 5 percentage points``.

    python bench/streaming.py [TRACE ...]        # writes bench/results/streaming.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from cupool.check import validate_plan
from cupool.core.vocabulary import PERSISTENT, SwapOut
from cupool.io import load_trace
from cupool.planning.budget import plan_with_budget
from cupool.planning.budget.recipes import with_recompute_recipes
from cupool.sim import cost_model, overhead_lower_bound, simulate

TRACES = Path(__file__).resolve().parent.parent / "cupool" / "data" / "traces"
FRACTIONS = (0.9, 0.7, 0.5)
LINKS = ("gen5", "gen4")


def without_writes(trace):
    return replace(trace, buffers=tuple(replace(b, writes=None) for b in trace.buffers))


def with_writes(trace):
    """The trace's own ``writes`` when it has any, else read-only persistent buffers."""
    if any(b.writes is not None for b in trace.buffers):
        return trace
    return replace(trace, buffers=tuple(replace(b, writes=()) if b.kind == PERSISTENT else b
                                        for b in trace.buffers))


def cell(trace, budget: int, link: str) -> dict:
    cost = cost_model(link)
    bound = overhead_lower_bound(trace, budget, cost)
    started = time.perf_counter()
    result = plan_with_budget(trace, budget, "auto", cost)
    seconds = time.perf_counter() - started
    entry = {"bound": bound.overhead if bound.feasible else None, "seconds": round(seconds, 2),
             "status": result.plan.status.value, "member": result.member}
    if result.plan.status.value != "feasible":
        entry["reason"] = result.reason
        return entry
    check = validate_plan(result.trace, result.plan)
    entry["valid"] = check.valid
    if not check.valid:
        entry["error"] = f"{check.rule}: {check.message}"
        print(f"INVALID {trace.name} {budget} {link}: {check.message}", file=sys.stderr)
        return entry
    sim = simulate(result.trace, result.plan, cost, validate=False)
    d2h = sum(c[2] for c in sim.copies if c[1] == "d2h")
    entry.update(overhead=sim.overhead, stall_us=sim.stall_us, swapped_bytes=sim.swapped_bytes,
                 d2h_bytes=d2h, h2d_bytes=sim.swapped_bytes - d2h,
                 drops=sum(1 for a in result.plan.actions if isinstance(a, SwapOut) and a.drop))
    return entry


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def run(paths) -> list[dict]:
    rows = []
    for path in paths:
        loaded = with_recompute_recipes(load_trace(path))
        variants = {"unknown": without_writes(loaded), "writes": with_writes(loaded)}
        for fraction in FRACTIONS:
            budget = int(loaded.lower_bound_bytes() * fraction)
            for link in LINKS:
                row = {"trace": loaded.name, "fraction": fraction, "link": link,
                       "budget_bytes": budget}
                for name, trace in variants.items():
                    row[name] = entry = cell(trace, budget, link)
                    bound, auto = entry.get("bound"), entry.get("overhead")
                    entry["meets_target"] = bool(bound is not None and auto is not None
                                                 and auto <= 2 * bound + 0.05)
                rows.append(row)
                u, w = row["unknown"], row["writes"]
                print(f"{loaded.name:28s} {int(fraction * 100):3d}% {link} | unknown: auto "
                      f"{_pct(u.get('overhead'))} bound {_pct(u.get('bound'))} "
                      f"{'ok' if u['meets_target'] else 'MISS'} ({u['seconds']:.1f} s) | "
                      f"writes: auto {_pct(w.get('overhead'))} bound {_pct(w.get('bound'))} "
                      f"{'ok' if w['meets_target'] else 'MISS'} ({w['seconds']:.1f} s, "
                      f"{w.get('drops', 0)} drops, d2h {w.get('d2h_bytes', 0) / 2**20:.0f} "
                      f"MiB)", flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", help="more trace files (e.g. new captures)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"
                                             / "streaming.json"))
    args = parser.parse_args(argv)
    paths = sorted(TRACES.glob("*infer*.trace.json.gz")) + [Path(p) for p in args.traces]
    rows = run(paths)
    Path(args.out).write_text(json.dumps({"rows": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
