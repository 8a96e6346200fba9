"""Plan hashes: does a change to the planners alter any plan they make?

Plans every bundled input the way users and the other benchmarks do, writes each plan
with the plan JSON writer, and records a SHA-256 of it, so that a refactor meant to keep
the plans can be checked to have kept them, byte for byte::

    python bench/plan_hashes.py                     # record bench/results/plan_hashes.json
    python bench/plan_hashes.py --check bench/results/plan_hashes.json    # exit 1 on change
    python bench/plan_hashes.py --only resnet50 --jobs 2                  # a subset, 2 workers

The cases (``method`` / ``budget`` columns):

- every bundled trace (``cupool/data/traces``), with every static solver of
  ``cupool.planning.SOLVER_NAMES`` and no capacity (``budget`` ``none``): the smallest
  arena each finds;
- every MiniMalloc CSV (``cupool/data/dsa``), with every static solver at the capacity in
  its file name (``budget`` ``capacity``; greedy solvers report ``over_capacity`` when they
  miss it, as in ``bench/static.py``);
- every bundled trace with the ``auto`` budget policy (``method`` ``budget:auto``) at 90%,
  70% and 50% of its lower bound (parsed as ``cupool plan --budget 70%`` does), on the Gen5
  link cost model, as ``cupool plan``/``simulate`` call it. A budget under one op's own
  working set gives an ``infeasible`` plan, hashed like any other.

Determinism. Every search is seeded with 0 and stopped by counts, not the clock: ``genetic``
by its generation and stall limits (``SolverParams`` defaults), ``exact`` (nothing random)
by finishing its search, the ``auto`` solver by its heuristics or by ``exact`` finishing,
the ``auto`` policy by ``refine_evaluations``. Each gets a wall-clock limit of
``GUARD_S`` only as a guard against a search that does not end; a case that ran into it
(``genetic`` stopped by ``time_limit``, ``exact`` cut short, ``auto`` whose ``exact`` timed
out, a budget plan that took the policy's own 600 s refine cap) depends on the machine's
speed: it is marked ``time-limited``, gets no hash, and ``--check`` skips it.

What is hashed: ``plan_to_document(plan)`` (the writer behind ``cupool.io.save_plan``) less
the fields that are not the plan -- ``solve_seconds`` (wall time) and every ``stats`` key
named ``native`` (which implementation ran; the C and Python searches give identical
plans) -- as canonical JSON (sorted keys, no spaces, ASCII) encoded in UTF-8.

``--check FILE`` recomputes the cases of ``FILE`` (those matching ``--only``), prints each
whose hash, status or presence differs, and exits 1 if any does, 0 if all are identical.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cupool.core.units import parse_budget  # noqa: E402
from cupool.core.vocabulary import SolveStatus  # noqa: E402
from cupool.data import bundled_dsa, bundled_traces, dsa_capacity  # noqa: E402
from cupool.io import load_trace  # noqa: E402
from cupool.io.plan_json import plan_to_document  # noqa: E402
from cupool.planning import SOLVER_NAMES, SolverParams, plan  # noqa: E402

DEFAULT_OUT = ROOT / "bench" / "results" / "plan_hashes.json"
SEED = 0
GUARD_S = 600.0
"""Wall-clock limit given to every search, as a guard only: the cases here end long before
it by their counts; one that reaches it is marked ``time-limited`` (module docstring)."""
BUDGET_FRACTIONS = ("90%", "70%", "50%")
BUDGET_POLICY = "auto"
LINK = "gen5"
BUDGET_REFINE_CAP_S = 600.0
"""``cupool.planning.budget.auto.REFINE_TIME_LIMIT_S``: a budget plan that took this long
may have been cut by it."""
EXCLUDED = ("solve_seconds", "stats.**.native")
TIME_LIMITED = "time-limited"


@dataclass(frozen=True)
class Case:
    """One plan to make: ``trace`` (a name, as in the trace), the file it is read from
    (relative to the repository), ``method`` (a static solver, or ``budget:<policy>``) and
    ``budget`` (``none``, ``capacity`` or a percentage of the lower bound)."""

    trace: str
    path: str
    method: str
    budget: str

    @property
    def key(self) -> tuple[str, str, str]:
        return self.trace, self.method, self.budget


@dataclass(frozen=True)
class Outcome:
    """What one case gave: the plan's ``status`` (a ``SolveStatus`` value, or
    ``time-limited``), ``arena_bytes``, ``budget_bytes`` (the capacity or budget it was
    planned for; ``None`` without one), ``sha256`` (hex; ``None`` when time-limited) and
    the wall ``seconds`` it took (information, not compared)."""

    trace: str
    method: str
    budget: str
    status: str
    arena_bytes: int
    budget_bytes: int | None
    sha256: str | None
    seconds: float


def cases(only: str | None = None) -> list[Case]:
    """Every case, traces first (static solvers, then the budget policy), then the CSVs;
    ``only`` keeps the inputs whose name contains it."""
    traces = [(path, path.name.removesuffix(".trace.json.gz")) for path in bundled_traces()]
    csvs = [(path, path.name.removesuffix(".csv")) for path in bundled_dsa()]
    found = []
    for path, name in traces:
        relative = str(path.relative_to(ROOT))
        found += [Case(name, relative, solver, "none") for solver in SOLVER_NAMES]
        found += [Case(name, relative, f"budget:{BUDGET_POLICY}", fraction)
                  for fraction in BUDGET_FRACTIONS]
    for path, name in csvs:
        relative = str(path.relative_to(ROOT))
        found += [Case(name, relative, solver, "capacity") for solver in SOLVER_NAMES]
    return [case for case in found if only is None or only in case.trace]


def plan_digest(planned) -> str:
    """SHA-256 (hex) of ``planned`` as the plan JSON writer writes it, less ``EXCLUDED``."""
    document = plan_to_document(planned)
    del document["solve_seconds"]
    document["stats"] = _without_native(document["stats"])
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _without_native(value):
    if isinstance(value, dict):
        return {k: _without_native(v) for k, v in value.items() if k != "native"}
    if isinstance(value, list | tuple):
        return [_without_native(v) for v in value]
    return value


def static_time_limited(planned) -> bool:
    """Whether a static solver's plan depends on when the guard fired (module docstring)."""
    stats = planned.stats
    if planned.solver == "genetic":
        return stats.get("stop") == "time_limit"
    if planned.solver == "exact":
        minimize_cut = planned.capacity_bytes is None and planned.status == SolveStatus.FEASIBLE
        return (planned.status == SolveStatus.TIMEOUT or minimize_cut
                or stats.get("certificate") == "sweep-timeout")
    if planned.solver == "auto":
        return (stats.get("exact_status") == SolveStatus.TIMEOUT.value
                or planned.solve_seconds >= 0.95 * GUARD_S)
    return False


def run_case(case: Case) -> Outcome:
    """Make the plan of ``case`` and hash it."""
    trace = load_trace(ROOT / case.path)
    started = time.perf_counter()
    if case.method.startswith("budget:"):
        from cupool.planning.budget import BudgetParams, plan_with_budget
        from cupool.sim import cost_model

        budget_bytes = parse_budget(case.budget, trace.lower_bound_bytes())
        planned = plan_with_budget(trace, budget_bytes, case.method.removeprefix("budget:"),
                                   cost_model(LINK), BudgetParams(seed=SEED)).plan
        limited = planned.solve_seconds >= 0.95 * BUDGET_REFINE_CAP_S
    else:
        budget_bytes = dsa_capacity(ROOT / case.path) if case.budget == "capacity" else None
        planned = plan(trace, case.method, budget_bytes,
                       SolverParams(seed=SEED, time_limit_s=GUARD_S))
        limited = static_time_limited(planned)
    seconds = time.perf_counter() - started
    return Outcome(case.trace, case.method, case.budget,
                   TIME_LIMITED if limited else planned.status.value, planned.arena_bytes,
                   budget_bytes, None if limited else plan_digest(planned), round(seconds, 3))


def run_all(todo: list[Case], jobs: int) -> list[Outcome]:
    """Every case of ``todo``, printed as a table row as it finishes, in ``todo``'s order."""
    print(f"{'trace':<34} {'method':<15} {'budget':<9} {'status':<13} {'sha256':<16} "
          f"{'seconds':>8}")
    print("-" * 100)
    if jobs <= 1:
        results = []
        for case in todo:
            results.append(run_case(case))
            _print_row(results[-1])
        return results
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        results = []
        for outcome in pool.map(run_case, todo):
            results.append(outcome)
            _print_row(outcome)
        return results


def _print_row(outcome: Outcome) -> None:
    digest = "-" if outcome.sha256 is None else outcome.sha256[:16]
    print(f"{outcome.trace:<34} {outcome.method:<15} {outcome.budget:<9} {outcome.status:<13} "
          f"{digest:<16} {outcome.seconds:>8.2f}", flush=True)


def git_state() -> dict:
    """The commit the plans were made at, and the uncommitted paths under ``cupool/`` (an
    uncommitted change there may have made a plan; outside it, none can)."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout
    try:
        commit = git("rev-parse", "HEAD").strip()
        changed = [line[3:] for line in git("status", "--porcelain", "--", "cupool").splitlines()]
    except (OSError, subprocess.CalledProcessError):
        return {"recorded_at_commit": None, "uncommitted_under_cupool": None}
    return {"recorded_at_commit": commit, "uncommitted_under_cupool": changed}


def machine() -> dict:
    try:
        from cupool.planning.solvers import _exact  # noqa: F401

        native = True
    except ImportError:
        native = False
    import numpy as np

    return {"python": platform.python_version(), "numpy": np.__version__,
            "platform": platform.platform(), "exact_native": native}


def record(outcomes: list[Outcome], out: Path, seconds: float, jobs: int) -> None:
    document = {
        "benchmark": "plan_hashes", **git_state(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(),
        "total_seconds": round(seconds, 1), "jobs": jobs,
        "settings": {"seed": SEED, "guard_time_limit_s": GUARD_S,
                     "solver_params": asdict(SolverParams(seed=SEED, time_limit_s=GUARD_S)),
                     "budget_policy": BUDGET_POLICY, "budget_fractions": list(BUDGET_FRACTIONS),
                     "link": LINK, "hash": "sha256 of canonical plan JSON",
                     "excluded_fields": list(EXCLUDED)},
        "cases": [asdict(outcome) for outcome in outcomes],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {out}")


def check(baseline_path: Path, only: str | None, jobs: int) -> int:
    """Recompute the cases of the baseline (matching ``only``); 1 if any differs."""
    baseline = json.loads(baseline_path.read_text())
    recorded = {(c["trace"], c["method"], c["budget"]): c for c in baseline["cases"]
                if only is None or only in c["trace"]}
    todo = [case for case in cases(only) if case.key in recorded]
    missing = sorted(set(recorded) - {case.key for case in todo})
    extra = [case.key for case in cases(only) if case.key not in recorded]
    print(f"checking {len(todo)} cases against {baseline_path} (recorded at "
          f"{baseline.get('recorded_at_commit')})")
    outcomes = run_all(todo, jobs)
    mismatches = [f"{' / '.join(key)}: in the baseline, no longer a case" for key in missing]
    mismatches += [f"{' / '.join(key)}: a case the baseline does not have" for key in extra]
    skipped = identical = 0
    for outcome in outcomes:
        old = recorded[outcome.trace, outcome.method, outcome.budget]
        if TIME_LIMITED in (old["status"], outcome.status):
            skipped += 1
            print(f"skipped (time-limited): {outcome.trace} / {outcome.method} / "
                  f"{outcome.budget}: baseline {old['status']}, now {outcome.status}")
            continue
        if (old["sha256"], old["status"]) != (outcome.sha256, outcome.status):
            mismatches.append(f"{outcome.trace} / {outcome.method} / {outcome.budget}: baseline "
                              f"{old['status']} {old['sha256'][:16]} (arena "
                              f"{old['arena_bytes']}), now {outcome.status} "
                              f"{outcome.sha256[:16]} (arena {outcome.arena_bytes})")
        else:
            identical += 1
    for line in mismatches:
        print(f"MISMATCH {line}")
    print(f"{identical} identical, {len(mismatches)} differ, {skipped} skipped")
    return 1 if mismatches else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", type=Path, metavar="FILE",
                        help="recompute the cases of FILE and compare (exit 1 on a difference)")
    parser.add_argument("--only", metavar="SUBSTRING", help="only inputs whose name contains it")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"where to record (default {DEFAULT_OUT.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs (={args.jobs}) must be >= 1")
    if args.check is not None:
        return check(args.check, args.only, args.jobs)
    todo = cases(args.only)
    if not todo:
        parser.error(f"--only {args.only!r} matches no input")
    started = time.perf_counter()
    outcomes = run_all(todo, args.jobs)
    seconds = time.perf_counter() - started
    limited = [o for o in outcomes if o.status == TIME_LIMITED]
    print(f"{len(outcomes)} cases in {seconds:.1f} s; {len(limited)} time-limited (not hashed)")
    record(outcomes, args.out, seconds, args.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
