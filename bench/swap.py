"""Benchmark of the budget planners on training, inference and LSTM-shaped traces.

Every training trace, every inference trace and an LSTM-shaped training step at 90/70/50% of
its lower bound, on PCIe Gen5 and Gen4, every policy and the sound lower bound side by side.

Every plan is checked by the independent validator (an invalid plan is counted as a
failure and printed) and simulated; the bound is computed on the same trace the plans are
made for (with recompute recipes, derived when the trace has none).

    python bench/swap.py                  # full table, writes bench/results/swap.json
    python bench/swap.py --quick          # one training and one inference trace, 70% only
    python bench/swap.py --lstm full      # the LSTM at 250 steps x 4 layers (default: small)
    python bench/swap.py --kinds infer    # only some kinds of trace (train, infer, lstm)
    python bench/swap.py --only gpt2,bert # only traces whose name contains one of these

Traces: the bundled training traces (``cupool/data/traces/*train*``), the inference
captures of ``bench/data/traces`` (every model at batch 1 and 8; ``bench/capture_inference.py``;
they record which ops write each buffer, so read-only weights are dropped, not copied back),
the bundled inference traces (``*infer*``, captured before traces had ``writes``) where no
capture has the same name, and
:func:`cupool.planning.synthetic.lstm_trace` in the shape ``--lstm`` names.

Overheads are fractions (0.05 = 5%); medians are over the traces of one kind; "target" is
``auto <= 2 x bound + 5 percentage points`` and "moonshot" ``auto <= 1.2 x bound + 1 point``,
judged in every cell whose bound is feasible (a cell where no plan can exist has no target).
The JSON records, besides rows and medians, the cells that miss either, the cells with a
feasible bound but no validated ``auto`` plan, the machine, the git commit and the run time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from cupool.check import validate_plan
from cupool.core.vocabulary import Trace
from cupool.io import load_trace
from cupool.planning.budget import POLICY_NAMES, plan_with_budget
from cupool.planning.budget.engine.residency import working_set_bytes
from cupool.planning.budget.recipes import with_recompute_recipes
from cupool.planning.synthetic import lstm_trace
from cupool.sim import cost_model, overhead_lower_bound, simulate

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "cupool" / "data" / "traces"
CAPTURED = ROOT / "bench" / "data" / "traces"
POLICIES = POLICY_NAMES
FRACTIONS = (0.9, 0.7, 0.5)
LINKS = ("gen5", "gen4")
KINDS = ("train", "infer", "lstm")
QUICK_TRACES = ("resnet50_train_b32_bf16", "resnet50_infer_b8")


@dataclass(frozen=True)
class LstmShape:
    """Arguments of :func:`cupool.planning.synthetic.lstm_trace` (its other defaults kept)."""

    steps: int
    layers: int
    hidden: int = 1024

    @property
    def name(self) -> str:
        return f"lstm_s{self.steps}_l{self.layers}_h{self.hidden}"


LSTM_SHAPES = {"small": LstmShape(steps=100, layers=2, hidden=512),
               "full": LstmShape(steps=250, layers=4)}
"""``--lstm`` choices. ``full`` is the generator's default (13,024 buffers, persistent
weights and Adam state 56% of its lower bound; minutes per ``auto`` plan). ``small`` (2,816
buffers) keeps the shape: every step's and layer's activations held for the backward pass,
weights and Adam state persistent, about the same share of the lower bound (65%; halving the
width quarters the weights and halves the activations, where fewer steps and layers at full
width would leave the weights 77% or more)."""


@dataclass(frozen=True)
class BenchTrace:
    """One trace of the table: a file (``path``) or the LSTM generator (``lstm``)."""

    name: str
    kind: str
    path: Path | None = None
    lstm: LstmShape | None = None

    def load(self) -> Trace:
        """The trace with recompute recipes (derived when it has none)."""
        if self.lstm is not None:
            trace = lstm_trace(self.lstm.steps, self.lstm.layers, hidden=self.lstm.hidden,
                               name=self.name)
        else:
            trace = load_trace(self.path)
        return with_recompute_recipes(trace)


def _stem(path: Path) -> str:
    return path.name.split(".")[0]


def bench_traces(kinds=KINDS, lstm: str = "small", only=()) -> list[BenchTrace]:
    """The traces of ``kinds`` in table order (training, inference, LSTM), those whose name
    contains one of ``only`` when it is not empty."""
    out = []
    if "train" in kinds:
        out += [BenchTrace(_stem(p), "train", p)
                for p in sorted(TRACES.glob("*train*.trace.json.gz"))]
    if "infer" in kinds:
        bundled = {_stem(p): p for p in TRACES.glob("*infer*.trace.json.gz")}
        captured = {_stem(p): p for p in CAPTURED.glob("*infer*.trace.json.gz")}
        merged = {**bundled, **captured}  # a capture has writes; the bundled ones none
        out += [BenchTrace(name, "infer", merged[name]) for name in sorted(merged)]
    if "lstm" in kinds:
        shape = LSTM_SHAPES[lstm]
        out.append(BenchTrace(shape.name, "lstm", lstm=shape))
    if only:
        out = [t for t in out if any(word in t.name for word in only)]
    return out


def run(quick: bool, traces: list[BenchTrace] | None = None, fractions=FRACTIONS,
        links=LINKS) -> dict:
    """Every (trace, fraction, link) cell; ``quick``: the ``QUICK_TRACES`` at 70% only."""
    traces = bench_traces() if traces is None else traces
    if quick:
        traces = [t for t in bench_traces(("train", "infer")) if t.name in QUICK_TRACES]
        fractions = (0.7,)
    began = time.perf_counter()
    info = run_info(quick)
    rows = []
    for bench_trace in traces:
        trace = bench_trace.load()
        for fraction in fractions:
            for link in links:
                row = plan_cell(bench_trace, trace, fraction, link)
                rows.append(row)
                auto = row["policies"]["auto"]
                print(f"{row['trace']:40s} {int(fraction * 100):3d}% {link}  bound "
                      f"{_pct(row['bound'])}  auto {_pct(auto.get('overhead'))} "
                      f"{_mark(row['target_met'])} ({auto.get('member', '-')}, "
                      f"{auto['seconds']:.1f} s)", flush=True)
    return {"rows": rows, "summary": summarize(rows), "targets": targets(rows),
            "run": {**info, "seconds": round(time.perf_counter() - began, 1)}}


def plan_cell(bench_trace: BenchTrace, trace: Trace, fraction: float, link: str) -> dict:
    """One cell: the bound and every policy's plan, validated and simulated."""
    budget = int(trace.lower_bound_bytes() * fraction)
    cost = cost_model(link)
    started = time.perf_counter()
    bound = overhead_lower_bound(trace, budget, cost)
    row = {"trace": bench_trace.name, "kind": bench_trace.kind, "fraction": fraction,
           "link": link, "budget_bytes": budget,
           "deficit_bytes": trace.lower_bound_bytes() - budget,
           "bound": bound.overhead if bound.feasible else None,
           "bound_method": bound.details.get("method"),
           "bound_seconds": round(time.perf_counter() - started, 3),
           "bound_details": {k: v for k, v in bound.details.items()
                             if k in ("op", "excess_bytes", "bound_us", "ideal_us")},
           "policies": {}}
    if not bound.feasible:
        row["bound_reason"] = bound.reason
    for policy in POLICIES:
        row["policies"][policy] = plan_entry(trace, budget, policy, cost)
    row.update(judge(row))
    return row


def plan_entry(trace: Trace, budget: int, policy: str, cost) -> dict:
    """One policy's plan for one cell: status, time, and when valid its simulation."""
    started = time.perf_counter()
    result = plan_with_budget(trace, budget, policy, cost)
    plan = result.plan
    entry = {"status": plan.status.value, "seconds": round(time.perf_counter() - started, 3)}
    if plan.status.value == "feasible":
        check = validate_plan(result.trace, plan)
        entry["valid"] = check.valid
        if check.valid:
            sim = simulate(result.trace, plan, cost, validate=False)
            entry.update(overhead=sim.overhead, stall_us=sim.stall_us,
                         recompute_us=sim.recompute_us, swapped_bytes=sim.swapped_bytes)
            if policy == "auto":
                entry["breakdown"] = breakdown(result.trace, sim)
        else:
            entry["error"] = f"{check.rule}: {check.message}"
            print(f"INVALID {policy} {trace.name} {budget} B: {check.message}", file=sys.stderr)
    else:
        entry["reason"] = result.reason
    if result.member is not None:
        entry["member"] = result.member
    return entry


def judge(row: dict) -> dict:
    """The targets of one cell: ``validated`` (auto's plan passed the validator),
    ``target_met`` and ``moonshot_met`` (``None`` where the bound is infeasible)."""
    auto = row["policies"]["auto"]
    validated = bool(auto.get("valid"))
    if row["bound"] is None:
        return {"validated": validated, "target_met": None, "moonshot_met": None}
    overhead = auto.get("overhead")
    # bool(): overheads and bounds may be NumPy floats, whose comparisons give numpy.bool_,
    # which json would write as the string "False"
    return {"validated": validated,
            "target_met": bool(overhead is not None and overhead <= 2 * row["bound"] + 0.05),
            "moonshot_met": bool(overhead is not None
                                 and overhead <= 1.2 * row["bound"] + 0.01)}


def targets(rows: list[dict]) -> dict:
    """Counts over the cells whose bound is feasible, and the cells that miss."""
    judged = [r for r in rows if r["bound"] is not None]

    def cells(flag):
        return [f"{r['trace']} {round(r['fraction'] * 100)}% {r['link']}" for r in judged
                if not r[flag]]

    return {"cells": len(rows), "bound_feasible": len(judged),
            "bound_infeasible": len(rows) - len(judged),
            "without_validated_plan": cells("validated"),
            "target_misses": cells("target_met"), "moonshot_misses": cells("moonshot_met")}


def run_info(quick: bool) -> dict:
    """Where and from what the table is made (read when the run starts)."""
    def git(*args):
        try:
            done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                                  timeout=30, check=False)
        except OSError:
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"),
            "dirty": None if status is None else bool(status),
            "machine": platform.machine(), "processor": platform.processor(),
            "cpus": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "argv": sys.argv[1:], "quick": quick}


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


def _mark(met) -> str:
    return "-" if met is None else ("✓" if met else "✗")


def summarize(rows) -> list[dict]:
    """Medians per (kind, fraction, link) over the cells whose bound is feasible (a cell
    where no plan can exist counts in ``infeasible``, not in the medians)."""
    out = []
    for kind in KINDS:
        for fraction in sorted({r["fraction"] for r in rows}, reverse=True):
            for link in LINKS:
                cells = [r for r in rows if r.get("kind", "train") == kind
                         and r["fraction"] == fraction and r["link"] == link]
                group = [r for r in cells if r["bound"] is not None]
                if not cells:
                    continue
                entry = {"kind": kind, "fraction": fraction, "link": link,
                         "traces": len(group), "infeasible": len(cells) - len(group)}
                for policy in POLICIES:
                    values = [r["policies"][policy].get("overhead") for r in group]
                    found = [v for v in values if v is not None]
                    entry[policy] = (statistics.median(found) if found
                                     and len(found) == len(values) else None)
                    entry[f"{policy}_found"] = len(found)
                bounds = [r["bound"] for r in group]
                entry["bound"] = statistics.median(bounds) if bounds else None
                entry["auto_meets_target"] = sum(1 for r in group if r["target_met"])
                entry["auto_meets_moonshot"] = sum(1 for r in group if r["moonshot_met"])
                out.append(entry)
    return out


def print_table(summary, totals=None) -> None:
    head = " | ".join(f"{p:>10s}" for p in POLICIES)
    print(f"\n| kind | budget | link | {head} | {'bound':>8s} | auto meets target |")
    for e in summary:
        cells = " | ".join(_pct(e[p]) if e[p] is not None
                           else f"{e[p + '_found']}/{e['traces']} found" for p in POLICIES)
        infeasible = f" ({e['infeasible']} infeasible)" if e.get("infeasible") else ""
        print(f"| {e.get('kind', 'train')} | {int(e['fraction'] * 100)}% | {e['link']} | "
              f"{cells} | {_pct(e['bound'])} | {e['auto_meets_target']}/{e['traces']}"
              f"{infeasible} |")
    if totals is not None:
        print(f"\n{totals['bound_feasible']} of {totals['cells']} cells have a feasible bound; "
              f"without a validated auto plan: {len(totals['without_validated_plan'])}; "
              f"target misses: {len(totals['target_misses'])}; moonshot misses: "
              f"{len(totals['moonshot_misses'])}")
        for name in ("without_validated_plan", "target_misses"):
            for cell in totals[name]:
                print(f"  {name.replace('_', ' ')}: {cell}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="one training and one inference trace at 70%%; writes nothing")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help="comma-separated kinds of trace: train, infer, lstm")
    parser.add_argument("--lstm", choices=sorted(LSTM_SHAPES), default="small",
                        help="LSTM shape: small (100 steps x 2 layers, width 512) "
                             "or full (250 x 4, width 1024)")
    parser.add_argument("--only", default="",
                        help="comma-separated: only traces whose name contains one of these")
    parser.add_argument("--fractions", default=",".join(str(f) for f in FRACTIONS),
                        help="comma-separated fractions of each trace's lower bound")
    parser.add_argument("--links", default=",".join(LINKS),
                        help=f"comma-separated, of {', '.join(LINKS)}")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "swap.json"))
    args = parser.parse_args(argv)
    links = [link for link in args.links.split(",") if link]
    if set(links) - set(LINKS):
        parser.error(f"--links: choose from {', '.join(LINKS)}")
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"--kinds: unknown {', '.join(unknown)} (choose from {', '.join(KINDS)})")
    traces = bench_traces(kinds, args.lstm, [w for w in args.only.split(",") if w])
    result = run(args.quick, traces, [float(f) for f in args.fractions.split(",") if f], links)
    print_table(result["summary"], result["targets"])
    print(f"\nrun: {result['run']['seconds']:.0f} s on {result['run']['cpus']} CPUs, "
          f"commit {result['run']['commit']}")
    if not args.quick:
        Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
