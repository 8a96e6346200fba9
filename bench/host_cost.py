"""Host cost of a planned step: what cupool costs the host per op, and a planned step's
time against the same program without cupool.

Four tables, all on the emulated device (BLAS on one thread), medians over the steps
after the first planned one:

1. **Resident ops** (budget 100%: no swap): a program of ``OPS`` ops whose callable does
   nothing, each touching 1, 3 or 6 tensors (its output, and 2 or 5 persistent inputs).
   Per op, µs of host work: ``declare`` (the ``it.op`` calls), ``match`` (from the end of
   the ``with`` block to the engine's first op: the per-op comparison with the recorded
   program), ``enqueue`` (the engine's ``begin_iteration`` to its ``end_iteration``: the
   op boundaries and the op's call handed to the stream, not the call itself), their sum
   ``host``, and ``eager`` (the same op declared and run by ``cupool.EagerSession``).
2. **Ops with copies**: the swap engine on a hand plan of ``SWAP_OPS`` ops (buffer A
   swapped out after op 0, triggered back at op ``SWAP_OPS - 3``, due at the last op):
   µs of host work (``before_op`` + body + ``after_op``, the body launching a no-op) of
   the op followed by a swap-out, the op triggering the swap-in, the op waiting for it,
   and a resident op.
3. **Device calls per op** in a steady planned step that does not time its ops, counted
   by the device protocol's statistics: host callbacks (Python on a stream's timeline),
   launches (the emulated device's kernels: op work), event records, stream waits,
   copies.
4. **Programs**: ``examples/mlp_sgd.py``, ``examples/gpt_decoder.py`` and the recurrent
   program ``bench/rnn_program.py`` (about 300 small ops) at 100/90/70/50% of their peak:
   step wall time with cupool against ``cupool.EagerSession`` (run right before), the
   host's share per op, late prefetches, parameters bitwise equal; and the planned step
   (``StepReport.wall_us``: from the ``with`` block's end) against the simulator's
   prediction with the host's measured enqueue (``Session.predict_step``), given the
   recorded op times (``sim err``) or those the planned steps observed (``obs err``).

Besides the medians, ``best`` columns give the fastest step's figures (cupool's fastest
step against the program's fastest without cupool): on a shared machine whose load comes
and goes, what a quiet one gives. Prints the tables and writes
``bench/results/host_cost.json``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import importlib.util
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import cupool
from cupool.core.vocabulary import PERSISTENT, Buffer, Residency, SwapIn, SwapOut
from cupool.devices import open_device
from cupool.swap.engine import EngineSettings, SwapEngine

ROOT = Path(__file__).resolve().parent.parent
OPS = 200
SWAP_OPS = 40
CALL_KEYS = ("host_callbacks.count", "launches.count", "event_records.count",
             "stream_waits.count", "copy_count.h2d", "copy_count.d2h")


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def _noop(*arrays) -> None:
    """An op that does nothing."""


class _Clock:
    """Timestamps of the engine's ``begin_iteration`` and ``end_iteration`` calls, taken
    by wrapping them on one engine instance."""

    def __init__(self, engine) -> None:
        self.begin = self.end = 0.0
        begin, end = engine.begin_iteration, engine.end_iteration

        def timed_begin(iteration):
            self.begin = time.perf_counter()
            return begin(iteration)

        def timed_end():
            self.end = time.perf_counter()
            return end()

        engine.begin_iteration, engine.end_iteration = timed_begin, timed_end


def _calls(before: dict, after: dict, ops: int) -> dict:
    return {key.split(".")[0] if key.endswith(".count") else key:
            (after[key] - before[key]) / ops for key in CALL_KEYS}


def resident_ops(tensors: int, steps: int) -> dict:
    """Table 1 and 3 for a program of OPS no-op ops of ``tensors`` tensors each."""
    spec = ((4,), "float32")
    inputs = tensors - 1

    def declare(it, ws):
        for _ in range(OPS):
            it.op(_noop, *ws[:inputs], out=spec, name="noop")

    eager = cupool.EagerSession()
    ews = [eager.register(f"w{k}", np.ones(4, np.float32)) for k in range(max(inputs, 1))]
    eager_s = []
    for _ in range(steps):
        began = time.perf_counter()
        with eager.iteration() as it:
            declare(it, ews)
        eager_s.append(time.perf_counter() - began)
    rows = {"declare": [], "match": [], "enqueue": [], "host": []}
    calls = None
    with cupool.Session(budget="100%", device="emulated") as session:
        ws = [session.register(f"w{k}", np.ones(4, np.float32)) for k in range(max(inputs, 1))]
        for _ in range(2):  # the recording and the first planned step
            with session.iteration() as it:
                declare(it, ws)
        clock = _Clock(session._runner.engine)
        for _ in range(steps):
            before = session.device.stats()
            began = time.perf_counter()
            it = session.iteration()
            it.__enter__()
            declare(it, ws)
            declared = time.perf_counter()
            it.__exit__(None, None, None)
            after = session.device.stats()
            rows["declare"].append(declared - began)
            rows["match"].append(clock.begin - declared)
            rows["enqueue"].append(clock.end - clock.begin)
            rows["host"].append(clock.end - began)
            if after["event_records.count"] - before["event_records.count"] == 0:
                calls = _calls(before, after, OPS)  # a step that did not time its ops
    per_op = {k: statistics.median(v) / OPS * 1e6 for k, v in rows.items()}
    return {"tensors": tensors, "ops": OPS,
            **{f"{k}_us": round(v, 3) for k, v in per_op.items()},
            "host_best_us": round(min(rows["host"]) / OPS * 1e6, 3),
            "eager_best_us": round(min(eager_s) / OPS * 1e6, 3),
            "eager_us": round(statistics.median(eager_s) / OPS * 1e6, 3), "calls_per_op": calls}


def ops_with_copies(iterations: int) -> dict:
    """Table 2 and 3 on the hand plan of the module docstring."""
    from cupool.check import validate_swap_plan
    from cupool.core.vocabulary import Op, Plan, SolveStatus, Trace

    n = SWAP_OPS
    trace = Trace("copies", tuple(Op(f"op{i}", 10.0) for i in range(n)),
                  (Buffer(0, 4096, 0, n, tuple(range(n)), PERSISTENT),
                   Buffer(1, 8192, 0, n, (0, n - 1))))
    arena = 4096 + 8192
    plan = Plan(trace.name, trace.digest(), "hand", SolveStatus.FEASIBLE, arena,
                trace.lower_bound_bytes(), (), 0.0, arena, {},
                (Residency(0, 0, n, 0), Residency(1, 0, 1, 4096), Residency(1, n - 3, n, 4096)),
                (SwapOut(1, 0), SwapIn(1, n - 3, n - 1)))
    report = validate_swap_plan(trace, plan)
    if not report.valid:
        raise SystemExit(f"the hand plan is invalid: {report.message}")
    cells = {"swap_out_after": 0, "triggers_swap_in": n - 3, "waits_for_swap_in": n - 1,
             "resident": n // 2}
    times = {name: [] for name in cells}
    calls = None
    with open_device("emulated", capacity="1MiB") as device, \
            SwapEngine(trace, plan, device, EngineSettings(time_ops_every=4)) as engine:
        def body(engine, frame) -> None:
            engine.work.run(_noop)

        for iteration in range(iterations):
            before = device.stats()
            engine.begin_iteration(iteration)
            spent = []
            for i in range(n):
                began = time.perf_counter()
                frame = engine.before_op(i)
                body(engine, frame)
                engine.after_op(i)
                spent.append(time.perf_counter() - began)
            result = engine.end_iteration()
            after = device.stats()
            if iteration < 2:
                continue
            for name, op in cells.items():
                times[name].append(spent[op])
            if not result.op_us:
                calls = _calls(before, after, n)
    return {"ops": n, **{f"{k}_us": round(statistics.median(v) * 1e6, 3)
                         for k, v in times.items()}, "calls_per_op": calls}


def program(name: str, module, budget: str, steps: int) -> dict:
    """Table 4: one program at one budget."""
    batches = module.batches(steps)
    eager = cupool.EagerSession()
    params = module.register(eager)
    eager_s = []
    for batch in batches:
        began = time.perf_counter()
        with eager.iteration() as it:
            module.train_step(it, params, *batch)
        eager_s.append(time.perf_counter() - began)
    reference = {k: eager.read(t) for k, t in params.items()}
    step_s, host_s, engine_us, late, calls, walls = [], [], [], [], None, []
    with cupool.Session(budget=budget, device="emulated") as session:
        state = module.register(session)
        clock = None
        for k, batch in enumerate(batches):
            before = session.device.stats()
            began = time.perf_counter()
            with session.iteration() as it:
                module.train_step(it, state, *batch)
            ended = time.perf_counter()
            after = session.device.stats()
            report = session.reports[-1]
            if clock is None and session._runner is not None:
                clock = _Clock(session._runner.engine)
                continue
            if k < 2 or report.mode != "planned":
                continue
            step_s.append(ended - began)
            walls.append(report.wall_us)
            host_s.append(clock.end - began)
            engine_us.append(report.iteration_us)
            late.append(report.late_prefetches)
            if after["event_records.count"] - before["event_records.count"] < \
                    len(session.recorded_program.ops):
                calls = _calls(before, after, len(session.recorded_program.ops))
        ops = len(session.recorded_program.ops)
        mode = session.reports[-1].mode
        predicted = session.predict_step()
        observed = session.predict_step(session.measured_trace())
        identical = all(np.array_equal(session.read(state[k]), v) for k, v in reference.items())
    if not step_s:
        return {"program": name, "budget": budget, "mode": mode, "ops": ops}
    eager_ms = statistics.median(eager_s[2:]) * 1e3
    cupool_ms = statistics.median(step_s) * 1e3
    return {"program": name, "budget": budget, "mode": mode, "ops": ops,
            "eager_ms": round(eager_ms, 3), "cupool_ms": round(cupool_ms, 3),
            "ratio": round(cupool_ms / eager_ms, 3),
            "ratio_best": round(min(step_s) / min(eager_s[2:]), 3),
            "engine_ms": round(statistics.median(engine_us) / 1e3, 3),
            "host_us_per_op": round(statistics.median(host_s) / ops * 1e6, 2),
            "late_prefetches": late, "calls_per_op": calls, "params_identical": identical,
            "step_wall_ms": round(statistics.median(walls) / 1e3, 3),
            "sim_ms": round(predicted.iteration_us / 1e3, 3),
            "sim_error": round(statistics.median(walls) / predicted.iteration_us - 1, 3),
            "sim_observed_error": round(statistics.median(walls) / observed.iteration_us - 1,
                                        3)}


_SHORT = {"host_callbacks": "callbacks", "launches": "launches", "event_records": "records",
          "stream_waits": "waits", "copy_count.h2d": "h2d", "copy_count.d2h": "d2h"}


def _fmt_calls(calls) -> str:
    if calls is None:
        return "-"
    return " ".join(f"{_SHORT[k]}={v:.2f}" for k, v in calls.items())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "host_cost.json"))
    args = parser.parse_args(argv)
    resident = [resident_ops(t, args.steps) for t in (1, 3, 6)]
    print("resident ops, µs per op (median; best: the fastest step's host and eager µs per "
          "op):")
    print(f"{'tensors':>8} {'declare':>8} {'match':>6} {'enqueue':>8} {'host':>6} {'eager':>6} "
          f"{'best':>11}  calls per op")
    for row in resident:
        best = f"{row['host_best_us']:.2f}/{row['eager_best_us']:.2f}"
        print(f"{row['tensors']:>8} {row['declare_us']:>8.2f} {row['match_us']:>6.2f} "
              f"{row['enqueue_us']:>8.2f} {row['host_us']:>6.2f} {row['eager_us']:>6.2f} "
              f"{best:>11}  {_fmt_calls(row['calls_per_op'])}")
    copies = ops_with_copies(max(args.steps, 8))
    print("\nops with copies, µs of host work (median):")
    for name in ("swap_out_after", "triggers_swap_in", "waits_for_swap_in", "resident"):
        print(f"  {name:<18} {copies[name + '_us']:8.2f}")
    print(f"  calls per op over the {copies['ops']} ops: {_fmt_calls(copies['calls_per_op'])}")
    modules = {"mlp_sgd": _module(ROOT / "examples" / "mlp_sgd.py"),
               "gpt_decoder": _module(ROOT / "examples" / "gpt_decoder.py"),
               "rnn": _module(ROOT / "bench" / "rnn_program.py")}
    programs = [program(name, module, budget, args.steps)
                for name, module in modules.items() for budget in ("100%", "90%", "70%", "50%")]
    print("\nprograms (median step from the third on; best: the ratio of the fastest steps, "
          "what a quiet machine gives):")
    print(f"{'program':<12} {'budget':>6} {'ops':>4} {'eager ms':>9} {'cupool ms':>10} "
          f"{'ratio':>6} {'best':>5} {'engine ms':>10} {'host µs/op':>10} {'sim err':>8} "
          f"{'obs err':>8} {'late':>12} {'bitwise':>7}  calls per op")
    for row in programs:
        if "ratio" not in row:
            print(f"{row['program']:<12} {row['budget']:>6} {row['ops']:>4}  no planned step "
                  f"({row['mode']})")
            continue
        print(f"{row['program']:<12} {row['budget']:>6} {row['ops']:>4} {row['eager_ms']:>9.2f} "
              f"{row['cupool_ms']:>10.2f} {row['ratio']:>6.2f} {row['ratio_best']:>5.2f} "
              f"{row['engine_ms']:>10.2f} "
              f"{row['host_us_per_op']:>10.2f} {row['sim_error']:>+8.1%} "
              f"{row['sim_observed_error']:>+8.1%} {row['late_prefetches']!s:>12} "
              f"{row['params_identical']!s:>7}  {_fmt_calls(row['calls_per_op'])}")
    result = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                          "load": os.getloadavg()[0]},
              "date": time.strftime("%Y-%m-%d"), "device": "emulated",
              "resident": resident, "copies": copies, "programs": programs}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nwritten {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
