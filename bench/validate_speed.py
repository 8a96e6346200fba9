"""How long ``validate_swap_plan`` takes on the large LSTM plans, against a baseline checkout.

The budget planner's refining search validates its best plans with the independent
validator, so the validator's speed is part of planning time. The inputs are those of one
``search_tiers`` call (a pickle of ``(trace, plan, cost, params)``, e.g. the 15,104-buffer
LSTM trace at half its lower bound); this runs that search once to collect the plans it
validates (valid and invalid), then times ``--calls`` validations of each plan, in a fresh
process per checkout, alternating current and baseline ``--rounds`` times so that load from
other jobs falls on both alike. Verdicts (rule, message, buffers) must be identical.

    git worktree add /tmp/wt-base <commit>      # plus the built .so files
    python bench/validate_speed.py --inputs /tmp/seed15k.pkl --baseline /tmp/wt-base
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def collect(inputs: Path) -> tuple:
    """The trace and the plans to time: the search's seed plan, then every plan the search
    validated, in order."""
    sys.path.insert(0, str(ROOT))
    import cupool.planning.budget.multilevel as multilevel
    from cupool.check import validate_plan

    with open(inputs, "rb") as f:
        trace, plan, cost, params = pickle.load(f)
    seen = [plan]

    def spy(t, p):
        seen.append(p)
        return validate_plan(t, p)

    multilevel.validate_plan = spy
    multilevel.search_tiers(trace, plan, cost, params)
    return trace, seen


def worker(root: str, plans_file: str, calls: int) -> None:
    """In a fresh process importing cupool from ``root``: verdict and call times per plan,
    as JSON on stdout."""
    sys.path.insert(0, root)
    import cupool
    from cupool.check import validate_swap_plan

    with open(plans_file, "rb") as f:
        trace, plans = pickle.load(f)
    out = {"cupool": cupool.__file__, "plans": []}
    for plan in plans:
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            report = validate_swap_plan(trace, plan)
            times.append(time.perf_counter() - start)
        out["plans"].append({"verdict": [report.valid, report.rule, report.message,
                                         [int(b) for b in report.buffers]], "seconds": times})
    print(json.dumps(out))


def run(root: Path, plans_file: str, calls: int) -> dict:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(root))
    done = subprocess.run([sys.executable, __file__, "--worker", str(root), plans_file,
                           "--calls", str(calls)], env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"worker for {root} failed: {done.stderr}")
    result = json.loads(done.stdout)
    assert result["cupool"].startswith(str(root)), result["cupool"]
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=Path, default=Path("/tmp/seed15k.pkl"))
    parser.add_argument("--baseline", type=Path,
                        help="a checkout (git worktree) of the baseline commit (required)")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", nargs=2, metavar=("ROOT", "PLANS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(*args.worker, args.calls)
        return 0
    if args.baseline is None:
        parser.error("--baseline is required")
    trace, plans = collect(args.inputs)
    with tempfile.NamedTemporaryFile(suffix=".pkl", delete=False) as f:
        pickle.dump((trace, plans), f)
    sides = {"baseline": args.baseline.resolve(), "current": ROOT}
    seconds = {side: [[] for _ in plans] for side in sides}
    first = {side: [] for side in sides}  # each process's first call
    verdicts = {}
    try:
        for _ in range(args.rounds):
            for side, root in sides.items():
                result = run(root, f.name, args.calls)
                first[side].append(result["plans"][0]["seconds"][0])
                for k, entry in enumerate(result["plans"]):
                    seconds[side][k].append(statistics.median(entry["seconds"]))
                    verdicts.setdefault(side, {})[k] = entry["verdict"]
    finally:
        os.unlink(f.name)
    print(f"{len(trace.buffers)} buffers, {trace.num_ops} ops; per plan: the median of "
          f"{args.calls} calls, the median over {args.rounds} alternating rounds")
    print(f"{'plan':>4} {'residencies':>11} {'actions':>7} {'verdict':>10} "
          f"{'baseline ms':>11} {'current ms':>10} {'speed-up':>8}")
    same = True
    for k, plan in enumerate(plans):
        old, new = (statistics.median(seconds[side][k]) * 1e3 for side in sides)
        verdict = verdicts["current"][k]
        same &= verdict == verdicts["baseline"][k]
        print(f"{k:>4} {len(plan.residencies):>11} {len(plan.actions):>7} "
              f"{verdict[1] or 'VALID':>10} {old:>11.1f} {new:>10.1f} {old / new:>7.1f}x")
    cold = [statistics.median(first[side]) * 1e3 for side in sides]
    print(f"first call of a process (plan 0; the trace's columns not yet kept): "
          f"{cold[0]:.1f} ms -> {cold[1]:.1f} ms")
    total = [sum(statistics.median(s) for s in seconds[side]) * 1e3 for side in sides]
    print(f"all {len(plans)} plans: {total[0]:.1f} ms -> {total[1]:.1f} ms "
          f"({total[0] / total[1]:.1f}x); verdicts (rule, message, buffers) "
          f"{'identical' if same else 'DIFFER'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
