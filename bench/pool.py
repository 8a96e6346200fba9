"""Benchmark: PlannedPool replaying the real traces through ``cupy.empty`` on the emulated device.

Usage::

    python bench/pool.py                    # all bundled traces, writes bench/results/pool.json
    python bench/pool.py --only resnet50 --iterations 9

For each trace the allocation sequence of one iteration (the order of
``cupool.baselines.allocate_trace``: persistent buffers first, outside the iteration; then at
each op, frees of the buffers ending there, then allocations in id order) is replayed
as ``cupy.empty(size, uint8)`` arrays, freed by dropping them. Measured:

- **CPU overhead per allocation** (malloc + free, through ``cupy.empty``) of three
  allocators: ``planned`` (a PlannedPool after its recorded iteration), ``record`` (a
  PlannedPool that never stops recording: best fit + logging) and ``floor``, the simplest
  Python bump allocator returning the same kind of object,
  ``MemoryPointer(UnownedMemory(ptr, size, owner, 0), 0)``. The floor's ``owner`` is its
  one reservation, so **dropping a floor array frees nothing**: no per-block finaliser,
  no queue, no lock, no memory-hook checks, no reuse, no statistics. Everything the pool
  does per block beyond building that pointer is therefore in the ratio.
  Method: after ``--warmup`` untimed rounds, ``--iterations`` timed rounds; in each round
  the three allocators take turns replaying one iteration (so a change of machine speed
  hits all three alike), and each gets one sample: the wall time of the replay loop
  (``cupy.empty`` calls and array drops, ``time.perf_counter``, GC disabled) divided by
  the number of allocations. Reported per trace: the median sample of each allocator (µs)
  and ``planned_over_floor`` = median(planned) / median(floor), the target, <= 1.5; also,
  as cross-checks, the median over rounds of the per-round ratio planned / floor, and the
  ratio when the planned sample also includes entering and leaving ``pool.iteration()``
  (the per-iteration work, spread over its allocations). Run it on an idle machine: other
  work on the cores (or the host) slows all three allocators, the pool's longer path
  more, so the ratio rises; the load average before and after is written to the JSON.
- **Reserved bytes / lower bound**: the planned pool's peak ``reserved_bytes`` over the
  planned iterations (persistent region + planned arena + any fallback), against the
  trace's lower bound (peak live bytes, unrounded), and the same figure for the CuPy and
  PyTorch allocator models of ``cupool.baselines``. Targets: <= 1.01, and below both.

Memory safety: the emulated device reserves with ``numpy.empty``, which does not touch
pages, and nothing here writes to the arrays, so GB-sized arenas cost address space,
not RAM; the resident set size is measured and reported for every trace.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cupy  # noqa: E402
import numpy as np  # noqa: E402
import psutil  # noqa: E402
from cupy.cuda.memory import MemoryPointer, UnownedMemory  # noqa: E402

from cupool.allocator import PlannedPool  # noqa: E402
from cupool.baselines import allocate_trace  # noqa: E402
from cupool.core.vocabulary import PERSISTENT  # noqa: E402
from cupool.data import bundled_traces  # noqa: E402
from cupool.devices import open_device  # noqa: E402
from cupool.io import load_trace  # noqa: E402

UINT8 = np.uint8


def schedule(trace):
    """``(persistent sizes, events)``: events are ``(+1, id, size)`` allocations and
    ``(-1, id, 0)`` frees of the temporaries, in replay order."""
    allocations = [[] for _ in range(trace.num_ops + 1)]
    frees = [[] for _ in range(trace.num_ops + 1)]
    persistent = []
    for buffer in sorted(trace.buffers, key=lambda b: (b.start, b.id)):
        if buffer.kind == PERSISTENT:
            persistent.append(buffer.size)
        else:
            allocations[buffer.start].append(buffer)
            frees[buffer.end].append(buffer)
    events = []
    for op in range(trace.num_ops + 1):
        events += [(-1, b.id, 0) for b in frees[op]]
        events += [(1, b.id, b.size) for b in allocations[op]]
    return persistent, events


def run_events(events) -> float:
    """Replay one iteration's events through the current allocator; seconds (the timed
    loop: nothing but the ``cupy.empty`` calls, the array drops and the loop itself)."""
    live = {}
    empty = cupy.empty
    started = time.perf_counter()
    for sign, buffer_id, size in events:
        if sign > 0:
            live[buffer_id] = empty(size, UINT8)
        else:
            del live[buffer_id]
    live.clear()
    return time.perf_counter() - started


def run_iteration(pool, events) -> tuple[float, float]:
    """One iteration of ``pool``: seconds of the replay loop, and seconds including
    entering and leaving ``pool.iteration()``."""
    started = time.perf_counter()
    with pool.iteration():
        inner = run_events(events)
    return inner, time.perf_counter() - started


class BumpFloor:
    """The floor: bump a pointer through one reservation, wrap around, never free. Its
    pointers' ``owner`` is the reservation itself, so dropping an array frees nothing and
    runs no Python code."""

    def __init__(self, device, largest: int) -> None:
        self.region = max(1 << 30, 2 * largest)
        self.memory = device.reserve(self.region)
        self.offset = 0

    def malloc(self, size):
        offset = self.offset
        end = offset + (size + 511) // 512 * 512
        if end > self.region:
            offset, end = 0, (size + 511) // 512 * 512
        self.offset = end
        return MemoryPointer(UnownedMemory(self.memory.ptr + offset, size, self.memory, 0), 0)


def bench_trace(path, iterations: int, device, warmup: int = 2) -> dict:
    trace = load_trace(path)
    persistent_sizes, events = schedule(trace)
    allocations = sum(1 for e in events if e[0] > 0)
    lower = trace.lower_bound_bytes()

    planned = PlannedPool(device, name=trace.name)
    recorder = PlannedPool(device, record_iterations=10**9, name=f"{trace.name}-record")
    floor = BumpFloor(device, max(b.size for b in trace.buffers))

    persistent = {}
    for pool in (planned, recorder):
        cupy.cuda.set_allocator(pool.malloc)
        persistent[pool.name] = [cupy.empty(s, UINT8) for s in persistent_sizes]
        with pool.iteration():  # planned: the recorded iteration; record: warm-up
            run_events(events)
    plan = planned.plan
    planned.reset_peak_stats()

    times = {"planned": [], "record": [], "floor": [], "planned_with_iteration": []}
    gc.collect()
    gc.disable()
    try:
        for round_ in range(warmup + iterations):
            cupy.cuda.set_allocator(planned.malloc)
            planned_inner, planned_whole = run_iteration(planned, events)
            cupy.cuda.set_allocator(recorder.malloc)
            record_inner, _ = run_iteration(recorder, events)
            cupy.cuda.set_allocator(floor.malloc)
            floor_inner = run_events(events)
            if round_ >= warmup:
                times["planned"].append(planned_inner)
                times["planned_with_iteration"].append(planned_whole)
                times["record"].append(record_inner)
                times["floor"].append(floor_inner)
    finally:
        gc.enable()
        cupy.cuda.set_allocator(None)
    stats = planned.memory_stats()
    rss = psutil.Process().memory_info().rss
    persistent.clear()
    for pool in (planned, recorder):
        pool.close()
    device.release(floor.memory)

    us = {mode: statistics.median(t / allocations * 1e6 for t in ts) for mode, ts in times.items()}
    per_round = statistics.median(p / f for p, f in zip(times["planned"], times["floor"],
                                                         strict=True))
    reserved = stats["reserved_bytes.peak"]
    baselines = {policy: allocate_trace(trace, policy) for policy in ("cupy", "torch")}
    row = {
        "trace": trace.name, "buffers": len(trace.buffers), "allocations": allocations,
        "persistent_buffers": len(persistent_sizes),
        "lower_bound_bytes": lower,
        "planned_reserved_bytes": reserved,
        "planned_ratio": reserved / lower,
        "plan_arena_bytes": plan.arena_bytes, "plan_lower_bound_bytes": plan.lower_bound_bytes,
        "plan_status": plan.status.value, "plan_solve_seconds": round(plan.solve_seconds, 3),
        "planned_hits": stats["planned_hits"],
        "fallback_allocations": stats["fallback_allocations"],
        "divergent_iterations": stats["divergent_iterations"],
        "us_per_alloc": {k: round(v, 3) for k, v in us.items()},
        "planned_over_floor": us["planned"] / us["floor"],
        "planned_over_floor_per_round": per_round,
        "planned_with_iteration_over_floor": us["planned_with_iteration"] / us["floor"],
        "record_over_floor": us["record"] / us["floor"],
        "rss_bytes": rss,
    }
    for policy, result in baselines.items():
        row[f"{policy}_reserved_bytes"] = result["peak_reserved_bytes"]
        row[f"{policy}_ratio"] = result["ratio"]
        row[f"below_{policy}_by"] = 1 - reserved / result["peak_reserved_bytes"]
    row["targets_met"] = {
        "overhead<=1.5x_floor": row["planned_over_floor"] <= 1.5,
        "ratio<=1.01": row["planned_ratio"] <= 1.01,
        "below_cupy_and_torch": row["below_cupy_by"] > 0 and row["below_torch_by"] > 0,
    }
    return row


def print_table(rows) -> None:
    header = (f"{'trace':36} {'allocs':>6} {'planned':>8} {'record':>8} {'floor':>7} "
              f"{'pl/fl':>6} {'rounds':>6} {'+iter':>6} {'ratio':>7} {'cupy':>6} {'torch':>6} "
              f"{'<cupy':>7} {'<torch':>7}")
    print(header)
    print("-" * len(header))
    for r in rows:
        us = r["us_per_alloc"]
        print(f"{r['trace']:36} {r['allocations']:>6} {us['planned']:>7.2f}u {us['record']:>7.2f}u "
              f"{us['floor']:>6.2f}u {r['planned_over_floor']:>6.2f} "
              f"{r['planned_over_floor_per_round']:>6.2f} "
              f"{r['planned_with_iteration_over_floor']:>6.2f} {r['planned_ratio']:>7.4f} "
              f"{r['cupy_ratio']:>6.3f} {r['torch_ratio']:>6.3f} {r['below_cupy_by']:>7.1%} "
              f"{r['below_torch_by']:>7.1%}")
    print("(us: median CPU microseconds per malloc+free through cupy.empty; pl/fl: planned / "
          "floor of the medians, target <= 1.5;\n rounds: median of the per-round ratios; "
          "+iter: pl/fl with iteration() enter/exit counted;\n ratio: planned peak reserved / "
          "lower bound, target <= 1.01; cupy/torch: the baseline models' ratios; <cupy, "
          "<torch: how much less the pool reserves)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="substring of the trace names to run")
    parser.add_argument("--iterations", type=int, default=31,
                        help="timed rounds (one iteration per allocator each)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "pool.json"))
    args = parser.parse_args(argv)
    rows = []
    load_before = os.getloadavg()
    with open_device("emulated", capacity="64GiB") as device:
        for path in bundled_traces():
            if args.only and args.only not in path.name:
                continue
            row = bench_trace(path, args.iterations, device, args.warmup)
            rows.append(row)
            print(f"  {row['trace']}: planned {row['us_per_alloc']['planned']:.2f} us, floor "
                  f"{row['us_per_alloc']['floor']:.2f} us, ratio {row['planned_ratio']:.4f}, "
                  f"rss {row['rss_bytes'] >> 20} MiB", flush=True)
    print_table(rows)
    document = {
        "benchmark": "pool", "iterations": args.iterations, "warmup": args.warmup,
        "machine": {"python": platform.python_version(), "cpus": psutil.cpu_count(),
                    "cupy": cupy.__version__, "device": "emulated",
                    "loadavg_before": load_before, "loadavg_after": os.getloadavg()},
        "rows": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
