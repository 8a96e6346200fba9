"""Programs benchmark: the examples' training steps run by ``cupool.Session`` within 90%, 70%
and 50% of their measured peak, against the same programs without cupool and against the
simulator.

For each example (``examples/mlp_sgd.py``, ``examples/gpt_decoder.py``) and budget it runs
``STEPS`` steps with :class:`cupool.Session` on the emulated device (copies paced like the
session's link, PCIe Gen5) and the same steps with :class:`cupool.EagerSession` (every op at
once on plain NumPy arrays: the program without cupool), and records, from the third step on
(the first is the recording, the second the first planned one):

- ``eager_step_us``: median wall time of a step without cupool (run right before the
  session's, so both see the machine in the same state);
- ``session_step_us``: median wall time of a step with cupool (declaring the ops included);
- ``engine_iteration_us``: median of the iteration as the swap engine timed it (from its
  start on the streams to their end);
- ``sim_iteration_us``: the simulator's prediction for the recorded trace (op durations as
  the passive step measured them, plus the engine's cost per op and per step the session
  measured when it opened: ``engine_per_op_us``, ``engine_per_iteration_us``), the plan
  the last step ran (after feedback) and the session's cost model (the link, with the
  measured fixed cost per copy: the larger of a bare copy's and of a swap-in's through the
  engine, ``latency_us``); ``sim_error`` is
  ``engine_iteration_us / sim_iteration_us - 1``;
- ``sim_observed_us``: the same prediction with each op's duration what the planned steps
  observed (from the previous op's end, waits and recomputes left out; per-op medians
  scaled to the median step's total: ``session.measured_trace``; one passive measurement
  is noisy: a first BLAS call, a busy machine); ``sim_observed_error`` likewise;
- ``late_prefetches``: per step; ``sim_late_floor``: swap-ins the simulator predicts late
  (by more than the engine's timer-noise threshold) for that plan;
- ``device_peak_bytes``: the most device bytes the session held in any step (the pool's
  reservation in planned steps, the arena bytes in use in the recording), beside
  ``budget_bytes``;
- ``params_identical``: every parameter bitwise equal to the run without cupool.

It also measures the session's own cost per op on a resident op (a program of ``OPS``
no-op ops over one resident tensor, budget 100%): ``declare_us`` (``it.op``) and
``run_us`` (the engine's boundaries, the callback and the stream hand-offs), medians over
iterations, beside ``eager_us`` (the same op run at once).

**The examples written once** (``examples/mlp_arrays.py``, ``examples/decoder_arrays.py``:
the same models as one plain array-code step function, run under the session through its
array namespace): per budget, ``direct_step_us`` (the step function on NumPy arrays, no
cupool, run right before), ``session_step_us``, ``engine_iteration_us``, the explicit-op
example's ``session_step_us`` at the same budget beside it (from the same run; with
``--parts namespace``, from the explicit rows already in the results file), ``ops`` (the
namespace makes several times the explicit example's ops), late prefetches after the first
planned step against the simulator's floor, the device peak against the budget, and
``params_identical`` (every parameter bitwise that of the direct run). ``--parts``
picks ``explicit``, ``namespace`` or both; run alone, the namespace part replaces only its
own section of the results file.

BLAS runs one thread (``OPENBLAS_NUM_THREADS=1``, set before NumPy loads unless already
set): the examples' matrices are small, and on a shared machine BLAS threads only slow
both runs down. Every cell is measured ``--repeats`` times (timings on a shared machine
move between runs): the table gives, per cell, the medians over the repeats and the range
of both simulator errors. Prints the table and writes ``bench/results/programs.json``
(every repeat's rows and the summary).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import importlib.util
import json
import platform
import statistics
import time
from collections import Counter
from pathlib import Path

import numpy as np

import cupool
from cupool.planning.budget.feedback import predicted_waits
from cupool.sim.simulator import simulate
from cupool.swap.engine import LATE_THRESHOLD_WALL_US

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ("mlp_sgd", "gpt_decoder")
NAMESPACE_EXAMPLES = {"mlp_arrays": "mlp_sgd", "decoder_arrays": "gpt_decoder"}
"""Each example written once as array code -> its explicit-op version."""
BUDGETS = ("90%", "70%", "50%")
STEPS = 12
REPEATS = 5
SKIP = 2  # the recording and the first planned step
OPS = 200
OUT = ROOT / "bench" / "results" / "programs.json"


def example(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed_run(session, module, steps: int) -> tuple[list, list, dict]:
    """Train ``steps`` steps on ``session``: step wall times (µs), losses, parameters."""
    state = module.register(session)
    times, losses = [], []
    for batch in module.batches(steps):
        began = time.perf_counter()
        with session.iteration() as it:
            loss = module.train_step(it, state, *batch)
        times.append((time.perf_counter() - began) * 1e6)
        losses.append(float(loss.value))
    return times, losses, {name: session.read(t) for name, t in state.items()}


def measure(name: str, budget: str, steps: int, reference: dict) -> dict:
    module = example(name)
    with cupool.Session(budget, device="emulated") as session:
        times, losses, params = timed_run(session, module, steps)
        reports = session.reports
        plan, planned, cost = session.plan, session.planned, session.cost
        observed = session.measured_trace(skip=SKIP - 1)
        overhead = session.op_overhead
        result = {"example": name, "budget": budget, "budget_bytes": session.budget_bytes,
                  "peak_bytes": session.peak_bytes, "steps": steps,
                  "modes": [r.mode for r in reports],
                  "plan_reason": session.plan_reason,
                  "engine_per_op_us": overhead.per_op_us if overhead else None,
                  "engine_per_iteration_us": overhead.per_iteration_us if overhead else None,
                  "latency_us": cost.latency_us}
    later = reports[SKIP:]
    result |= {
        "eager_step_us": statistics.median(reference["times"][SKIP:]),
        "session_step_us": statistics.median(times[SKIP:]),
        "step_us": times,
        "engine_iteration_us": statistics.median(r.iteration_us for r in later),
        "iteration_us": [r.iteration_us for r in reports],
        "late_prefetches": [r.late_prefetches for r in reports],
        "stall_us": [r.stall_us for r in reports],
        "moved_triggers": [r.moved_triggers for r in reports],
        "device_peak_bytes": max(r.device_peak_bytes for r in reports),
        "device_peak_per_step": [r.device_peak_bytes for r in reports],
        "off_plan": sum(r.off_plan for r in reports),
        "plan_seconds": reports[0].plan_seconds,
        "losses": losses,
        "losses_identical": losses == reference["losses"],
        "params_identical": all(np.array_equal(params[k], v)
                                for k, v in reference["params"].items()),
    }
    if plan is not None:
        simulated = simulate(planned.trace, plan, cost, validate=False)
        floor = predicted_waits(simulated, plan)
        actions = Counter(type(a).__name__ for a in plan.actions)
        result |= {
            "sim_iteration_us": simulated.iteration_us,
            "sim_error": result["engine_iteration_us"] / simulated.iteration_us - 1,
            "sim_late_floor": sum(1 for w in floor.values() if w > LATE_THRESHOLD_WALL_US),
            "sim_observed_us": simulate(observed, plan, cost, validate=False).iteration_us,
            "plan_member": planned.budget.member if planned.budget else None,
            "swap_outs": actions.get("SwapOut", 0), "swap_ins": actions.get("SwapIn", 0),
            "recomputes": actions.get("RecomputeAction", 0),
        }
        result["sim_observed_error"] = (result["engine_iteration_us"]
                                        / result["sim_observed_us"] - 1)
    return result


def timed_direct(module, params: dict, data: list) -> tuple[list, list, dict]:
    """The step function on NumPy arrays (no cupool): step wall times (µs), losses,
    parameters."""
    state = {name: np.array(value, copy=True) for name, value in params.items()}
    times, losses = [], []
    for batch in data:
        began = time.perf_counter()
        loss = module.step(np, state, batch)
        times.append((time.perf_counter() - began) * 1e6)
        losses.append(float(loss))
    return times, losses, state


def timed_namespace_run(session, module, params: dict, data: list) -> tuple[list, list, dict]:
    """The step function under ``session`` through its namespace: step wall times (µs),
    losses, parameters."""
    tensors = {name: session.register(name, value) for name, value in params.items()}
    times, losses = [], []
    for batch in data:
        began = time.perf_counter()
        with session.iteration() as it:
            loss = it.fetch(module.step(it.xp, tensors, batch))
        times.append((time.perf_counter() - began) * 1e6)
        losses.append(float(loss.value))
    return times, losses, {name: session.read(t) for name, t in tensors.items()}


def measure_namespace(name: str, budget: str, steps: int) -> dict:
    """One example written once, at one budget (module docstring)."""
    module = example(name)
    params, data = module.initial_parameters(), module.batches(steps)
    direct_times, direct_losses, direct = timed_direct(module, params, data)
    with cupool.Session(budget, device="emulated") as session:
        times, losses, trained = timed_namespace_run(session, module, params, data)
        reports, plan, planned, cost = session.reports, session.plan, session.planned, \
            session.cost
        result = {"example": name, "budget": budget, "budget_bytes": session.budget_bytes,
                  "peak_bytes": session.peak_bytes, "steps": steps,
                  "ops": len(session.trace.ops), "modes": [r.mode for r in reports],
                  "plan_reason": session.plan_reason}
    later = reports[SKIP:]
    result |= {
        "direct_step_us": statistics.median(direct_times[SKIP:]),
        "session_step_us": statistics.median(times[SKIP:]),
        "step_us": times,
        "engine_iteration_us": statistics.median(r.iteration_us for r in later),
        "late_prefetches": [r.late_prefetches for r in reports],
        "device_peak_bytes": max(r.device_peak_bytes for r in reports),
        "plan_seconds": reports[0].plan_seconds,
        "losses": losses,
        "losses_identical": losses == direct_losses,
        "params_identical": all(np.array_equal(trained[k], v) for k, v in direct.items()),
    }
    if plan is not None:
        simulated = simulate(planned.trace, plan, cost, validate=False)
        floor = predicted_waits(simulated, plan)
        result["sim_late_floor"] = sum(1 for w in floor.values() if w > LATE_THRESHOLD_WALL_US)
        result["plan_valid"] = planned.check.valid
    return result


def _checks(cell: list[dict]) -> dict:
    """What a cell's repeats say together about the targets every program has: late
    prefetches after the first planned step, the simulator's floor for them, the device
    peak against the budget, parameters bitwise."""
    return {"late_after_first_planned": sum(sum(r["late_prefetches"][SKIP:]) for r in cell),
            "sim_late_floor": max(r.get("sim_late_floor", 0) for r in cell),
            "peak_over_budget": max(r["device_peak_bytes"] / r["budget_bytes"] for r in cell),
            "params_identical": all(r["params_identical"] for r in cell)}


def summarize_namespace(rows: list[dict], explicit: list[dict]) -> list[dict]:
    """Per example written once and budget, over the repeats (medians, the late prefetches
    after the first planned step summed, the highest peak over the budget), beside the
    explicit-op example's session step at the same budget."""
    out = []
    for name, explicit_name in NAMESPACE_EXAMPLES.items():
        for budget in BUDGETS:
            cell = [r for r in rows if r["example"] == name and r["budget"] == budget]
            if not cell:
                continue
            twin = [r["session_step_us"] for r in explicit
                    if r["example"] == explicit_name and r["budget"] == budget]
            out.append({
                "example": name, "budget": budget, "repeats": len(cell),
                "ops": cell[0]["ops"],
                "direct_step_us": statistics.median(r["direct_step_us"] for r in cell),
                "session_step_us": statistics.median(r["session_step_us"] for r in cell),
                "engine_iteration_us": statistics.median(r["engine_iteration_us"]
                                                         for r in cell),
                "explicit_session_step_us": statistics.median(twin) if twin else None,
                **_checks(cell),
                "plans_valid": all(r.get("plan_valid", False) for r in cell),
            })
    return out


def print_namespace(summary: list[dict]) -> None:
    print(f"{'written once':15} {'budget':>6} {'ops':>5} {'direct ms':>9} {'cupool ms':>9} "
          f"{'engine ms':>9} {'explicit ms':>11} {'late':>5} {'floor':>5} "
          f"{'peak/budget':>12} {'params':>7}")
    for s in summary:
        explicit = (f"{s['explicit_session_step_us'] / 1e3:11.2f}"
                    if s["explicit_session_step_us"] is not None else f"{'-':>11}")
        print(f"{s['example']:15} {s['budget']:>6} {s['ops']:5d} "
              f"{s['direct_step_us'] / 1e3:9.2f} {s['session_step_us'] / 1e3:9.2f} "
              f"{s['engine_iteration_us'] / 1e3:9.2f} {explicit} "
              f"{s['late_after_first_planned']:>5} {s['sim_late_floor']:>5} "
              f"{s['peak_over_budget']:12.3f} "
              f"{'same' if s['params_identical'] else 'DIFFER':>7}")


def _touch(x, out):
    """A resident op that does nothing (its output is never read)."""


def op_overhead(ops: int = OPS, iterations: int = 12) -> dict:
    """Per-op cost of the session on a resident op (module docstring), medians in µs."""
    x0 = np.ones(16, np.float32)
    declare, run = [], []
    with cupool.Session("100%", device="emulated") as session:
        for _ in range(iterations):
            with session.iteration() as it:
                x = it.input(x0, name="x")
                began = time.perf_counter()
                for k in range(ops):
                    it.op(_touch, x, out=((1,), "float32"), name=f"touch{k}", recompute=False)
                declared = time.perf_counter()
            ended = time.perf_counter()
            declare.append((declared - began) / ops * 1e6)
            run.append((ended - declared) / ops * 1e6)
        modes = [r.mode for r in session.reports]
    eager = []
    with cupool.EagerSession() as session:
        for _ in range(iterations):
            with session.iteration() as it:
                x = it.input(x0)
                began = time.perf_counter()
                for _k in range(ops):
                    it.op(_touch, x, out=((1,), "float32"))
                eager.append((time.perf_counter() - began) / ops * 1e6)
    later = slice(SKIP, None)
    return {"ops": ops, "iterations": iterations, "modes": modes,
            "declare_us": statistics.median(declare[later]),
            "run_us": statistics.median(run[later]),
            "session_us": statistics.median(d + r for d, r in zip(declare[later], run[later],
                                                                  strict=True)),
            "eager_us": statistics.median(eager[later])}


def summarize(rows: list[dict]) -> list[dict]:
    """Per example and budget, over the repeats: the median and range of both simulator
    errors, late prefetches after the first planned step beside the simulator's floor, the
    highest device peak over the budget, and whether every repeat kept the parameters."""
    out = []
    for name in EXAMPLES:
        for budget in BUDGETS:
            cell = [r for r in rows if r["example"] == name and r["budget"] == budget]
            summary = {"example": name, "budget": budget, "repeats": len(cell),
                       **_checks(cell),
                       "eager_step_us": statistics.median(r["eager_step_us"] for r in cell),
                       "session_step_us": statistics.median(r["session_step_us"]
                                                            for r in cell),
                       "engine_iteration_us": statistics.median(r["engine_iteration_us"]
                                                                for r in cell)}
            for key in ("sim_error", "sim_observed_error"):
                values = [r[key] for r in cell if key in r]
                if values:
                    summary[key] = statistics.median(values)
                    summary[f"{key}_range"] = [min(values), max(values)]
            out.append(summary)
    return out


def run_explicit(args, document: dict) -> bool:
    """The explicit-op examples (the table of the module docstring) into ``document``."""
    rows = []
    for repeat in range(args.repeats):
        for name in EXAMPLES:
            module = example(name)
            for budget in BUDGETS:  # the run without cupool right before: same machine state
                with cupool.EagerSession() as eager:
                    times, losses, params = timed_run(eager, module, args.steps)
                reference = {"times": times, "losses": losses, "params": params}
                rows.append({"repeat": repeat,
                             **measure(name, budget, args.steps, reference)})
    overhead = op_overhead()
    summary = summarize(rows)
    print(f"{'example':12} {'budget':>6} {'eager ms':>9} {'cupool ms':>9} {'engine ms':>9} "
          f"{'sim err (range)':>22} {'obs err (range)':>22} {'late':>5} {'floor':>5} "
          f"{'peak/budget':>12} {'params':>7}")

    def error(s, key):
        if key not in s:
            return f"{'-':>22}"
        low, high = s[f"{key}_range"]
        return f"{s[key]:+7.1%} ({low:+.1%}..{high:+.1%})".rjust(22)

    for s in summary:
        print(f"{s['example']:12} {s['budget']:>6} {s['eager_step_us'] / 1e3:9.2f} "
              f"{s['session_step_us'] / 1e3:9.2f} {s['engine_iteration_us'] / 1e3:9.2f} "
              f"{error(s, 'sim_error')} {error(s, 'sim_observed_error')} "
              f"{s['late_after_first_planned']:>5} {s['sim_late_floor']:>5} "
              f"{s['peak_over_budget']:12.3f} "
              f"{'same' if s['params_identical'] else 'DIFFER':>7}")
    print(f"({args.repeats} repeats of {args.steps} steps; medians over repeats of the "
          f"medians from step {SKIP + 1}; late: prefetches late in all repeats' steps "
          f"after the first planned one)")
    print(f"per op on a resident op: declare {overhead['declare_us']:.1f} us + run "
          f"{overhead['run_us']:.1f} us = {overhead['session_us']:.1f} us (eager call "
          f"{overhead['eager_us']:.1f} us)")
    document |= {"machine": {"python": platform.python_version(), "numpy": np.__version__,
                             "cpus": os.cpu_count(),
                             "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
                             "load_average": list(os.getloadavg())},
                 "device": "emulated", "link": "gen5", "steps": args.steps,
                 "repeats": args.repeats, "summary": summary, "rows": rows,
                 "op_overhead": overhead}
    return all(r["params_identical"] and r["device_peak_bytes"] <= r["budget_bytes"]
               for r in rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--repeats", type=int, default=REPEATS,
                        help="times every cell is measured (timings on a shared machine "
                             "move between runs; the table gives medians and ranges)")
    parser.add_argument("--parts", choices=("all", "explicit", "namespace"), default="all",
                        help="the explicit-op examples, the examples written once, or both")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    document = json.loads(args.out.read_text()) if args.parts == "namespace" and \
        args.out.is_file() else {}
    ok = True
    if args.parts != "namespace":
        ok &= run_explicit(args, document)
    if args.parts != "explicit":
        rows = []
        for repeat in range(args.repeats):
            for name in NAMESPACE_EXAMPLES:
                for budget in BUDGETS:
                    rows.append({"repeat": repeat,
                                 **measure_namespace(name, budget, args.steps)})
        summary = summarize_namespace(rows, document.get("rows", []))
        print_namespace(summary)
        print(f"({args.repeats} repeats of {args.steps} steps; medians from step {SKIP + 1}; "
              f"explicit ms: the explicit-op example's session step at the same budget)")
        document["namespace"] = {"steps": args.steps, "repeats": args.repeats,
                                 "load_average": list(os.getloadavg()),
                                 "summary": summary, "rows": rows}
        ok &= all(r["params_identical"] and r["device_peak_bytes"] <= r["budget_bytes"]
                  for r in rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
