"""Benchmark of the time-shared device : bytes moved and latency per switch,
persistent/temporary layout versus the naive scheme, with real processes and real copies.

Jobs are built from the bundled inference traces: persistent bytes are the trace's
persistent buffers, temporary bytes the arena of a validated static plan (solver ``auto``)
of the rest (:func:`cupool.sharing.needs_from_trace`). Both are divided by ``--scale``
(default 16) so that 4 jobs fit a small shared-memory arena and the run takes well under a
minute; the byte counts below are the scaled ones (multiply by the scale for the real model).

For 2, 3 and 4 jobs, each a separate process running ``--iterations`` checked iterations
(one per slice, round robin; :mod:`cupool.sharing.workload` checks every persistent byte
each iteration and that the temporary region is zero at every slice start), the broker
(its own process) runs three ways:

- ``fit``: resident policy, the arena holds every persistent slot side by side;
- ``evict``: resident policy, the persistent area holds only ``--evict-fraction`` (60%) of
  the slots' bytes, so overlapping slots are evicted to host memory and restored;
- ``naive``: every switch copies the outgoing job's whole footprint (persistent and
  temporary) out and the incoming one's in.

Columns: switches; persistent / all bytes copied per switch (device<->host); temporary
bytes zeroed per switch (a memset, no transfer); broker switch time (end of one slice to
the grant of the next, measured in the broker) and client-visible handoff (one job's last
byte touched to the next job's grant, ``CLOCK_MONOTONIC`` across processes), medians.

    python bench/sharing.py             # 2, 3, 4 jobs; writes bench/results/sharing.json
    python bench/sharing.py --quick     # 2 jobs only
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from cupool.io import load_trace
from cupool.sharing import BrokerConfig, Geometry, broker_request, needs_from_trace, spawn_broker
from cupool.sharing.layout import align_up
from cupool.sharing.workload import JobSpec, run_jobs

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "cupool" / "data" / "traces"
RESULTS = ROOT / "bench" / "results" / "sharing.json"
JOB_TRACES = ("resnet50_infer_b8", "mobilenetv2_infer_b8", "mobilenetv2_infer_b1",
              "resnet50_infer_b8")
ALIGNMENT = 512
GAP_BYTES = 4096


def job_needs(count: int, scale: int):
    needs = []
    for index, name in enumerate(JOB_TRACES[:count]):
        measured = needs_from_trace(load_trace(TRACES / f"{name}.trace.json.gz"),
                                    job=f"{name}#{index}")
        needs.append(measured.scaled(scale))
    return needs


def config_for(scenario: str, needs, runtime_dir: str, evict_fraction: float) -> BrokerConfig:
    geometry = Geometry.for_jobs(needs, gap_bytes=GAP_BYTES, alignment=ALIGNMENT)
    capacity = geometry.capacity_bytes
    policy = "resident"
    if scenario == "evict":
        slots = geometry.temporary_offset
        largest = max(align_up(n.persistent_bytes, ALIGNMENT) for n in needs)
        area = max(largest, align_up(int(slots * evict_fraction), ALIGNMENT))
        capacity = area + GAP_BYTES + geometry.temporary_region_bytes
    elif scenario == "naive":
        policy = "naive"
        largest = max(align_up(n.persistent_bytes, ALIGNMENT) for n in needs)
        capacity = largest + GAP_BYTES + geometry.temporary_region_bytes
    return BrokerConfig(capacity, geometry.temporary_bytes, gap_bytes=GAP_BYTES,
                        alignment=ALIGNMENT, policy=policy, runtime_dir=runtime_dir)


def handoffs(reports) -> list[float]:
    """Seconds from one job's last touch of its slice to the next job's grant."""
    slices = sorted((s["granted"], s["ended"], r["job"]) for r in reports for s in r["slices"]
                    if s["ended"] is not None)
    return [later[0] - earlier[1] for earlier, later in itertools.pairwise(slices)
            if later[2] != earlier[2] and later[0] >= earlier[1]]


def run_scenario(scenario: str, needs, iterations: int, evict_fraction: float) -> dict:
    runtime_dir = tempfile.mkdtemp(prefix="cpsb", dir="/tmp")
    config = config_for(scenario, needs, runtime_dir, evict_fraction)
    specs = [JobSpec(n.job, n.persistent_bytes, n.temporary_bytes, iterations, seed=i + 1,
                     runtime_dir=runtime_dir, wait_for_jobs=len(needs))
             for i, n in enumerate(needs)]
    started = time.perf_counter()
    try:
        with spawn_broker(config):
            reports = run_jobs(specs, timeout_s=120)
            answer = broker_request("stats", runtime_dir=runtime_dir)
    finally:
        shutil.rmtree(runtime_dir, ignore_errors=True)
    seconds = time.perf_counter() - started
    failed = [r for r in reports if "exitcode" in r or r.get("error")]
    if failed:
        raise SystemExit(f"{scenario}: jobs failed: {failed}")
    stats = answer["stats"]
    switch_seconds = [e["seconds"] for e in answer["events"] if e["event"] == "switch"]
    switches = stats["switches"]
    persistent = stats["bytes.persistent_out"] + stats["bytes.persistent_in"]
    temporary = stats["bytes.temporary_out"] + stats["bytes.temporary_in"]
    client = handoffs(reports)
    return {
        "scenario": scenario, "jobs": len(needs), "capacity_bytes": config.capacity_bytes,
        "persistent_area_bytes": config.geometry.persistent_area_bytes,
        "temporary_region_bytes": config.geometry.temporary_region_bytes,
        "switches": switches, "evictions": stats["evictions"],
        "persistent_bytes_per_switch": persistent / max(switches, 1),
        "bytes_moved_per_switch": (persistent + temporary) / max(switches, 1),
        "temporary_bytes_zeroed_per_switch": stats["bytes.temporary_zeroed"] / max(switches, 1),
        "broker_switch_us_median": 1e6 * statistics.median(switch_seconds or [0.0]),
        "broker_switch_us_max": 1e6 * stats["switch_seconds.max"],
        "client_handoff_us_median": 1e6 * statistics.median(client or [0.0]),
        "persistent_corrupt_bytes": sum(r["persistent_corrupt_bytes"] for r in reports),
        "temporary_dirty_bytes": sum(r["temporary_dirty_bytes"] for r in reports),
        "bytes_checked": sum(r["bytes_checked"] for r in reports),
        "wall_seconds": round(seconds, 2),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 jobs only")
    parser.add_argument("--scale", type=int, default=16, help="divide trace sizes by this")
    parser.add_argument("--iterations", type=int, default=10, help="iterations per job")
    parser.add_argument("--evict-fraction", type=float, default=0.6,
                        help="persistent area as a fraction of all slots, for 'evict'")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    counts = (2,) if args.quick else (2, 3, 4)
    started = time.perf_counter()
    rows, jobs = [], {}
    for count in counts:
        needs = job_needs(count, args.scale)
        jobs.update({n.job: {"persistent_bytes": n.persistent_bytes,
                             "temporary_bytes": n.temporary_bytes} for n in needs})
        for scenario in ("fit", "evict", "naive"):
            rows.append(run_scenario(scenario, needs, args.iterations, args.evict_fraction))
    by_key = {(r["jobs"], r["scenario"]): r for r in rows}
    for row in rows:
        naive = by_key[(row["jobs"], "naive")]
        row["bytes_vs_naive"] = row["bytes_moved_per_switch"] / naive["bytes_moved_per_switch"]
        row["switch_time_vs_naive"] = (row["broker_switch_us_median"]
                                       / naive["broker_switch_us_median"])
    fit_rows = [r for r in rows if r["scenario"] == "fit"]
    targets = {
        "persistent_bytes_per_switch_when_fitting_is_zero":
            all(r["persistent_bytes_per_switch"] == 0 for r in fit_rows),
        "no_corrupt_or_dirty_bytes": all(r["persistent_corrupt_bytes"] == 0
                                         and r["temporary_dirty_bytes"] == 0 for r in rows),
    }
    print(f"jobs from {', '.join(JOB_TRACES[:max(counts)])}; sizes / {args.scale}; "
          f"{args.iterations} iterations per job, 1 per slice\n")
    print("| jobs | scenario | switches | evictions | persistent B/switch | moved B/switch | "
          "zeroed B/switch | broker switch us (med/max) | client handoff us | vs naive B | "
          "vs naive time |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['jobs']} | {r['scenario']} | {r['switches']} | {r['evictions']} | "
              f"{r['persistent_bytes_per_switch']:,.0f} | {r['bytes_moved_per_switch']:,.0f} | "
              f"{r['temporary_bytes_zeroed_per_switch']:,.0f} | "
              f"{r['broker_switch_us_median']:.0f} / {r['broker_switch_us_max']:.0f} | "
              f"{r['client_handoff_us_median']:.0f} | {r['bytes_vs_naive']:.3f} | "
              f"{r['switch_time_vs_naive']:.2f} |")
    print(f"\ntargets: {targets}")
    result = {"benchmark": "sharing", "scale": args.scale, "iterations": args.iterations,
              "evict_fraction": args.evict_fraction, "alignment": ALIGNMENT,
              "gap_bytes": GAP_BYTES, "jobs": jobs, "rows": rows, "targets": targets,
              "seconds": round(time.perf_counter() - started, 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out} in {result['seconds']} s")
    return 0 if all(targets.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
