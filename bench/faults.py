"""Fault matrix: device faults injected into programs run by ``cupool.Session``, and what is
left after each: the error, leaked blocks and stream work, the budget, the bytes.

Each cell runs one program for ``STEPS`` steps on a
:class:`~cupool.devices.faults.FaultyDevice` within 50% of its peak (the generated one
70%) (step 0 is the
recording, the later ones run from the plan) and injects one fault at one point of one
step:

- the programs: ``examples/mlp_sgd.py``, ``examples/gpt_decoder.py`` and a generated one
  (a chain of ``tanh(h @ w)`` layers of seeded widths, each weight updated from its
  layer's output);
- the points: the recording step's reservations, pinned allocation and stream creation
  (the engine is made there, while planning); in a planned step the first, a seeded
  middle and the last copy in each direction (the first swap-in is before the first op,
  the last one is the step's last swap-in), op launches, event records, a stream's wait
  for an event and the final synchronize, failed when made or, for copies and launches,
  when their stream runs them; and all free device memory taken by another process
  before a planned step.

After each cell it records ``outcome``:

- ``continued``: the failed step raised a typed error (:class:`cupool.errors.CupoolError`)
  naming what failed, every later step ran, and the final persistent state is bitwise the
  state of the same program without cupool (:class:`cupool.EagerSession`) whose failed
  step stopped after some op ``stopped_after`` (``None``: the step was not hit);
- ``refused``: the failed step raised a typed error and every later step was refused
  with a typed error;
- ``WRONG``: anything else (an untyped error, a later step failing differently, a state
  no run without cupool reaches);

and ``leaked_device_bytes``/``leaked_pinned_bytes`` (held after the session closed),
``busy_streams`` (streams with work left after the failed step), ``peak_over_budget``
(device bytes reserved above the budget at the worst moment, another process's excluded).

Then the other clients of the device (``bench/fault_clients.py``: ``PlannedPool``,
replay and the broker), each cell with its own outcome and checks, under
``client_cells``; ``outcomes`` counts the cells of each client by outcome.

Prints the table and writes ``bench/results/faults.json``. ``--quick`` runs the two small
programs only; ``--only NAME`` the programs and clients whose name contains it.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "faults.json"
STEPS = 4
PLAN_PARAMS = None
"""The sessions' planner parameters (``None``: the session's default). The matrix runs with
the default; a caller that checks only what each fault leaves behind may plan faster (the
tests skip the schedule search: on these programs most of each cell's time). Which plan a
session makes follows its measured op times, so a faulted run's plan may make fewer calls
than the counting run's and leave a point unhit either way."""
FAILED_STEP = 2  # a planned step (step 1 is the first planned one)
BUDGET = "50%"
SEED = 38


# -- programs -----------------------------------------------------------------------------
def _example(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}",
                                                  ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _layer(h, w, out):
    np.tanh(h @ w, out=out)


def _layer_grad(a, out):
    out[...] = np.float32(a.sum(dtype=np.float32)) * np.float32(1e-4)


def _sgd(grad, w):
    w -= np.float32(0.01) * grad


class Generated:
    """A chain of ``tanh(h @ w)`` layers with seeded widths; each weight gets a gradient
    from its layer's output and an SGD update (the same interface as the examples)."""

    budget = "70%"  # 50% is less than an update's working set (a weight and its gradient)

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.batch = 32
        self.widths = [int(w) for w in rng.integers(64, 257, int(rng.integers(4, 7)))]
        self.seed = seed

    def register(self, session) -> dict:
        rng = np.random.default_rng(self.seed + 1)
        return {f"w{i}": session.register(f"w{i}", (rng.standard_normal((a, b)) * 0.1)
                                          .astype(np.float32))
                for i, (a, b) in enumerate(zip(self.widths, self.widths[1:], strict=False))}

    def batches(self, steps: int) -> list:
        rng = np.random.default_rng(self.seed + 2)
        return [(rng.standard_normal((self.batch, self.widths[0])).astype(np.float32),)
                for _ in range(steps)]

    def train_step(self, it, params: dict, x):
        h, acts = it.input(x, name="x"), []
        for i in range(len(params)):
            h = it.op(_layer, h, params[f"w{i}"],
                      out=((self.batch, self.widths[i + 1]), "float32"), name=f"layer{i}")
            acts.append(h)
        for i in reversed(range(len(params))):
            w = params[f"w{i}"]
            grad = it.op(_layer_grad, acts[i], out=w, name=f"grad{i}")
            it.op(_sgd, grad, updates=[w], name=f"sgd{i}")
        return it.fetch(h)


class Example:
    """An example program of ``examples/`` behind the matrix's interface."""

    def __init__(self, name: str) -> None:
        self.module = _example(name)

    def register(self, session) -> dict:
        return self.module.register(session)

    def batches(self, steps: int) -> list:
        return self.module.batches(steps)

    def train_step(self, it, params, *batch):
        return self.module.train_step(it, params, *batch)


def programs(quick: bool) -> dict:
    chosen = {"mlp_sgd": Example("mlp_sgd"), "generated": Generated(SEED)}
    if not quick:
        chosen["gpt_decoder"] = Example("gpt_decoder")
    return chosen


# -- the run without cupool, stopped after each op of the failed step ----------------------
class _Stopped:
    """An eager iteration whose ops after the first ``keep`` do nothing."""

    def __init__(self, it, keep: int) -> None:
        self.it, self.keep, self.ops = it, keep, 0

    def op(self, fn, *args, **kwargs):
        self.ops += 1
        return self.it.op(fn if self.ops <= self.keep else _nothing, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.it, name)


def _nothing(*arrays) -> None:
    pass


def _digest(values: dict) -> str:
    digest = hashlib.sha256()
    for name in sorted(values):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(values[name]).tobytes())
    return digest.hexdigest()


def reference_states(program, failed_step: int) -> dict:
    """State digest → how many ops of ``failed_step`` ran, for every stop of that step
    (``None``: the whole step ran), the other steps whole."""
    from cupool import EagerSession

    states, keep = {}, 0
    while True:
        with EagerSession() as eager:
            params = program.register(eager)
            ops = None
            for step, batch in enumerate(program.batches(STEPS)):
                with eager.iteration() as it:
                    stopped = _Stopped(it, keep if step == failed_step else 1 << 30)
                    program.train_step(stopped, params, *batch)
                if step == failed_step:
                    ops = stopped.ops
            digest = _digest({n: eager.read(t) for n, t in params.items()})
        states.setdefault(digest, None if keep >= ops else keep)
        if keep >= ops:
            return states
        keep += 1


# -- the cells ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Point:
    """Where a fault goes: ``operation``'s call ``nth`` of step ``step`` (``stage`` as in
    :class:`~cupool.devices.faults.Fault`); ``occupy``: instead, another process takes all
    free device memory before the step."""

    label: str
    step: int
    operation: str = ""
    nth: int = 0
    stage: str = "enqueue"
    occupy: bool = False


def clean_counts(program, runs: int = 3) -> list:
    """Each step's calls per operation in runs without faults, the fewest of ``runs`` runs:
    the plan follows the recording's measured op times, so two runs' plans may make a copy,
    a launch or a wait more or fewer, and a fault aimed at the n-th call must find one."""
    from cupool.devices.faults import FaultyDevice

    fewest = None
    for _ in range(runs):
        counts = []
        with FaultyDevice(capacity=1 << 30) as device:
            session = _session(device, program)
            with session:
                params = program.register(session)
                for batch in program.batches(STEPS):
                    device.arm()
                    with session.iteration() as it:
                        program.train_step(it, params, *batch)
                    counts.append(dict(device.counts))
        fewest = counts if fewest is None else [
            {op: min(n, step.get(op, 0)) for op, n in kept.items()}
            for kept, step in zip(fewest, counts, strict=True)]
    return fewest


def points(counts: list, seed: int) -> list:
    """The points of the matrix for a program whose clean steps made ``counts``."""
    rng = random.Random(seed)
    found = [Point(f"recording: {op} #{n}", 0, op, n)
             for op, n in (("reserve", 1), ("reserve", 2), ("alloc_pinned", 1),
                           ("create_stream", 1))
             if counts[0].get(op, 0) >= n]
    planned = counts[FAILED_STEP]
    for op in ("copy_h2d", "copy_d2h", "launch", "record", "wait_event"):
        calls = planned.get(op, 0)
        if calls == 0:
            continue
        places = {"first": 1, "middle": rng.randint(1, calls), "last": calls}
        if op in ("record", "wait_event"):
            places = {"middle": places["middle"]}
        for where, nth in places.items():
            found.append(Point(f"planned: {op} {where} (#{nth} of {calls})", FAILED_STEP,
                               op, nth))
        if op in ("copy_h2d", "copy_d2h", "launch"):
            nth = places["middle"]
            found.append(Point(f"planned: {op} #{nth} failing on its stream", FAILED_STEP, op,
                               nth, "run"))
    for op, what in (("synchronize", "the device"), ("stream_synchronize", "a stream")):
        if planned.get(op, 0):  # the step's wait for its work
            found.append(Point(f"planned: the step's synchronize of {what}", FAILED_STEP,
                               op, 1))
    found.append(Point("planned: free memory taken before the step", FAILED_STEP,
                       occupy=True))
    return found


def _session(device, program):
    import cupool

    return cupool.Session(getattr(program, "budget", BUDGET), device=device,
                          measure_link=False, measure_overhead=False, plan_params=PLAN_PARAMS)


@dataclass
class Cell:
    program: str
    point: str
    outcome: str
    error: str | None
    later_errors: list
    stopped_after: int | None
    leaked_device_bytes: int
    leaked_pinned_bytes: int
    busy_streams: int
    peak_over_budget: int
    seconds: float


def run_cell(name: str, program, point: Point, references: dict) -> Cell:
    """One program with one fault (module docstring)."""
    from cupool.devices.faults import Fault, FaultyDevice
    from cupool.errors import CupoolError

    began = time.perf_counter()
    error, later, busy, state, budget = None, [], 0, None, None
    peak = 0
    with FaultyDevice(capacity=1 << 30) as device:
        try:
            with _session(device, program) as session:
                params = program.register(session)
                for step, batch in enumerate(program.batches(STEPS)):
                    hit = step == point.step
                    faults = [Fault(point.operation, point.nth, stage=point.stage)] \
                        if hit and not point.occupy else []
                    device.arm(*faults)
                    if hit and point.occupy:
                        device.occupy(device.mem_info()[0])
                    try:
                        with session.iteration() as it:
                            program.train_step(it, params, *batch)
                    except BaseException as exc:
                        text = f"{type(exc).__name__}: {exc}"
                        if not isinstance(exc, CupoolError):
                            text = "UNTYPED " + text
                        if hit:
                            error = text
                        else:
                            later.append(text)
                    if hit:
                        busy = device.pending_work()
                        device.vacate()
                    budget = session.budget_bytes
                    peak = max(peak, device.stats()["reserved_bytes.peak"])
                try:
                    state = _digest({n: session.read(t) for n, t in params.items()})
                except BaseException as exc:
                    later.append(f"read: {type(exc).__name__}: {exc}")
        except BaseException as exc:
            later.append(f"close: {type(exc).__name__}: {exc}")
        stats = device.stats()
        injected = len(device.injected)
    stopped = references.get(state, "none") if state is not None else "none"
    typed = error is None or not error.startswith("UNTYPED")
    later_typed = all(not e.startswith("UNTYPED") for e in later)
    if typed and later_typed and not later and stopped != "none":
        outcome = "continued"
    elif typed and error is not None and later and later_typed \
            and len([e for e in later if not e.startswith("read")]) == STEPS - 1 - point.step:
        outcome = "refused"
    else:
        outcome = "WRONG"
    if not point.occupy and injected == 0:
        outcome += " (not hit)"
    return Cell(name, point.label, outcome, error, later,
                None if stopped == "none" else stopped, stats["reserved_bytes.current"],
                stats["pinned_bytes.current"], busy,
                max(0, peak - budget) if budget is not None else 0,
                round(time.perf_counter() - began, 3))


def good(cell: Cell) -> bool:
    """The matrix's targets for one cell."""
    return (cell.outcome in ("continued", "refused") and cell.leaked_device_bytes == 0
            and cell.leaked_pinned_bytes == 0 and cell.busy_streams == 0
            and cell.peak_over_budget == 0)


def matrix(quick: bool, only: str = "") -> list:
    cells = []
    for name, program in programs(quick).items():
        if only and only not in name:
            continue
        counts = clean_counts(program)
        references = reference_states(program, FAILED_STEP)
        references0 = reference_states(program, 0)
        for point in points(counts, SEED):
            refs = references0 if point.step == 0 else references
            cell = run_cell(name, program, point, refs)
            cells.append(cell)
            print(f"{name:12s} {point.label:52s} {cell.outcome:10s} "
                  f"leaked {cell.leaked_device_bytes}/{cell.leaked_pinned_bytes} B "
                  f"busy {cell.busy_streams} over {cell.peak_over_budget} B "
                  f"{'ok' if good(cell) else 'MISS'}", flush=True)
    return cells


def outcome_counts(cells: list) -> dict:
    """How many cells of each client (a session program, or the pool, replay...) ended
    with each outcome: ``{"client / outcome": count}``."""
    counts: dict = {}
    for cell in cells:
        key = f"{getattr(cell, 'program', None) or cell.client} / {cell.outcome}"
        counts[key] = counts.get(key, 0) + 1
    return counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the two small programs only")
    parser.add_argument("--only", default="",
                        help="programs and clients whose name contains this")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import fault_clients

    from cupool.io import write_atomic

    began = time.perf_counter()
    cells = matrix(args.quick, args.only)
    clients = fault_clients.client_matrix(args.only)
    misses = [c for c in cells if not good(c)] + [c for c in clients
                                                  if not fault_clients.good(c)]
    document = {"steps": STEPS, "failed_step": FAILED_STEP, "budget": BUDGET, "seed": SEED,
                "cells": [asdict(c) for c in cells],
                "client_cells": [asdict(c) for c in clients],
                "outcomes": outcome_counts([*cells, *clients]), "misses": len(misses),
                "seconds": round(time.perf_counter() - began, 1)}
    write_atomic(args.out, (json.dumps(document, indent=1) + "\n").encode())
    print(f"{len(cells) + len(clients)} cells, {len(misses)} missing a target; written to "
          f"{args.out}")
    for key, count in sorted(document["outcomes"].items()):
        print(f"  {key:48s} {count}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
