"""Why ``auto`` misses its target in ``bench/swap.py``'s cells: the numbers behind each miss.

    python bench/swap_diagnose.py                  # the inference and LSTM misses of swap.json
    python bench/swap_diagnose.py --kinds infer --only resnet50

Reads ``bench/results/swap.json``, re-plans every cell of the chosen kinds that misses the
target (``auto <= 2 x bound + 5 points``) or has a feasible bound but no validated ``auto``
plan, and writes ``bench/results/swap_diagnosis.json`` with, per cell:

- the memory deficit (lower bound − budget), the persistent bytes, and the bound's own
  numbers (the op it was decided at, the bytes that must be off the device there, its
  iteration time against the ideal one);
- ``auto``'s chosen member and what every member got (overhead or why it has no plan);
- the bytes ``auto``'s plan copies each way, split into persistent (weights: read-only in
  an inference pass, so a copy back to the host only rewrites what the host already holds)
  and temporary buffers, against the deficit; the link time those copies take;
- where the time goes in its simulation: the wait before op 0 (data offloaded across the
  iteration boundary brought back with no compute to hide behind), the copy-out tail after
  the last op, recompute, the waits split by whether a copy in ran during them (the link
  was the limit) or not (copies issued late or waiting for bytes: the schedule was), the
  number of copies each way, and the ops with the longest waits with the copies that
  ended inside each wait.

``bench/always_plan_diagnose.py`` takes the misses of ``bench/always_plan.py`` apart the same
way (:func:`take_apart`).
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
import time
from pathlib import Path

from swap import KINDS, LSTM_SHAPES, bench_traces, run_info

from cupool.core.vocabulary import PERSISTENT
from cupool.planning.budget import plan_with_budget
from cupool.sim import cost_model, overhead_lower_bound, simulate

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
TOP_WAITS = 3


def misses(swap: dict, kinds, only=()) -> list[dict]:
    """The rows of ``swap`` (``bench/swap.py``'s JSON) of ``kinds`` whose bound is feasible
    and whose ``auto`` misses the target or has no validated plan."""
    return [r for r in swap["rows"] if r.get("kind", "train") in kinds
            and r["bound"] is not None and not (r["target_met"] and r["validated"])
            and (not only or any(word in r["trace"] for word in only))]


def copied_bytes(trace, sim) -> dict:
    """Bytes the simulation copied, keyed ``<direction>_<persistent|temporary>``, and the
    link time of each direction (``<direction>_busy_us``)."""
    persistent = {b.id for b in trace.buffers if b.kind == PERSISTENT}
    out = {f"{d}_{k}": 0 for d in ("h2d", "d2h") for k in ("persistent", "temporary")}
    for d in ("h2d", "d2h"):
        out[f"{d}_busy_us"] = 0.0
    for buffer_id, direction, nbytes, _enqueued, start, end in sim.copies:
        kind = "persistent" if buffer_id in persistent else "temporary"
        out[f"{direction}_{kind}"] += nbytes
        out[f"{direction}_busy_us"] += end - start
    return out


def waits(trace, sim, top: int = TOP_WAITS) -> list[dict]:
    """The ``top`` ops whose start waited longest after the previous op ended, each with
    the H2D copies that ended inside the wait (what it waited for)."""
    gaps, previous_end = [], 0.0
    for op, (_dispatch, start, end) in enumerate(sim.op_times):
        gaps.append((start - previous_end, op, previous_end, start))
        previous_end = end
    out = []
    for gap, op, began, start in sorted(gaps, reverse=True)[:top]:
        if gap <= 1e-9:
            break
        landed = [c for c in sim.copies if c[1] == "h2d" and began < c[5] <= start + 1e-9]
        out.append({"op": op, "name": trace.ops[op].name, "wait_us": gap,
                    "h2d_landed": len(landed), "h2d_landed_bytes": sum(c[2] for c in landed)})
    return out


def _union(spans) -> list[list[float]]:
    """The union of ``(start, end)`` spans, as disjoint ``[start, end]`` in order."""
    out: list[list[float]] = []
    for start, end in sorted(spans):
        if end <= start:
            continue
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


def _covered(busy: list[list[float]], low: float, high: float) -> float:
    """How much of ``[low, high]`` the disjoint, ordered spans ``busy`` cover."""
    i = max(0, bisect.bisect_right([b[0] for b in busy], low) - 1)
    total = 0.0
    while i < len(busy) and busy[i][0] < high:
        total += max(0.0, min(high, busy[i][1]) - max(low, busy[i][0]))
        i += 1
    return total


def stall_split(sim) -> dict:
    """The compute stream's waits between ops (recomputes left out) split by whether an
    H2D copy ran during them: ``stall_link_busy_us`` (the link carried copies the ops could
    not hide: fewer or smaller copies would help) and ``stall_link_idle_us`` (no copy in
    ran: the copies waited for were issued late or waited for bytes still in use or being
    copied out: a different schedule would help); with the copies each way counted."""
    h2d = _union((c[4], c[5]) for c in sim.copies if c[1] == "h2d")
    recomputing = _union((r[2], r[3]) for r in sim.recomputes)
    waited = overlapped = 0.0
    previous_end = 0.0
    for _dispatch, start, end in sim.op_times:
        if start > previous_end:  # the gap less its recomputes, piece by piece
            cursor = previous_end
            for low, high in [*([r for r in recomputing if r[1] > previous_end
                                 and r[0] < start]), [start, start]]:
                if low > cursor:
                    waited += low - cursor
                    overlapped += _covered(h2d, cursor, low)
                cursor = max(cursor, high)
        previous_end = end
    return {"stall_link_busy_us": overlapped, "stall_link_idle_us": waited - overlapped,
            "h2d_copies": sum(1 for c in sim.copies if c[1] == "h2d"),
            "d2h_copies": sum(1 for c in sim.copies if c[1] == "d2h")}


def take_apart(trace, budget: int, cost, result, bound) -> dict:
    """What ``result`` (``auto``'s, on ``trace`` at ``budget``) does and where its time
    goes, beside ``bound`` (:func:`~cupool.sim.overhead_lower_bound`'s)."""
    out = {"deficit_bytes": trace.lower_bound_bytes() - budget,
           "persistent_bytes": sum(b.size for b in trace.buffers if b.kind == PERSISTENT),
           "ops": trace.num_ops, "bound": bound.overhead,
           "bound_op": bound.details.get("op"),
           "bound_excess_bytes": bound.details.get("excess_bytes"),
           "bound_us": bound.details.get("bound_us"), "ideal_us": bound.details["ideal_us"],
           "deficit_link_us": (trace.lower_bound_bytes() - budget) / (cost.h2d_gbps * 1e3),
           "member": result.member, "candidates": result.candidates}
    if not result.feasible:
        return {**out, "status": result.plan.status.value, "reason": result.reason}
    sim = result.simulation or simulate(result.trace, result.plan, cost, validate=False)
    last_end = sim.op_times[-1][2]
    return {**out, "status": "feasible", "overhead": sim.overhead,
            "iteration_us": sim.iteration_us, "stall_us": sim.stall_us,
            "recompute_us": sim.recompute_us, "wait_before_op0_us": sim.op_times[0][1],
            "tail_us": sim.iteration_us - last_end,
            **copied_bytes(result.trace, sim), **stall_split(sim),
            "waits": waits(result.trace, sim)}


def diagnose(row: dict) -> dict:
    """Re-plan one cell with ``auto`` and take its simulation apart (module docstring)."""
    named = {t.name: t for t in bench_traces((row.get("kind", "train"),), lstm=_lstm(row))}
    if row["trace"] not in named:
        raise SystemExit(f"{row['trace']}: not one of bench/swap.py's traces")
    trace = named[row["trace"]].load()
    cost = cost_model(row["link"])
    budget = row["budget_bytes"]
    bound = overhead_lower_bound(trace, budget, cost)
    result = plan_with_budget(trace, budget, "auto", cost)
    return {"trace": row["trace"], "kind": row.get("kind", "train"),
            "fraction": row["fraction"], "link": row["link"], "budget_bytes": budget,
            **take_apart(trace, budget, cost, result, bound)}


def _lstm(row: dict) -> str:
    """The ``--lstm`` choice whose trace is named in ``row`` (``small`` for other rows)."""
    return next((choice for choice, shape in LSTM_SHAPES.items()
                 if shape.name == row["trace"]), "small")


def describe(d: dict) -> str:
    """One cell's diagnosis in a few lines."""
    mb = 1e6
    budget = d.get("budget") or f"{round(d['fraction'] * 100)}%"
    head = (f"{d['trace']} {budget} {d['link']}: deficit "
            f"{d['deficit_bytes'] / mb:.1f} MB ({d['deficit_link_us']:.0f} us over the link "
            f"one way) of which persistent {d['persistent_bytes'] / mb:.1f} MB in the trace; "
            f"bound {100 * d['bound']:.1f}% at op {d['bound_op']}/{d['ops']} (off there "
            f"{(d['bound_excess_bytes'] or 0) / mb:.1f} MB, ideal {d['ideal_us']:.0f} us)")
    if d["status"] != "feasible":
        return f"{head}\n  no plan: {d['reason']}"
    lines = [head,
             f"  auto {100 * d['overhead']:.1f}% ({d['member']}): iteration "
             f"{d['iteration_us']:.0f} us = wait before op 0 {d['wait_before_op0_us']:.0f} + "
             f"stalls {d['stall_us']:.0f} in all + recompute {d['recompute_us']:.0f}; "
             f"copy-out tail after the last op {d['tail_us']:.0f} us",
             f"  stalls while a copy in ran {d['stall_link_busy_us']:.0f} us, with the "
             f"link idle {d['stall_link_idle_us']:.0f} us; {d['h2d_copies']} copies in, "
             f"{d['d2h_copies']} out",
             f"  copied H2D {d['h2d_persistent'] / mb:.1f} MB persistent + "
             f"{d['h2d_temporary'] / mb:.1f} MB temporary ({d['h2d_busy_us']:.0f} us), D2H "
             f"{d['d2h_persistent'] / mb:.1f} MB persistent + {d['d2h_temporary'] / mb:.1f} "
             f"MB temporary ({d['d2h_busy_us']:.0f} us)"]
    lines += [f"  waits {w['wait_us']:.0f} us before op {w['op']} ({w['name']}): "
              f"{w['h2d_landed']} H2D copies of {w['h2d_landed_bytes'] / mb:.1f} MB landed "
              f"in it" for w in d["waits"]]
    others = {k: v for k, v in d["candidates"].items() if not isinstance(v, float)}
    if others:
        lines.append(f"  members without a plan: {len(others)} (e.g. "
                     f"{next(iter(others))}: {next(iter(others.values()))})")
    return "\n".join(lines)


def write_diagnoses(rows: list[dict], diagnose, info: dict, out: Path, header: dict) -> None:
    """Diagnose each of ``rows`` with ``diagnose``, print each as :func:`describe` does, and
    write ``header``, ``info`` (the run, with its seconds) and the cells to ``out``."""
    began = time.perf_counter()
    cells = []
    for row in rows:
        cells.append(diagnose(row))
        print(describe(cells[-1]), flush=True)
    info["seconds"] = round(time.perf_counter() - began, 1)
    out.write_text(json.dumps({**header, "run": info, "cells": cells}, indent=1, default=str)
                   + "\n")
    print(f"wrote {out}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--swap", type=Path, default=RESULTS / "swap.json")
    parser.add_argument("--kinds", default="infer,lstm",
                        help=f"comma-separated, of {', '.join(KINDS)}")
    parser.add_argument("--only", default="",
                        help="comma-separated: only traces whose name contains one of these")
    parser.add_argument("--out", type=Path, default=RESULTS / "swap_diagnosis.json")
    args = parser.parse_args(argv)
    swap = json.loads(args.swap.read_text())
    rows = misses(swap, [k for k in args.kinds.split(",") if k],
                  [w for w in args.only.split(",") if w])
    write_diagnoses(rows, diagnose, run_info(quick=False), args.out,
                    {"swap_run": swap.get("run")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
