"""Quick driver for the ``exact`` solver: MiniMalloc's challenging instances and the real traces.

    python bench/exact_dsa.py [--python] [--limit SECONDS] [NAME ...]

Each instance is solved as a decision problem at its capacity (the CSV's file-name
number, or the lower bound for traces); every plan is checked by the validator.
Prints one row per instance: buffers, status, arena / capacity, seconds, nodes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cupool.check import validate_offsets
from cupool.io import load_trace
from cupool.planning.problem import StaticProblem
from cupool.planning.solvers.base import SolverParams
from cupool.planning.solvers.exact import solve_exact

DATA = Path(__file__).resolve().parents[1] / "cupool" / "data"
MINIMALLOC_SECONDS = {"A": 11.3, "C": 1.6, "E": 10.8, "G": 2.7, "I": 8.6, "K": 1.7}


def instances():
    """``(name, problem with its capacity, reference seconds or None)`` for every instance."""
    for path in sorted((DATA / "dsa").glob("*.csv")):
        capacity = int(path.name.split(".")[-2])
        letter = path.name.split(".")[0].removeprefix("challenging-")
        yield (path.name, StaticProblem.from_trace(load_trace(path), capacity),
               MINIMALLOC_SECONDS.get(letter))
    for path in sorted((DATA / "traces").glob("*.json.gz")):
        problem = StaticProblem.from_trace(load_trace(path))
        yield path.name.split(".")[0], problem.with_capacity(problem.lower_bound()), None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="substrings of instance names (default: all)")
    parser.add_argument("--python", action="store_true", help="use the pure-Python search")
    parser.add_argument("--limit", type=float, default=None, help="time limit per instance (s)")
    args = parser.parse_args(argv)
    params = SolverParams(time_limit_s=args.limit, native=not args.python)
    print(f"{'instance':42} {'n':>5} {'status':>10} {'arena/cap':>9} {'seconds':>8} "
          f"{'10x ref':>8} {'nodes':>10}")
    failures = 0
    for name, problem, reference in instances():
        if args.names and not any(word in name for word in args.names):
            continue
        result = solve_exact(problem, params)
        if result.offsets is not None:
            report = validate_offsets(problem, result.offsets)
            if not report.valid:
                print(f"{name}: INVALID PLAN: {report.message}")
                failures += 1
        arena = result.arena_bytes
        ratio = "-" if arena is None else f"{arena / problem.capacity:.4f}"
        limit = "-" if reference is None else f"{10 * reference:.0f}"
        print(f"{name:42} {problem.n:5d} {result.status.value:>10} {ratio:>9} "
              f"{result.solve_seconds:8.2f} {limit:>8} {result.stats['nodes']:10d}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
