"""What the compiled pair first fit saves: :func:`~cupool.planning.budget.engine.firstfit.
place_pairs_first_fit` (the budget planners' last-resort placement) on saved residency sets,
with NumPy masks (``native=False``) and with the C extension ``_firstfit``
(``native=True``), at the saved budget and at 2/3 of it (where every order fails sooner).

A residency set is a pickled dict of NumPy arrays, one entry per residency: ``buffer_id``,
``start``, ``end`` (ops ``[start, end)``), ``size`` (bytes, of the buffer) and ``kind``
(``True``: persistent), with the ints ``num_ops`` and ``budget``. It becomes a trace whose
buffers have these sizes and kinds (each alive through the iteration; the placement reads
only sizes and kinds) and the list of residencies, in the saved order.

Per cell: the seconds per call of each path (the best of ``--repeat`` calls, wall clock on
this machine, one process), the arena (or, when no order fits, what the last order needed)
and whether both paths gave the same offsets and the same arena (they must).

    python bench/firstfit.py residencies_1.pkl residencies_10.pkl
    python bench/firstfit.py --repeat 5 --out /tmp/firstfit.json saved.pkl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import sys
import time
from pathlib import Path

import numpy as np
from auto_speed import code_version, machine

from cupool.core.vocabulary import PERSISTENT, TEMPORARY, Buffer, Op, Trace
from cupool.planning.budget.engine.firstfit import COMPILED_AVAILABLE, place_pairs_first_fit
from cupool.planning.budget.engine.residency import ResidencyInterval

OUT = Path(__file__).resolve().parent / "results" / "firstfit.json"
FRACTIONS = (1.0, 2 / 3)


def load_residencies(path: Path) -> tuple[Trace, list[ResidencyInterval], int]:
    """The trace, the residencies and the budget saved in ``path`` (module docstring)."""
    with open(path, "rb") as f:
        saved = pickle.load(f)
    num_ops = int(saved["num_ops"])
    kinds: dict[int, tuple[int, str]] = {}
    for b, size, persistent in zip(saved["buffer_id"].tolist(), saved["size"].tolist(),
                                   saved["kind"].tolist(), strict=True):
        kinds[b] = (size, PERSISTENT if persistent else TEMPORARY)
    trace = Trace(path.stem, tuple(Op(f"op{i}") for i in range(num_ops)), tuple(
        Buffer(b, size, 0, num_ops, kind=kind) for b, (size, kind) in sorted(kinds.items())))
    intervals = [ResidencyInterval(b, s, e) for b, s, e in zip(
        saved["buffer_id"].tolist(), saved["start"].tolist(), saved["end"].tolist(),
        strict=True)]
    return trace, intervals, int(saved["budget"])


def best_of(repeat: int, call):
    """The shortest wall-clock seconds of ``repeat`` calls, and the last call's result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = call()
        best = min(best, time.perf_counter() - started)
    return best, result


def cell(trace: Trace, intervals: list, budget: int, repeat: int) -> dict:
    numpy_s, numpy_placed = best_of(repeat, lambda: place_pairs_first_fit(
        trace, intervals, budget, native=False))
    compiled_s, compiled_placed = best_of(repeat, lambda: place_pairs_first_fit(
        trace, intervals, budget, native=True))
    same = (numpy_placed.arena_bytes == compiled_placed.arena_bytes
            and (numpy_placed.offsets is None) == (compiled_placed.offsets is None)
            and (numpy_placed.offsets is None
                 or np.array_equal(numpy_placed.offsets, compiled_placed.offsets)))
    return {"budget_bytes": budget, "fits": numpy_placed.offsets is not None,
            "arena_bytes": numpy_placed.arena_bytes,
            "numpy_seconds": round(numpy_s, 4), "compiled_seconds": round(compiled_s, 4),
            "speedup": round(numpy_s / compiled_s, 1), "same_result": same}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("residencies", nargs="+", type=Path, help="pickled residency sets")
    parser.add_argument("--repeat", type=int, default=3, help="calls per path and cell")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if not COMPILED_AVAILABLE:
        print("the C extension _firstfit is not built (pip install -e .)", file=sys.stderr)
        return 2
    rows = []
    for path in args.residencies:
        trace, intervals, budget = load_residencies(path)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        for fraction in FRACTIONS:
            row = {"residencies": path.name, "sha256_16": digest,
                   "intervals": len(intervals), "fraction": round(fraction, 3),
                   **cell(trace, intervals, int(budget * fraction), args.repeat)}
            rows.append(row)
            print(f"{path.name:24s} {len(intervals):6d} residencies  x{fraction:.2f} budget  "
                  f"numpy {row['numpy_seconds']:7.3f} s  compiled "
                  f"{row['compiled_seconds']:7.3f} s  ({row['speedup']}x)  "
                  f"{'fits' if row['fits'] else 'fails'} {row['arena_bytes']}  "
                  f"same {row['same_result']}", flush=True)
    report = {"machine": machine(), "code": code_version(),
              "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "repeat": args.repeat,
              "rows": rows}
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0 if all(row["same_result"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
