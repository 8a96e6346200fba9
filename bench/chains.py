"""Chains under tight budgets: cupool's plans against revolve's optimum (one level) and a
two-level (device + pinned host) optimum computed here.

Traces of an adjoint program (:func:`~cupool.planning.budget.chain_traces.adjoint_trace`:
a persistent ``x0``, ``l`` forward steps, a loss, ``l`` adjoint steps that read the states
back last first, the update of ``x0``), every state and adjoint ``S`` bytes, the step
time set so that a copy of one state on the link (PCIe Gen5 preset) takes ``ratio`` steps.
Two shapes: ``adjoint``, the chain alone (``x1 .. x_{l-1}`` read back: ``n = l - 1``
states), and ``side``, the chain inside a larger graph: a coefficient field made once from
persistent parameters before the sweep and read by every forward and adjoint step (a side
input, resident), and a temporary root ``x0`` made from the persistent control by an op of
its own (re-made from it rather than held: ``x0 .. x_{l-1}`` read back, ``n = l``).

**Budgets** are counted here in states, independently of the planner: the *working set*
of a reverse step while it re-makes the state it reads (the control, the adjoint it reads
and the one it writes, the state a recompute reads and the one it writes, and the
512-byte loss; with ``side`` also the parameters and the field) plus ``k`` checkpoint
slots, ``k`` from 0 (the smallest feasible budget: one checkpoint, the root) up to
``n - 1`` (every state kept: the program's peak, 100%).

**One level** (swaps priced out): the revolve policy's plan at each budget; its
recomputes against revolve's optimum for ``n + 1`` steps and ``k + 1`` checkpoints,
computed here from Griewank and Walther's formula ``r·l - C(s + r, s + 1)`` (the sweep
runs ``n`` of them), and the lower bound of :mod:`cupool.sim.chain_bound`. Revolve's
count has ``k`` checkpoints beside the state being advanced; the budget's bytes hold
``k + 2`` states of the chain in all (the working set's two included), and a schedule
that counts them as one memory keeps a state more where an advance is a single step:
``units optimum`` is the fewest forward steps in that model (a recursion written here),
which the policy should equal. ``auto``'s plan too where the link is slowest (ratio 100,
swaps priced out by their cost).

**Two levels**: ``auto``'s plan (its members mix swaps and recomputes, and the two-level
revolve member puts checkpoints on the host) simulated, against the fastest schedule of
a two-level model solved here by a small dynamic program: host checkpoints taken in the
forward sweep, each costing a copy out and a copy back (serial: no overlap with compute),
the stretches between them reversed on the device with ``k`` slots by revolve's count or
the units optimum in the same bytes, the fewer (the last stretch's first advance is the
sweep itself). Target: within 10%.

**Through ``cupool.Session``** (``--session``): the same program written as a chain of
NumPy ops on the emulated device, planned by the session at a few budgets; the plan's
recomputes and the parameters against ``cupool.EagerSession``.

    python bench/chains.py                      # writes bench/results/chains.json
    python bench/chains.py --quick              # fewer cells (tests)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import cache
from math import comb
from pathlib import Path

from auto_speed import code_version, machine

from cupool.check import validate_plan
from cupool.core.vocabulary import RecomputeAction, SwapOut
from cupool.planning.budget import BudgetParams, plan_with_budget
from cupool.planning.budget.chain_traces import adjoint_trace
from cupool.planning.budget.revolve import plan_revolve
from cupool.sim.chain_bound import chain_recompute_bound
from cupool.sim.cost import cost_model
from cupool.sim.simulator import simulate

OUT = Path(__file__).resolve().parent / "results" / "chains.json"
LOSS_BYTES = 512
RATIOS = (0.1, 1.0, 10.0, 100.0)
SHAPES = {"adjoint": {}, "side": {"side_input": True, "temporary_root": True}}
"""``adjoint_trace``'s options for each shape (module docstring)."""


def revolve_optimum(steps: int, checkpoints: int) -> int:
    """Griewank and Walther: the fewest forward steps reversing ``steps`` steps with
    ``checkpoints`` checkpoints (the first holds the initial state)."""
    r = 1
    while comb(checkpoints + r, checkpoints) < steps:
        r += 1
    return r * steps - comb(checkpoints + r, checkpoints + 1)


@cache
def units_optimum(states: int, units: int) -> float:
    """Forward steps delivering ``states`` states above the root when ``units`` states'
    worth of memory hold the checkpoints and the state being advanced: two states for an
    advance of two steps or more (the one read, the one written), one for a single step
    from a held state (module docstring)."""
    if states == 0:
        return 0
    best = float("inf")
    for k in range(1, states + 1):
        if units < (1 if k == 1 else 2):
            continue
        rest = (units_optimum(states - 1, units) if k == states else
                units_optimum(states - k, units - 1) + units_optimum(k - 1, units))
        best = min(best, k + rest)
    return best


def working_set(state_bytes: int, shape: str = "adjoint") -> int:
    """Bytes a reverse step holds while it re-makes the state it reads (module docstring)."""
    return (5 if shape == "adjoint" else 7) * state_bytes + LOSS_BYTES


def states_of(length: int, shape: str = "adjoint") -> int:
    """States the reverse sweep reads back (module docstring)."""
    return length - 1 if shape == "adjoint" else length


def two_level_optimum_us(length: int, slots: int, step_us: float, copy_us: float,
                         states: int | None = None) -> float:
    """Extra time (beyond the ideal iteration) of the fastest two-level schedule (module
    docstring): host checkpoints at positions ``0 < q1 < .. < qk`` of the ``n = l - 1``
    states, each a serial copy out and back; the stretch between two reversed from its
    lower end with the slots left beside it (every step recomputed: revolve's full
    count), the last stretch's first advance being the sweep."""
    n = length - 1 if states is None else states
    inf = float("inf")

    def inner(states: int, base: int) -> float:
        """Forward steps delivering ``states`` above ``base`` (a host checkpoint back on
        the device takes a slot; the root ``x0`` does not): revolve's with those slots, or
        the units optimum in the same bytes (the slots and a step's two states), the
        fewer."""
        free = slots if base == 0 else slots - 1
        if free < 0:
            return inf
        if not states:
            return 0
        return min(revolve_optimum(states + 1, free + 1),
                   units_optimum(states, min(states, free + 2)))

    def copies(q: int) -> float:
        return 2 * copy_us if q else 0.0

    best_to = [0.0] * (n + 1)  # best_to[p]: states 1..p-1 delivered below host checkpoint p
    for p in range(1, n + 1):
        best_to[p] = min(best_to[q] + copies(q) + inner(p - q - 1, q) * step_us
                         for q in range(p))
    return min(best_to[q] + copies(q) + (inner(n - q, q) - (n - q)) * step_us
               for q in range(n + 1))


def read_back(trace, length: int, shape: str) -> list[int]:
    """The buffers of the states the reverse sweep reads, by the program's names."""
    first = 1 if shape == "adjoint" else 0
    names = {f"x{j}" for j in range(first, length)}
    return [b.id for b in trace.buffers if b.kind != "persistent" and b.name in names]


def chain_recomputes(plan, states) -> int:
    ids = set(states)
    return sum(isinstance(a, RecomputeAction) and a.buffer_id in ids for a in plan.actions)


def cell(length: int, state_bytes: int, ratio: float, slots: int, with_auto: bool,
         shape: str = "adjoint") -> dict:
    """One trace at one budget: the revolve policy, the bound, and (``with_auto``)
    ``auto`` against the two-level optimum."""
    base = cost_model("gen5")
    step_us = base.copy_us(state_bytes, "h2d") / ratio
    trace = adjoint_trace(length, state_bytes, step_us=step_us, **SHAPES[shape])
    states = read_back(trace, length, shape)
    n = states_of(length, shape)
    peak = trace.lower_bound_bytes()
    budget = min(peak, working_set(state_bytes, shape) + slots * state_bytes)
    optimum = revolve_optimum(n + 1, slots + 1) - n
    in_units = int(units_optimum(n, min(n, slots + 2))) - n
    started = time.perf_counter()
    result = plan_revolve(trace, budget, base, BudgetParams(), started)
    seconds = time.perf_counter() - started
    row = {"shape": shape, "length": length, "state_bytes": state_bytes, "ratio": ratio,
           "slots": slots, "budget_bytes": budget, "budget_share": budget / peak,
           "revolve_optimum_recomputes": optimum, "units_optimum_recomputes": in_units}
    bound = chain_recompute_bound(trace, states, budget, base)
    row["bound_recomputes"] = bound.recomputes
    if result.feasible:
        assert validate_plan(result.trace, result.plan).valid
        recomputes = chain_recomputes(result.plan, states)
        row.update(revolve_recomputes=recomputes, revolve_slots=result.plan.stats[
            "revolve_slots"], revolve_plan_s=seconds,
            revolve_model=result.plan.stats["revolve_model"],
            revolve_units=result.plan.stats["revolve_units"],
            revolve_vs_optimum=(recomputes / optimum if optimum else
                                (1.0 if recomputes == 0 else float("inf"))),
            revolve_vs_units=(recomputes / in_units if in_units else
                              (1.0 if recomputes == 0 else float("inf"))))
    else:
        row.update(revolve_recomputes=None, revolve_reason=result.reason)
    if with_auto:
        started = time.perf_counter()
        auto = plan_with_budget(trace, budget, "auto", base)
        row["auto_plan_s"] = time.perf_counter() - started
        if auto.feasible:
            assert validate_plan(auto.trace, auto.plan).valid
            sim = simulate(auto.trace, auto.plan, base)
            ideal = sim.ideal_us
            best_extra = two_level_optimum_us(length, slots, step_us,
                                              base.copy_us(state_bytes, "d2h"), n)
            row.update(auto_member=auto.member, auto_iteration_us=sim.iteration_us,
                       auto_recomputes=chain_recomputes(auto.plan, states),
                       auto_swaps=sum(isinstance(a, SwapOut) for a in auto.plan.actions),
                       two_level_optimum_us=ideal + best_extra,
                       auto_vs_two_level=sim.iteration_us / (ideal + best_extra))
        else:
            row.update(auto_member=None, auto_reason=auto.reason)
    return row


def slot_points(states: int) -> list[int]:
    """Budgets from one checkpoint to every state kept (``n - 1`` slots)."""
    top = states - 1
    points = {0, 1, 2, 3, 5, 8, 12, 16, 32, 64, 128}
    return sorted({p for p in points if p < top} | {top})


def session_cells(lengths, budgets) -> list[dict]:
    """The adjoint example through ``cupool.Session`` (emulated device) at ``budgets``."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    import adjoint_chain

    rows = []
    for length in lengths:
        for budget in budgets:
            row = adjoint_chain.compare(length=length, budget=budget, steps=3)
            rows.append({"length": length, "budget": budget, **row})
    return rows


def fmt(value, digits=2):
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def model_code(model: str | None) -> str:
    """The revolve policy's schedule in a few letters: ``S`` revolve's slots, ``U`` units,
    ``U/L`` units with a light turn, ``+t`` planned over the steps' times."""
    if model is None:
        return "-"
    code = {"slots": "S", "units": "U", "units (light turn)": "U/L"}[model.split(",")[0]]
    return code + ("+t" if "timed" in model else "")


def print_tables(single, double, sessions) -> None:
    print("one level (swaps priced out): recomputes of the revolve policy against revolve's "
          "optimum and the units optimum (model: S revolve's slots, U units, U/L units with a "
          "light turn, +t planned over the steps' times)")
    print(f"{'shape':>7} {'l':>4} {'state':>9} {'slots':>5} {'budget%':>7} {'optimum':>7} "
          f"{'units':>7} {'planned':>7} {'model':>5} {'plan/opt':>8} {'plan/un':>7} "
          f"{'bound':>6} {'plan s':>6}")
    for r in single:
        print(f"{r['shape']:>7} {r['length']:>4} {r['state_bytes']:>9} {r['slots']:>5} "
              f"{100 * r['budget_share']:>7.1f} {r['revolve_optimum_recomputes']:>7} "
              f"{r['units_optimum_recomputes']:>7} {fmt(r['revolve_recomputes']):>7} "
              f"{model_code(r.get('revolve_model')):>5} "
              f"{fmt(r.get('revolve_vs_optimum'), 3):>8} {fmt(r.get('revolve_vs_units'), 3):>7} "
              f"{fmt(r['bound_recomputes']):>6} {fmt(r.get('revolve_plan_s')):>6}")
    print()
    print("two levels: auto's simulated iteration against the two-level optimum (serial copies)")
    print(f"{'shape':>7} {'l':>4} {'ratio':>6} {'slots':>5} {'budget%':>7} {'member':>28} "
          f"{'recomp':>6} {'swaps':>5} {'auto ms':>8} {'opt ms':>8} {'auto/opt':>8}")
    for r in double:
        planned = r.get("auto_iteration_us")
        auto_ms = planned / 1e3 if planned else None
        best_ms = r["two_level_optimum_us"] / 1e3 if planned else None
        print(f"{r['shape']:>7} {r['length']:>4} {r['ratio']:>6} {r['slots']:>5} "
              f"{100 * r['budget_share']:>7.1f} "
              f"{fmt(r.get('auto_member'))[:28]:>28} {fmt(r.get('auto_recomputes')):>6} "
              f"{fmt(r.get('auto_swaps')):>5} {fmt(auto_ms, 3):>8} {fmt(best_ms, 3):>8} "
              f"{fmt(r.get('auto_vs_two_level'), 3):>8}")
    if sessions:
        print()
        print("through cupool.Session (emulated device)")
        print(f"{'l':>4} {'budget':>7} {'member':>24} {'recomp':>6} {'swaps':>5} "
              f"{'step ms':>8} {'eager ms':>8} {'bitwise':>7}")
        for r in sessions:
            print(f"{r['length']:>4} {r['budget']:>7} {fmt(r['member'])[:24]:>24} "
                  f"{fmt(r['recomputes']):>6} {fmt(r['swaps']):>5} {fmt(r['step_ms']):>8} "
                  f"{fmt(r['eager_ms']):>8} {'yes' if r['bitwise'] else 'no':>7}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few cells only")
    parser.add_argument("--session", action="store_true",
                        help="also run the adjoint example through cupool.Session")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    lengths = (16, 48) if args.quick else (16, 48, 128, 256)
    sizes = (1 << 20,) if args.quick else (1 << 20, 64 << 20)
    single = [cell(length, size, 100.0, slots, False)
              for length in lengths for size in sizes
              for slots in slot_points(states_of(length))]
    single += [cell(length, 1 << 20, 100.0, slots, False, "side") for length in lengths
               for slots in slot_points(states_of(length, "side"))]
    auto_lengths = (16,) if args.quick else (16, 48, 128)
    double = []
    for shape, shape_lengths in (("adjoint", auto_lengths), ("side", auto_lengths[:2])):
        for length in shape_lengths:
            points = slot_points(states_of(length, shape))
            chosen = sorted({points[0], points[1], points[len(points) // 2], points[-2]})
            ratios = (100.0, 1.0) if args.quick or shape == "side" else RATIOS
            for ratio in ratios:
                double += [cell(length, 1 << 20, ratio, slots, True, shape)
                           for slots in chosen]
    sessions = session_cells((16,) if args.quick else (16, 48),
                             ("floor", "50%")) if args.session else []
    print_tables(single, double, sessions)
    worst = max((r["revolve_vs_optimum"] for r in single if r.get("revolve_vs_optimum")),
                default=None)
    worst_units = max((r["revolve_vs_units"] for r in single if r.get("revolve_vs_units")),
                      default=None)
    above = sum(r["revolve_recomputes"] is None
                or r["revolve_recomputes"] > r["units_optimum_recomputes"] for r in single)
    worst_two = max((r["auto_vs_two_level"] for r in double if r.get("auto_vs_two_level")),
                    default=None)
    print(f"\nworst one-level recomputes / revolve's optimum: {fmt(worst, 3)} (target <= 1.05); "
          f"/ units optimum: {fmt(worst_units, 3)} ({above} of {len(single)} cells above it); "
          f"worst two-level iteration / optimum: {fmt(worst_two, 3)} (target <= 1.10)")
    document = {"benchmark": "chains", "machine": machine(), "code": code_version(),
                "one_level": single, "two_levels": double, "session": sessions,
                "worst_one_level": worst, "worst_one_level_units": worst_units,
                "one_level_above_units_optimum": above, "worst_two_levels": worst_two}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
