"""Replay of the inference plans: late prefetches per iteration against the simulator's floor.

Every inference trace of ``bench/swap.py`` (the captures of ``bench/data/traces``) is
planned by ``auto`` at 90/70/50% of its lower bound and replayed the way ``cupool replay``
does (:func:`cupool.app.replay.replay`: the swap engine on an emulated device paced like the
link, the late-prefetch feedback between iterations) for ``ITERATIONS`` iterations. Target:
from iteration ``CONVERGED_BY`` on, every iteration's late prefetches are at most the
simulator's floor (the swap-ins the simulator itself predicts late) for the plan as first
planned, and the feedback did not leave a plan whose floor is higher. Corrupt bytes (the
pattern checks of every buffer use) must be 0.

    python bench/replay_inference.py       # writes bench/results/replay_inference.json
    python bench/replay_inference.py --fractions 0.7 --only resnet50

Sizes are divided by ``SIZE_SCALE``. Inference passes are short (50 µs to 42 ms of op time),
so op durations are stretched by ``max(TIME_SCALE, MIN_IDEAL_WALL_US / ideal µs)``: every
iteration takes at least ``MIN_IDEAL_WALL_US`` of wall time when nothing waits, which keeps
the per-op Python overhead small next to the ops (times are reported in trace µs, as in
``bench/replay.py``). A cell where no plan can exist (an op's own working set exceeds the
budget) is recorded as such and not replayed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from swap import LINKS, bench_traces, run_info

from cupool.app.replay import ReplaySettings, replay
from cupool.program.errors import ReplayError
from cupool.sim import cost_model

ROOT = Path(__file__).resolve().parents[1]
SIZE_SCALE = 4096
TIME_SCALE = 40.0
MIN_IDEAL_WALL_US = 200_000.0
ITERATIONS = 4
CONVERGED_BY = 3
FRACTIONS = (0.9, 0.7, 0.5)


def time_scale_for(trace, link: str, min_wall_us: float = MIN_IDEAL_WALL_US) -> float:
    """The op-time stretch for ``trace``: at least ``TIME_SCALE``, and enough for its ideal
    iteration to take ``min_wall_us`` of wall time (module docstring)."""
    ideal_us = sum(cost_model(link).op_times(trace))
    return max(TIME_SCALE, min_wall_us / ideal_us) if ideal_us > 0 else TIME_SCALE


def replay_cell(trace, fraction: float, link: str,
                min_wall_us: float = MIN_IDEAL_WALL_US) -> dict:
    """Plan ``trace`` with ``auto`` at ``fraction`` of its lower bound and replay it."""
    scale = time_scale_for(trace, link, min_wall_us)
    settings = ReplaySettings(iterations=ITERATIONS, link=link, size_scale=SIZE_SCALE,
                              time_scale=scale)
    row = {"trace": trace.name, "fraction": fraction, "link": link, "time_scale": scale}
    began = time.perf_counter()
    try:
        result = replay(trace, f"{round(fraction * 100)}%", settings)
    except ReplayError as exc:
        return {**row, "status": "no plan", "reason": str(exc),
                "seconds": round(time.perf_counter() - began, 1)}
    late = result["late_prefetches"]
    floor = result["sim_late_floor_planned"]
    keys = ("budget_bytes", "iteration_us", "mean_iteration_us", "sim_iteration_us",
            "late_prefetches", "stall_us", "feedback_moves", "sim_late_floor",
            "sim_late_floor_planned", "off_plan", "bytes_checked", "corrupt_bytes")
    return {**row, "status": "replayed", **{k: result[k] for k in keys},
            "replay_over_sim": result["mean_iteration_us"] / result["sim_iteration_us"],
            "at_floor_from_iteration": _first_settled(late, floor),
            "target_met": all(n <= floor for n in late[CONVERGED_BY - 1:])
            and result["sim_late_floor"] <= floor and result["corrupt_bytes"] == 0,
            "seconds": round(time.perf_counter() - began, 1)}


def _first_settled(late: list[int], floor: int) -> int | None:
    """The first iteration (1-based) from which every iteration is at the floor."""
    for start in range(len(late)):
        if all(n <= floor for n in late[start:]):
            return start + 1
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fractions", default=",".join(str(f) for f in FRACTIONS))
    parser.add_argument("--link", choices=LINKS, default="gen5")
    parser.add_argument("--only", default="",
                        help="comma-separated: only traces whose name contains one of these")
    parser.add_argument("--min-wall-ms", type=float, default=MIN_IDEAL_WALL_US / 1000,
                        help="stretch op times so an ideal iteration takes at least this "
                             "much wall time (default %(default)g ms)")
    parser.add_argument("--out", type=Path,
                        default=ROOT / "bench" / "results" / "replay_inference.json")
    args = parser.parse_args(argv)
    fractions = [float(f) for f in args.fractions.split(",") if f]
    traces = bench_traces(("infer",), only=[w for w in args.only.split(",") if w])
    began = time.perf_counter()
    info = run_info(quick=False)
    rows = []
    for bench_trace in traces:
        trace = bench_trace.load()
        for fraction in fractions:
            row = replay_cell(trace, fraction, args.link, args.min_wall_ms * 1000)
            rows.append(row)
            if row["status"] != "replayed":
                print(f"{row['trace']:24s} {round(fraction * 100):3d}%  no plan: "
                      f"{row['reason']}", flush=True)
                continue
            print(f"{row['trace']:24s} {round(fraction * 100):3d}%  late prefetches "
                  f"{row['late_prefetches']} (floor {row['sim_late_floor_planned']}, "
                  f"after feedback {row['sim_late_floor']}) "
                  f"{'✓' if row['target_met'] else '✗'}  replay/sim "
                  f"{row['replay_over_sim']:.3f}  corrupt {row['corrupt_bytes']}  "
                  f"x{row['time_scale']:.0f}  {row['seconds']:.1f} s", flush=True)
    replayed = [r for r in rows if r["status"] == "replayed"]
    misses = [f"{r['trace']} {round(r['fraction'] * 100)}%" for r in replayed
              if not r["target_met"]]
    print(f"\n{len(replayed)} of {len(rows)} cells replayed; late prefetches at the "
          f"simulator's floor from iteration {CONVERGED_BY} in "
          f"{len(replayed) - len(misses)}/{len(replayed)}"
          + (f"; misses: {', '.join(misses)}" if misses else ""))
    info["seconds"] = round(time.perf_counter() - began, 1)
    args.out.write_text(json.dumps({"rows": rows, "misses": misses, "iterations": ITERATIONS,
                                    "converged_by": CONVERGED_BY, "size_scale": SIZE_SCALE,
                                    "min_wall_ms": args.min_wall_ms,
                                    "run": info}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
