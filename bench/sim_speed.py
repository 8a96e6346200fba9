"""How long one ``simulate`` takes: the flat replay against the event replay it stands in for.

The budget planner ``auto`` replays hundreds of candidate plans per plan, so the replay's
speed is part of planning time. For each trace this plans ``auto`` at a fraction of the
lower bound (PCIe Gen5), checks that both replays give identical reports, then times
``--runs`` replays of each, alternating, so that load from other jobs on a shared machine
falls on both alike (wall clock and CPU seconds of this process).

    python bench/sim_speed.py                       # the LSTM trace (250 steps, 4 layers)
    python bench/sim_speed.py --traces bundled      # the shared training traces
    python bench/sim_speed.py --traces all --runs 20 --fraction 0.7
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cupool.io import load_trace
from cupool.planning import make_plan
from cupool.planning.synthetic import lstm_trace
from cupool.sim import cost_model, simulate

TRACES = Path(__file__).resolve().parents[1] / "cupool" / "data" / "traces"


def traces(which: str):
    """(name, trace) pairs: the LSTM trace unless ``which == "bundled"``, the shared
    training traces unless ``which == "lstm"``."""
    out = [] if which == "bundled" else [("lstm_lm_250x4", lstm_trace(250, 4, seed=0))]
    if which != "lstm":
        out += [(p.name.split(".")[0], load_trace(p))
                for p in sorted(TRACES.glob("*train*.trace.json.gz"))]
    return out


def timed(replay, runs: int) -> tuple[list, list]:
    """Wall and CPU seconds of each of ``runs`` calls of ``replay(reference)``, the two
    replays alternating; returns ``(flat, event)`` lists of ``(wall, cpu)``."""
    flat, event = [], []
    for _ in range(runs):
        for reference, out in ((False, flat), (True, event)):
            wall, cpu = time.perf_counter(), time.process_time()
            replay(reference)
            out.append((time.perf_counter() - wall, time.process_time() - cpu))
    return flat, event


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", choices=("lstm", "bundled", "all"), default="lstm")
    parser.add_argument("--fraction", type=float, default=0.7)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args(argv)
    cost = cost_model("gen5")
    for name, trace in traces(args.traces):
        planned = make_plan(trace, int(trace.lower_bound_bytes() * args.fraction),
                            policy="auto")
        plan, planned_trace = planned.plan, planned.trace

        def replay(reference, plan=plan, planned_trace=planned_trace):
            return simulate(planned_trace, plan, cost, validate=False, reference=reference)

        flat_report, event_report = replay(False), replay(True)
        same = repr(flat_report) == repr(event_report)
        flat, event = timed(replay, args.runs)
        flat_wall, flat_cpu = (sum(x) for x in zip(*flat, strict=True))
        event_wall, event_cpu = (sum(x) for x in zip(*event, strict=True))
        print(f"{name} at {args.fraction:.0%}: {len(plan.actions)} actions, "
              f"{len(flat_report.copies)} copies, identical reports: {same}")
        print(f"  {args.runs} replays  event core {event_wall:.2f} s wall "
              f"({event_cpu:.2f} s CPU)   flat {flat_wall:.2f} s wall ({flat_cpu:.2f} s CPU)"
              f"   speed-up {event_wall / flat_wall:.1f}x wall, "
              f"{event_cpu / flat_cpu:.1f}x CPU")
        if not same:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
