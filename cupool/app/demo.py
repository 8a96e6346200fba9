"""``cupool demo``: the main job on the bundled real traces, and a user's program, in four
parts.

1. Every static solver on every bundled trace: arena bytes against the lower bound and
   seconds, each plan checked by the validator; the best plan per trace is written out.
2. Below the lower bound: every budget policy on one training step at 70% and 50%,
   simulated on PCIe Gen5, beside the sound lower bound on overhead.
3. The swap engine running the 70% plan for a few iterations (on the GPU when there is one,
   else on the emulated device), every byte checked, beside the simulator's prediction.
4. A user's own program: the GPT-style decoder of ``examples/gpt_decoder.py`` trained with
   AdamW through ``cupool.Session`` within 50% of its peak (same device choice), its loss
   per step, and its parameters compared bitwise with the same program run without cupool.

:func:`run_demo` returns the whole result as one flat dict (the ``--json`` object) and says
each line of the text report to ``say`` as it is measured (``None``: silent).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from cupool.errors import InputError
from cupool.io import load_trace, save_plan
from cupool.planning import SOLVER_NAMES, SolverParams, plan, validate_plan

BUDGET_TRACE = "resnet50_train_b32_fp32"
"""The bundled trace the budget policies and the replay run on."""
BUDGET_PERCENTS = (70, 50)
"""Budgets of the second part, in percent of the trace's lower bound."""
REPLAY_ITERATIONS, REPLAY_PERCENT = 3, 70
"""Iterations the swap engine runs in the third part, and its budget (of the lower
bound; one of :data:`BUDGET_PERCENTS`, whose ``auto`` plan it runs)."""
PROGRAM_EXAMPLE, PROGRAM_BUDGET, PROGRAM_STEPS = "gpt_decoder", "50%", 6
"""The example program of the fourth part, its budget (of its peak) and its steps."""

Say = Callable[[str], None]


@dataclass(frozen=True)
class DemoOptions:
    """Where the best plans go (``out_dir``, made if missing) and the search solvers' time
    limit per trace (``time_limit_s``)."""

    out_dir: Path
    time_limit_s: float


def run_demo(options: DemoOptions, say: Say | None = None) -> dict:
    """Run the four parts; the result has ``traces``, ``budgets``, ``replay``, ``program``,
    ``out`` and ``seconds``. :class:`~cupool.errors.InputError` when ``out_dir`` exists and is not a
    directory."""
    say = say or (lambda _line: None)
    out_dir = options.out_dir
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError("exists and is not a directory", path=str(out_dir))
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    rows = solve_every_trace(out_dir, options.time_limit_s, say)
    budgets = budget_policies(say)
    replayed = replay_budget_plan(say, budgets.replayed)
    program = train_example_program(say)
    elapsed = time.perf_counter() - started
    say(f"\nbest plan per trace written to {out_dir}/ ({len(rows)} files, plan format v1; "
        f"check one with `cupool validate TRACE PLAN`); {elapsed:.1f} s in all")
    return {"traces": rows, "budgets": budgets.rows, "replay": replayed, "program": program,
            "out": str(out_dir), "seconds": round(elapsed, 2)}


def _budget_trace():
    from cupool.data import bundled_traces

    return load_trace(next(p for p in bundled_traces() if p.name.startswith(BUDGET_TRACE)))


def solve_every_trace(out_dir: Path, time_limit_s: float, say: Say) -> list[dict]:
    """Every static solver on every bundled trace; the best valid plan of each written to
    ``out_dir``. One row per trace."""
    from cupool.data import bundled_traces

    params = SolverParams(time_limit_s=time_limit_s, seed=0)
    say("cupool demo: every solver on every bundled trace (arena bytes, ratio to the lower "
        f"bound, seconds); search solvers get {time_limit_s:g} s")
    say(f"{'trace':<36} {'buffers':>7} {'lower bound':>14}  "
        + "  ".join(f"{name:>14}" for name in SOLVER_NAMES))
    rows = []
    for path in bundled_traces():
        trace = load_trace(path)
        lower = trace.lower_bound_bytes()
        row = {"trace": trace.name, "buffers": len(trace.buffers), "lower_bound_bytes": lower,
               "solvers": {}}
        cells = []
        best = None
        for name in SOLVER_NAMES:
            result = plan(trace, name, None, replace(params))
            valid = validate_plan(trace, result).valid
            row["solvers"][name] = {"arena_bytes": result.arena_bytes,
                                    "ratio": round(result.ratio, 6),
                                    "seconds": round(result.solve_seconds, 3),
                                    "status": result.status.value, "valid": valid}
            cells.append(f"{result.ratio:.4f} {result.solve_seconds:5.2f}s")
            if valid and (best is None or result.arena_bytes < best.arena_bytes):
                best = result
        plan_path = out_dir / f"{trace.name}.plan.json"
        save_plan(best, plan_path)
        row["plan"] = str(plan_path)
        row["best_solver"] = best.solver
        rows.append(row)
        say(f"{trace.name:<36} {len(trace.buffers):>7} {lower:>14}  "
            + "  ".join(f"{c:>14}" for c in cells))
    return rows


@dataclass(frozen=True)
class BudgetPolicies:
    """The second part's ``rows`` (one per budget) and ``replayed``: the ``auto`` plan at
    :data:`REPLAY_PERCENT` (what :func:`make_plan` returned), which the third part runs."""

    rows: list
    replayed: object


def budget_policies(say: Say) -> BudgetPolicies:
    """Below the lower bound: every budget policy on one training step at 70% and 50%,
    simulated on PCIe Gen5, beside the sound lower bound on overhead."""
    from cupool.planning.budget import POLICY_NAMES
    from cupool.planning.planned import make_plan
    from cupool.sim import cost_model, overhead_lower_bound, simulate

    trace = _budget_trace()
    cost = cost_model("gen5")
    say(f"\n{trace.name} below its lower bound (swaps + recomputation, PCIe Gen5, "
        "simulated): overhead per policy")
    say(f"{'budget':>8}  " + "  ".join(f"{name:>10}" for name in POLICY_NAMES)
        + f"  {'bound':>10}")
    results, replayed = [], None
    for percent in BUDGET_PERCENTS:
        budget = trace.lower_bound_bytes() * percent // 100
        row = {"budget_percent": percent, "budget_bytes": budget, "overhead": {}}
        cells = []
        for policy in POLICY_NAMES:
            planned = make_plan(trace, budget, policy=policy, cost=cost)
            if policy == "auto" and percent == REPLAY_PERCENT:
                replayed = planned
            report = simulate(planned.trace, planned.plan, cost)
            row["overhead"][policy] = report.overhead if report.feasible else None
            cells.append(f"{100 * report.overhead:9.1f}%" if report.feasible else "   no plan")
        bound = overhead_lower_bound(planned.trace, budget, cost)
        row["lower_bound_overhead"] = bound.overhead if bound.feasible else None
        row["lower_bound_method"] = bound.details.get("method")
        results.append(row)
        say(f"{percent:>7}%  " + "  ".join(cells) + f"  {100 * bound.overhead:9.1f}%")
    return BudgetPolicies(results, replayed)


def replay_budget_plan(say: Say, planned=None) -> dict:
    """The swap engine (handles, copy streams, pinned staging) running the 70% plan for a
    few iterations, every byte checked, beside the simulator's prediction; on the GPU when
    one is usable, else on the emulated device. ``planned``: the ``auto`` plan at 70%
    when the second part made it (else it is made here). ``{"skipped": why}`` when it
    cannot run."""
    from cupool.app.replay import DEFAULT_SIZE_SCALE, ReplaySettings, replay
    from cupool.devices import probe_cuda
    from cupool.program.errors import ReplayError

    trace = _budget_trace()
    usable, why = probe_cuda()
    device = "cuda" if usable else "emulated"
    try:
        given = {} if planned is None or not planned.fits else {
            "plan": planned.plan, "plan_trace": planned.trace}
        result = replay(trace, f"{REPLAY_PERCENT}%",
                        ReplaySettings(iterations=REPLAY_ITERATIONS), device=device, **given)
    except ReplayError as exc:
        say(f"\nreplay of {trace.name} at {REPLAY_PERCENT}% skipped: {exc}")
        return {"skipped": str(exc)}
    where = ("the GPU (copies at its own speed)" if usable else
             f"the emulated device (sizes / {DEFAULT_SIZE_SCALE}, copies paced to the "
             f"scaled PCIe Gen5 link)\n  no GPU here: {why}")
    say(f"\nreplay of {trace.name} at {REPLAY_PERCENT}% on {where}")
    say(f"  iteration us per iteration {[round(t) for t in result['iteration_us']]} vs "
        f"simulator {result['sim_iteration_us']:.0f} us")
    say(f"  late prefetches per iteration {result['late_prefetches']}; bytes checked "
        f"{result['bytes_checked']}, corrupt {result['corrupt_bytes']}")
    return result


def train_example_program(say: Say) -> dict:
    """The decoder example trained within 50% of its peak through ``cupool.Session`` (on
    the GPU when one is usable, else on the emulated device), then without cupool: losses,
    modes, device peaks, and whether the parameters are bitwise the same.
    ``{"skipped": why}`` outside a checkout (the examples are not installed)."""
    import numpy as np

    from cupool.app.examples import ExampleMissingError, load_example
    from cupool.devices import probe_cuda
    from cupool.program import EagerSession, Session

    try:
        module = load_example(PROGRAM_EXAMPLE)
    except ExampleMissingError as exc:
        say(f"\nexample program skipped: {exc}")
        return {"skipped": str(exc)}
    usable, _why = probe_cuda()
    device = "cuda" if usable else "emulated"
    say(f"\nyour own program within a budget: examples/{PROGRAM_EXAMPLE}.py (embedding, "
        f"causal attention, layer norm, GELU, AdamW) at {PROGRAM_BUDGET} of its peak on "
        f"{'the GPU' if usable else 'the emulated device'}")
    with Session(PROGRAM_BUDGET, device=device) as session:
        losses, params = module.train(session, PROGRAM_STEPS)
        reports = session.reports
        xp, peak, budget = session.xp, session.peak_bytes, session.budget_bytes
        actions = len(session.plan.actions) if session.plan else 0
    for step, (loss, report) in enumerate(zip(losses, reports, strict=True)):
        say(f"  step {step}: loss {loss:.4f}  {report.mode:<7}  device peak "
            f"{report.device_peak_bytes} of {report.budget_bytes} B, late prefetches "
            f"{report.late_prefetches}")
    with EagerSession(xp) as eager:
        reference_losses, reference = module.train(eager, PROGRAM_STEPS)
    same = all(np.array_equal(params[k], v) for k, v in reference.items()) and \
        losses == reference_losses
    say(f"  peak {peak} B, budget {budget} B, plan: {actions} swap/recompute actions; "
        f"parameters bitwise identical to the run without cupool: {'yes' if same else 'NO'}")
    return {"example": PROGRAM_EXAMPLE, "device": device, "budget": PROGRAM_BUDGET,
            "peak_bytes": peak, "budget_bytes": budget, "losses": losses,
            "modes": [r.mode for r in reports],
            "device_peak_bytes": [r.device_peak_bytes for r in reports],
            "late_prefetches": [r.late_prefetches for r in reports],
            "plan_actions": actions, "params_identical": same}


__all__ = ["BUDGET_PERCENTS", "BUDGET_TRACE", "PROGRAM_BUDGET", "PROGRAM_EXAMPLE",
           "PROGRAM_STEPS", "REPLAY_ITERATIONS", "DemoOptions", "budget_policies",
           "replay_budget_plan", "run_demo", "solve_every_trace", "train_example_program"]
