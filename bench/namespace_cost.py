"""Host cost of an op made by the array namespace against the same op declared explicitly.

For each kind of call, two programs of ``OPS`` resident ops (budget 100%: no swap) over
small arrays, run by ``cupool.Session`` on the emulated device: one declares each op with
``it.op`` and an op body written by hand (``np.add(a, b, out=out)``), the other makes the
same op with the namespace (``x + w``). Kinds: ``binary`` (``x + w``), ``scalar``
(``x * 0.5``), ``unary`` (``xp.exp(x)``), ``view`` (``m.T + m``: an op reading its input
through a transposed view), ``in place`` (``w += x``: an update). The two sessions run
alternately, ``--steps`` steps each; medians over the steps from the third (after the
recording and the first planned step), per op, in µs of wall time; also the fastest
step's (``*_min_us``: on a busy machine the other processes inflate some steps, least
the fastest):

- ``declare``: the calls declaring the step's ops (``it.op``, or the namespace's calls);
- ``step``: from the ``with`` block's start to its end (declaring, matching the recorded
  program, the planned step's enqueue and run: the op bodies included).

``extra_declare_us`` and ``extra_step_us`` are the namespace's minus the explicit ops'
(target: at most 3 µs per op). BLAS runs one thread. Prints the table and writes
``bench/results/namespace_cost.json``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np

import cupool

ROOT = Path(__file__).resolve().parent.parent
OPS = 200
STEPS = 24
SKIP = 2
OUT = ROOT / "bench" / "results" / "namespace_cost.json"
VECTOR, MATRIX = ((4,), "float32"), ((4, 4), "float32")


def _add(a, b, out):
    np.add(a, b, out=out)


def _scale(a, out):
    np.multiply(a, 0.5, out=out)


def _exp(a, out):
    np.exp(a, out=out)


def _add_transposed(m, out):
    np.add(m.T, m, out=out)


def _accumulate(a, target):
    target += a


EXPLICIT = {
    "binary": lambda it, x, w, m: it.op(_add, x, w, out=VECTOR, name="add"),
    "scalar": lambda it, x, w, m: it.op(_scale, x, out=VECTOR, name="scale"),
    "unary": lambda it, x, w, m: it.op(_exp, x, out=VECTOR, name="exp"),
    "view": lambda it, x, w, m: it.op(_add_transposed, m, out=MATRIX, name="add_t"),
    "in place": lambda it, x, w, m: it.op(_accumulate, x, updates=[w], name="accumulate"),
}


def _in_place(it, x, w, m):
    w += x


NAMESPACE = {
    "binary": lambda it, x, w, m: x + w,
    "scalar": lambda it, x, w, m: x * 0.5,
    "unary": lambda it, x, w, m: it.xp.exp(x),
    "view": lambda it, x, w, m: m.T + m,
    "in place": _in_place,
}


def _open():
    session = cupool.Session("100%", device="emulated", measure_link=False,
                             measure_overhead=False)
    w = session.register("w", np.zeros(4, np.float32))
    m = session.register("m", np.ones((4, 4), np.float32))
    return session, w, m


def _step(session, w, m, make) -> tuple[float, float]:
    """One step of OPS ops made by ``make``: (declare s, step s)."""
    began = time.perf_counter()
    with session.iteration() as it:
        x = it.input(np.ones(4, np.float32), name="x")
        it.xp  # noqa: B018  (made before the timed calls, as a step function receives it)
        declaring = time.perf_counter()
        for _ in range(OPS):
            make(it, x, w, m)
        declared = time.perf_counter()
    return declared - declaring, time.perf_counter() - began


def measure(kind: str, steps: int) -> dict:
    """Both programs of ``kind``, run alternately (module docstring)."""
    runs = {"explicit": _open(), "namespace": _open()}
    makers = {"explicit": EXPLICIT[kind], "namespace": NAMESPACE[kind]}
    times = {name: {"declare": [], "step": []} for name in runs}
    try:
        for _ in range(steps):
            for name, (session, w, m) in runs.items():
                declare, step = _step(session, w, m, makers[name])
                times[name]["declare"].append(declare)
                times[name]["step"].append(step)
        modes = {name: [r.mode for r in session.reports]
                 for name, (session, _, _) in runs.items()}
        names = {name: session.trace.ops[1].name for name, (session, _, _) in runs.items()}
    finally:
        for session, _, _ in runs.values():
            session.close()
    row = {"kind": kind, "ops": OPS, "steps": steps, "modes": modes, "op_names": names}
    for name in runs:
        for part in ("declare", "step"):
            later = times[name][part][SKIP:]
            row[f"{name}_{part}_us"] = round(statistics.median(later) / OPS * 1e6, 3)
            row[f"{name}_{part}_min_us"] = round(min(later) / OPS * 1e6, 3)
    for part in ("declare", "step", "declare_min", "step_min"):
        row[f"extra_{part}_us"] = round(row[f"namespace_{part}_us"]
                                        - row[f"explicit_{part}_us"], 3)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    load = list(os.getloadavg())
    rows = [measure(kind, args.steps) for kind in EXPLICIT]
    print(f"{'kind':9} {'declare: explicit':>17} {'namespace':>10} {'extra':>6} "
          f"{'(fastest)':>9}   {'step: explicit':>14} {'namespace':>10} {'extra':>6} "
          f"{'(fastest)':>9}   us per op")
    for r in rows:
        print(f"{r['kind']:9} {r['explicit_declare_us']:17.2f} {r['namespace_declare_us']:10.2f}"
              f" {r['extra_declare_us']:6.2f} {r['extra_declare_min_us']:9.2f}   "
              f"{r['explicit_step_us']:14.2f} {r['namespace_step_us']:10.2f} "
              f"{r['extra_step_us']:6.2f} {r['extra_step_min_us']:9.2f}")
    print(f"({OPS} resident ops a step, medians of {args.steps - SKIP} steps, and the fastest "
          f"steps' difference; load average {load[0]:.2f} before, {os.getloadavg()[0]:.2f} "
          f"after)")
    document = {"machine": {"python": platform.python_version(), "numpy": np.__version__,
                            "cpus": os.cpu_count(), "load_average_before": load,
                            "load_average_after": list(os.getloadavg())},
                "device": "emulated", "ops": OPS, "steps": args.steps, "rows": rows,
                "target_extra_us": 3.0}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
