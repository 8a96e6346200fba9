"""What the compiled copy queue saves: ``auto`` on an LSTM trace with the planners' copy
queues in pure Python (:class:`~cupool.planning.budget.engine.copies.PythonCopyEngine`) and
compiled (:class:`~cupool.planning.budget.engine.copies.CompiledCopyEngine`), at 70% and
50% of the trace's lower bound (PCIe Gen5, :func:`cupool.planning.make_plan`'s default).

Per cell: the CPU seconds of this process (``time.process_time``; every member planned in
this process, ``workers=1``) with each queue, and whether both made the same plan (they
must: the compiled queue answers bit for bit as the Python one), after one warm-up plan of
a small trace with each. The queue is chosen by
assigning ``copies.CopyEngine``, which each planning state reads when it starts. With
``--profile FILE`` one more compiled run at the last fraction is profiled (cProfile, saved
to ``FILE``) and the copy queue's share of it printed.

    python bench/copy_queue.py                          # lstm_trace(120, 4): 70% and 50%
    python bench/copy_queue.py --steps 250 --fractions 0.5 --profile /tmp/queue.prof
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from pathlib import Path

from auto_speed import code_version, machine

from cupool.planning import make_plan
from cupool.planning.budget.engine import copies
from cupool.planning.synthetic import lstm_trace

OUT = Path(__file__).resolve().parent / "results" / "copy_queue.json"
QUEUES = {"python": copies.PythonCopyEngine, "compiled": copies.CompiledCopyEngine}


def plan_seconds(trace, budget: int, queue: str):
    """CPU seconds ``auto`` took with the ``queue`` copy queue, and the plan's content."""
    chosen = copies.CopyEngine
    copies.CopyEngine = QUEUES[queue]
    try:
        started = time.process_time()
        plan = make_plan(trace, budget, policy="auto").plan
        seconds = time.process_time() - started
    finally:
        copies.CopyEngine = chosen
    return seconds, (plan.status, plan.arena_bytes, plan.placements, plan.residencies,
                     plan.actions)


def profile(trace, budget: int, path: Path) -> dict:
    """One compiled run under cProfile: its total and the copy queue's own seconds (every
    method of the compiled queue, its Python wrappers included)."""
    profiler = cProfile.Profile()
    profiler.enable()
    plan_seconds(trace, budget, "compiled")
    profiler.disable()
    profiler.dump_stats(str(path))
    stats = pstats.Stats(str(path))
    total = stats.total_tt
    queue = {}
    for (filename, _line, name), (_cc, calls, own, _cum, _callers) in stats.stats.items():
        if "CopyQueue" in name:  # "<method 'fits' of '..._copyq.CopyQueue' objects>"
            queue[name.split("'")[1]] = {"calls": calls, "seconds": round(own, 3)}
        elif filename.endswith("copies.py") and name in ("set_aside", "put_back"):
            queue[f"{name} (Python wrapper)"] = {"calls": calls, "seconds": round(own, 3)}
    stats.sort_stats("tottime").print_stats(15)
    return {"profiled_seconds": round(total, 3), "queue": queue,
            "queue_seconds": round(sum(q["seconds"] for q in queue.values()), 3)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=120, help="lstm_trace steps (4 layers)")
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.7, 0.5])
    parser.add_argument("--profile", type=Path, help="also profile one compiled run")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if not copies.COMPILED_AVAILABLE:
        print("the C extension _copyq is not built (python setup.py build_ext --inplace)",
              file=sys.stderr)
        return 2
    small = lstm_trace(4, 2, seed=0)  # warm-up: the first plan also pays for lazy imports
    for queue in QUEUES:
        plan_seconds(small, int(small.lower_bound_bytes() * 0.5), queue)
    trace = lstm_trace(args.steps, 4, seed=0)
    rows = []
    for fraction in args.fractions:
        budget = int(trace.lower_bound_bytes() * fraction)
        python_s, python_plan = plan_seconds(trace, budget, "python")
        compiled_s, compiled_plan = plan_seconds(trace, budget, "compiled")
        rows.append({"trace": f"lstm_lm_{args.steps}x4", "buffers": len(trace.buffers),
                     "fraction": fraction, "budget_bytes": budget,
                     "python_cpu_seconds": round(python_s, 3),
                     "compiled_cpu_seconds": round(compiled_s, 3),
                     "same_plan": python_plan == compiled_plan,
                     "status": python_plan[0].value})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    document = {"machine": machine(), "code": code_version(),
                "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "rows": rows}
    if args.profile:
        budget = int(trace.lower_bound_bytes() * args.fractions[-1])
        document["profile"] = {"fraction": args.fractions[-1],
                               **profile(trace, budget, args.profile)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    print("| trace | buffers | budget | Python queue (CPU s) | compiled queue (CPU s) | "
          "same plan |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['trace']} | {r['buffers']} | {round(100 * r['fraction'])}% | "
              f"{r['python_cpu_seconds']:.1f} | {r['compiled_cpu_seconds']:.1f} | "
              f"{r['same_plan']} |")
    if args.profile:
        p = document["profile"]
        print(f"profile: {p['profiled_seconds']:.1f} s in all, copy queue "
              f"{p['queue_seconds']:.1f} s: {p['queue']}")
    return 0 if all(r["same_plan"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
