"""How long ``auto`` plans take, and how good they are, on LSTM traces of 13k and 15k
buffers and the shared training traces, at 90/70/50% of each trace's lower bound (PCIe
Gen5, the default link of :func:`cupool.planning.make_plan`).

Per cell: the seconds ``auto`` took (``plan_with_budget(trace, budget, "auto")``, what
``make_plan(trace, budget, policy="auto")`` runs; wall clock on this machine, the CPU
seconds of this process and those of the worker processes it planned members in, which
ended before the plan was returned: on a shared machine the wall clock also counts other
jobs' time), the plan's simulated overhead (a fraction of the iteration
without swaps), and whether the independent swap validator accepts the plan. The JSON
also records the machine (CPU count, Python, NumPy, platform) and the git commit the
code was at, with the paths under ``cupool/`` that differed from it.

    python bench/auto_speed.py                # every trace; writes bench/results/auto_speed.json
    python bench/auto_speed.py --traces lstm         # the LSTM traces only
    python bench/auto_speed.py --compare OLD.json    # also print OLD's seconds and overheads
    python bench/auto_speed.py --workers 1           # every member in this process
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from cupool.check import validate_swap_plan
from cupool.io import load_trace
from cupool.planning.budget import BudgetParams, plan_with_budget
from cupool.planning.synthetic import lstm_trace

TRACES = Path(__file__).resolve().parent.parent / "cupool" / "data" / "traces"
OUT = Path(__file__).resolve().parent / "results" / "auto_speed.json"
FRACTIONS = (0.9, 0.7, 0.5)
LSTM_STEPS = (250, 290)
"""Steps of the LSTM traces: 13,024 and 15,104 buffers, the sizes planning is timed at."""


def traces(which: str):
    """(name, trace) pairs: the LSTM language model (4 layers, seed 0) at 250 and 290
    steps (13,024 and 15,104 buffers) unless ``which == "training"``, and every shared
    training trace unless ``which == "lstm"``."""
    out = [] if which == "training" else [(f"lstm_lm_{steps}x4", lstm_trace(steps, 4, seed=0))
                                          for steps in LSTM_STEPS]
    if which != "lstm":
        out += [(p.name.split(".")[0], load_trace(p))
                for p in sorted(TRACES.glob("*train*.trace.json.gz"))]
    return out


def children_cpu_seconds() -> float:
    """User and system CPU seconds of this process's child processes that have ended."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(name: str, trace, fraction: float, workers: int) -> dict:
    budget = int(trace.lower_bound_bytes() * fraction)
    started, cpu_started = time.perf_counter(), time.process_time()
    children_started = children_cpu_seconds()
    result = plan_with_budget(trace, budget, "auto", None, BudgetParams(workers=workers))
    seconds = time.perf_counter() - started
    cpu_seconds = time.process_time() - cpu_started
    workers_cpu_seconds = children_cpu_seconds() - children_started
    row = {"trace": name, "buffers": len(trace.buffers), "fraction": fraction,
           "budget_bytes": budget, "workers": workers, "seconds": round(seconds, 3),
           "cpu_seconds": round(cpu_seconds, 3),
           "workers_cpu_seconds": round(workers_cpu_seconds, 3),
           "status": result.plan.status.value, "member": result.member,
           "overhead": None, "valid": False}
    if result.simulation is not None:
        row["overhead"] = result.simulation.overhead
        row["iteration_us"] = result.simulation.iteration_us
        check = validate_swap_plan(result.trace, result.plan)
        row["valid"] = check.valid
        if not check.valid:
            row["invalid"] = f"{check.rule}: {check.message}"
    return row


def machine() -> dict:
    """What ran the benchmark: CPU count (and how many this process may use), Python,
    NumPy and the platform."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"cpu_count": os.cpu_count(), "usable_cpus": usable,
            "python": platform.python_version(), "numpy": np.__version__,
            "platform": platform.platform()}


def code_version() -> dict:
    """The git commit of the code measured, and the paths under ``cupool/`` that differ
    from it (``None`` for both outside a git checkout)."""
    root = Path(__file__).resolve().parent.parent

    def git(*args) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                              check=True).stdout
    try:
        commit = git("rev-parse", "HEAD").strip()
        changed = sorted(line[3:] for line in git("status", "--porcelain", "--", "cupool")
                         .splitlines())
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "uncommitted_under_cupool": None}
    return {"commit": commit, "uncommitted_under_cupool": changed}


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def print_table(rows, before=None) -> None:
    old = {(r["trace"], r["fraction"]): r for r in (before or [])}
    head = "| trace | buffers | budget | seconds | CPU s (+ workers') | overhead | valid |"
    if old:
        head += " seconds before | overhead before |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in rows:
        line = (f"| {r['trace']} | {r['buffers']} | {int(100 * r['fraction'])}% | "
                f"{r['seconds']:.1f} | {r['cpu_seconds']:.1f} (+{r['workers_cpu_seconds']:.1f}) | "
                f"{_pct(r['overhead'])} | {r['valid']} |")
        if old:
            o = old.get((r["trace"], r["fraction"]))
            line += (f" {o['seconds']:.1f} | {_pct(o['overhead'])} |" if o else " - | - |")
        print(line)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", choices=("lstm", "training", "all"), default="all")
    parser.add_argument("--fractions", type=float, nargs="+", default=list(FRACTIONS))
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--compare", type=Path, help="an earlier run's JSON to print beside")
    parser.add_argument("--workers", type=int, default=BudgetParams().workers,
                        help="BudgetParams.workers (0: automatic, 1: no worker processes)")
    args = parser.parse_args(argv)
    before = json.loads(args.compare.read_text())["rows"] if args.compare else None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    header = {"link": "gen5", "machine": machine(), "code": code_version(),
              "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "workers": args.workers,
              "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None}
    rows = []
    for name, trace in traces(args.traces):
        for fraction in args.fractions:
            rows.append(measure(name, trace, fraction, args.workers))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            # written after every cell: a long run stopped early keeps what it measured
            args.out.write_text(json.dumps({**header, "rows": rows}, indent=1) + "\n")
    print_table(rows, before)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
