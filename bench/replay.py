"""Replay benchmark: the swap engine against the simulator.

Prints replay vs simulator iteration time (target: within 15%), late prefetches per
iteration, the convergence of a deliberately mis-timed plan (every swap-in triggered at its
due op; target: late prefetches down to the simulator's floor within 3 iterations; run for
several seeds, each for 6 iterations, so a relapse after convergence shows too), and the
median CPU cost of ``h.use()`` on a resident tensor (target: <= 5 µs; measured for a NumPy
view and for a ``cupy.ndarray`` over emulated memory, what a GPU's handles yield), the time
the NumPy pattern twin takes to fill and to verify 64 MiB (the byte checks of every replay;
target: under 1 s each), and that the planned pool served every residency at its planned
offset;
writes ``bench/results/replay.json``. Sizes are divided by ``SIZE_SCALE`` and op durations
multiplied by ``TIME_SCALE``, with the link paced to match (see ``cupool.app.replay``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from cupool.app.replay import ReplaySettings, replay
from cupool.core.vocabulary import Buffer
from cupool.devices import open_device
from cupool.io import load_trace
from cupool.planning.budget.feedback import delay_swap_ins
from cupool.swap.handles import DEVICE, TensorHandle

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "cupool" / "data" / "traces" / "resnet50_train_b32_fp32.trace.json.gz"
SIZE_SCALE = 4096
TIME_SCALE = 40.0
ITERATIONS = 4
CONVERGENCE_SEEDS = (0, 1, 2, 3, 4)
CONVERGENCE_ITERATIONS = 6
PATTERN_BYTES = 64 << 20
PATTERN_TARGET_S = 1.0


def use_median_us(samples: int = 20000, cupy_arrays: bool = False) -> float:
    """Median wall time of ``with h.use():`` on a resident handle whose array the device
    made (``cupy_arrays``: a ``cupy.ndarray`` over the emulated bytes)."""
    with open_device("emulated", capacity="1MiB", cupy_arrays=cupy_arrays) as device:
        memory = device.reserve(4096)
        handle = TensorHandle(Buffer(0, 4096, 0, 1, uses=(0,)), dtype="float32")
        handle.move(DEVICE, handle.array_at(device, memory.ptr, 4096), memory.ptr)
        return _median_use(handle, samples)


def _median_use(handle, samples: int) -> float:
    times = []
    for _ in range(samples):
        began = time.perf_counter()
        with handle.use():
            pass
        times.append(time.perf_counter() - began)
    return float(np.median(times) * 1e6)


def pattern_seconds(repeats: int = 5) -> dict[str, float]:
    """Median wall seconds of the NumPy twin filling ``PATTERN_BYTES`` with the pattern and
    counting its mismatches (``fill_s``, ``verify_s``), and the rates they make
    (``fill_gbps``, ``verify_gbps``, 1e9 bytes per second)."""
    from cupool.kernels import reference

    view = np.empty(PATTERN_BYTES, dtype=np.uint8)
    fills, verifies = [], []
    for _ in range(repeats):
        began = time.perf_counter()
        reference.fill(view, 7, 8, 9)
        fills.append(time.perf_counter() - began)
        began = time.perf_counter()
        mismatches = reference.count_mismatches(view, 7, 8, 9)
        verifies.append(time.perf_counter() - began)
        assert mismatches == 0, mismatches
    fill_s, verify_s = float(np.median(fills)), float(np.median(verifies))
    return {"bytes": PATTERN_BYTES, "fill_s": fill_s, "verify_s": verify_s,
            "fill_gbps": PATTERN_BYTES / fill_s / 1e9,
            "verify_gbps": PATTERN_BYTES / verify_s / 1e9}


def convergence(trace) -> dict:
    """Replay a mis-timed capuchin plan (a policy that swaps) with feedback, once per seed
    in ``CONVERGENCE_SEEDS`` (the emulated copies' timing varies run to run with the
    machine's load, so one run says little), for ``CONVERGENCE_ITERATIONS`` each."""
    from cupool.planning.budget import plan_with_budget

    budgeted = plan_with_budget(trace, int(trace.lower_bound_bytes() * 0.7), "capuchin")
    keys = ("late_prefetches", "stall_us", "feedback_moves", "sim_late_floor", "iteration_us",
            "corrupt_bytes", "off_plan")
    runs = []
    for seed in CONVERGENCE_SEEDS:
        settings = ReplaySettings(iterations=CONVERGENCE_ITERATIONS, size_scale=SIZE_SCALE,
                                  time_scale=TIME_SCALE, seed=seed)
        result = replay(trace, "70%", settings, plan=delay_swap_ins(budgeted.plan),
                        plan_trace=budgeted.trace)
        runs.append({"seed": seed, **{k: result[k] for k in keys}})
    return {"policy": "capuchin", "sim_iteration_us": result["sim_iteration_us"],
            "corrupt_bytes": sum(r["corrupt_bytes"] for r in runs), "runs": runs}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=ITERATIONS)
    parser.add_argument("--time-scale", type=float, default=TIME_SCALE,
                        help="op durations multiplied by this (>= 1); 1 shows host overhead")
    parser.add_argument("--replay-only", action="store_true",
                        help="only the replay against the simulator (no convergence, "
                             "h.use() or pattern measurements); prints, writes nothing")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "replay.json")
    args = parser.parse_args(argv)
    trace = load_trace(TRACE)
    result = replay(trace, "70%", ReplaySettings(iterations=args.iterations,
                                                 size_scale=SIZE_SCALE,
                                                 time_scale=args.time_scale))
    ratio = result["mean_iteration_us"] / result["sim_iteration_us"]
    if args.replay_only:
        print(f"{trace.name} at 70%, time scale {args.time_scale:g}: replay "
              f"{result['mean_iteration_us']:.0f} us/iter vs simulator "
              f"{result['sim_iteration_us']:.0f} us (ratio {ratio:.3f}); per iteration "
              f"{[round(t) for t in result['iteration_us']]} us, late prefetches "
              f"{result['late_prefetches']}, corrupt bytes {result['corrupt_bytes']}")
        return {"trace": trace.name, "budget": "70%", **result, "replay_over_sim": ratio}
    out = {"trace": trace.name, "budget": "70%", **result,
           "replay_over_sim": ratio, "use_median_us": use_median_us(),
           "use_median_us_cupy": use_median_us(cupy_arrays=True),
           "pattern": pattern_seconds(),
           "mistimed": convergence(trace)}
    print(f"{trace.name} at 70%: replay {result['mean_iteration_us']:.0f} us/iter vs "
          f"simulator {result['sim_iteration_us']:.0f} us (ratio {ratio:.3f}; target <= 1.15)")
    print(f"  per iteration: {[round(t) for t in result['iteration_us']]} us, "
          f"late prefetches {result['late_prefetches']}, corrupt bytes "
          f"{result['corrupt_bytes']} of {result['bytes_checked']} checked")
    print("  mis-timed capuchin plan (every swap-in triggered at its due op), per seed:")
    for run in out["mistimed"]["runs"]:
        print(f"    seed {run['seed']}: late prefetches {run['late_prefetches']} (simulator "
              f"floor {run['sim_late_floor']}), stall {[round(t) for t in run['stall_us']]} "
              f"us, moves {run['feedback_moves']}, corrupt bytes {run['corrupt_bytes']}")
    pool = result["pool"]
    print(f"  planned pool: {pool['planned_hits']} of {pool['mallocs']} residencies at their "
          f"planned offset, off-plan per iteration {result['off_plan']}, arena reserved "
          f"{result['arena_reserved_bytes']} B (scaled)")
    print(f"  h.use() median on a resident tensor: {out['use_median_us']:.2f} us (NumPy "
          f"view), {out['use_median_us_cupy']:.2f} us (cupy.ndarray) (target <= 5)")
    pattern = out["pattern"]
    print(f"  pattern twin on 64 MiB: fill {pattern['fill_s'] * 1e3:.0f} ms "
          f"({pattern['fill_gbps']:.2f} GB/s), verify {pattern['verify_s'] * 1e3:.0f} ms "
          f"({pattern['verify_gbps']:.2f} GB/s) (target < {PATTERN_TARGET_S:g} s each)")
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
