"""Benchmark of several models in one pool of blocks (counted from each model's data flow).

For sets of N inference models (the bundled inference traces; a model may appear twice:
two replicas), the shared pool (:func:`cupool.planning.blocks.plan_shared`) is compared
with one arena per model at its lower bound (sum of peaks) and with the target
``max(peak) + sum(persistent)`` (models never run concurrently). Every model's plan is
checked by the independent validator on its own trace, and the pool by ``check_pool``
(no model touches another's persistent region). ``floor`` = ``sum(persistent) +
max(temporary peak)``: no layout that keeps persistent regions apart does better.
``concurrent`` is the pool when the models may run at the same time (no byte shared).

    python bench/blocks.py          # writes bench/results/blocks.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cupool.core.units import format_bytes
from cupool.io import load_trace
from cupool.planning.blocks import BlockParams, check_pool, plan_shared

TRACES = Path(__file__).resolve().parent.parent / "cupool" / "data" / "traces"
SETS = (
    ("resnet50_infer_b8",),
    ("mobilenetv2_infer_b1", "mobilenetv2_infer_b8"),
    ("resnet50_infer_b8", "mobilenetv2_infer_b8"),
    ("resnet50_infer_b8", "mobilenetv2_infer_b1", "mobilenetv2_infer_b8"),
    ("resnet50_infer_b8", "resnet50_infer_b8", "mobilenetv2_infer_b1", "mobilenetv2_infer_b8"),
)


def run() -> dict:
    cache = {}
    rows = []
    for names in SETS:
        traces = [cache.setdefault(n, load_trace(TRACES / f"{n}.trace.json.gz")) for n in names]
        pool = plan_shared(traces)
        check = check_pool(traces, pool)
        concurrent = plan_shared(traces, BlockParams(concurrent=True))
        concurrent_check = check_pool(traces, concurrent)
        rows.append({
            "models": list(names), "n": len(names),
            "sum_peak_bytes": pool.sum_peak_bytes, "target_bytes": pool.target_bytes,
            "floor_bytes": pool.floor_bytes, "pool_bytes": pool.arena_bytes,
            "ratio_to_sum_of_peaks": pool.arena_bytes / pool.sum_peak_bytes,
            "within_target": pool.arena_bytes <= pool.target_bytes,
            "valid": check.valid, "invalid_reason": check.message or None,
            "concurrent_pool_bytes": concurrent.arena_bytes,
            "concurrent_valid": concurrent_check.valid,
            "layouts": [m.layout for m in pool.models],
            "blocks": [sum(c.blocks for c in m.classes) for m in pool.models],
            "slot_layout_bytes": [m.slot_layout_bytes for m in pool.models],
            "offsets_layout_bytes": [m.offsets_layout_bytes for m in pool.models],
            "solve_seconds": pool.solve_seconds,
        })
    return {"rows": rows, "params": BlockParams().__dict__}


def _mib(value: int) -> str:
    return format_bytes(value)


def print_table(rows) -> None:
    print("| N | models | sum of peaks | max(peak)+sum(persistent) | floor | blocks pool | "
          "ratio to sum | target met | validator | concurrent pool |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['n']} | {' + '.join(r['models'])} | {_mib(r['sum_peak_bytes'])} | "
              f"{_mib(r['target_bytes'])} | {_mib(r['floor_bytes'])} | {_mib(r['pool_bytes'])} | "
              f"{r['ratio_to_sum_of_peaks']:.3f} | {'yes' if r['within_target'] else 'NO'} | "
              f"{'valid' if r['valid'] else 'INVALID'} | {_mib(r['concurrent_pool_bytes'])} "
              f"({'valid' if r['concurrent_valid'] else 'INVALID'}) |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "blocks.json"))
    args = parser.parse_args(argv)
    result = run()
    print_table(result["rows"])
    Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    ok = all(r["valid"] and r["concurrent_valid"] for r in result["rows"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
