"""A 4D-Var step as a chain: fit the initial state of a reaction-diffusion model to an
observation of its final state, each gradient step a program run within a tight budget.

Run: ``python examples/adjoint_chain.py`` (emulated device, 48 time steps, the smallest
budget a recompute schedule needs, 4 steps); ``--budget 30%`` or ``--budget 2MiB`` picks
another budget, ``--length N`` another number of time steps, ``--device cuda`` a GPU,
``--not-recomputable J ...`` declares forward steps ``J`` not recomputable (the plan keeps
their states and says so).

The model steps a 1-D state ``x`` (periodic, ``N`` cells) forward ``length`` times::

    x_{j+1} = x_j + D·(x_j[i-1] - 2·x_j[i] + x_j[i+1]) + R·x_j·(1 - x_j)

The loss is ``½·|x_l - observed|²``; its gradient with respect to the initial state
``x0`` (the control, a persistent tensor) comes from the adjoint, which steps back from
``λ_l = x_l - observed`` through the transposed Jacobians, each reading the forward
state of its step: ``λ_j = λ_{j+1} + D·Δλ_{j+1} + R·(1 - 2·x_j)·λ_{j+1}``. The reverse
sweep reads the states last first, so at a budget holding a few of them the plan
recomputes the others from kept ones (revolve's schedule: the ``revolve`` member of the
budget planner), nesting the recomputes. It prints each step's loss, the plan's
recomputes, and whether the initial state after training is bitwise the one the same
program computes without cupool (``cupool.EagerSession``).

A budget below one reverse step's working set plus one checkpoint (the control) is
refused before anything runs: :class:`~cupool.program.BudgetTooSmallError` names the op
and the bytes. The link is priced at ``--link`` GB/s (0.02: a copy of a state takes tens of
steps, as a PCIe copy of a stencil's state does on a GPU), so the plan recomputes rather
than swaps.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import cupool
from cupool.core.units import parse_bytes
from cupool.program import BudgetTooSmallError

CELLS = 16384
DIFFUSION, REACTION, LEARNING_RATE = 0.2, 0.05, 0.5


# -- op bodies: each writes its output (the last argument) --------------------------------
def forward_step(x, out):
    xp = cupool.array_module(x)
    out[...] = x + DIFFUSION * (xp.roll(x, 1) - 2 * x + xp.roll(x, -1)) \
        + REACTION * x * (1 - x)


def adjoint_step(lam, x, out):
    xp = cupool.array_module(lam)
    out[...] = lam + DIFFUSION * (xp.roll(lam, 1) - 2 * lam + xp.roll(lam, -1)) \
        + REACTION * (1 - 2 * x) * lam


def misfit(x, observed, out):
    out[...] = 0.5 * ((x - observed) ** 2).sum()


def misfit_gradient(x, observed, out):
    out[...] = x - observed


def descend(gradient, x0):
    x0 -= LEARNING_RATE * gradient


# -- the problem ----------------------------------------------------------------------------
def truth_and_guess(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The true initial state (smooth bumps) and the first guess (a flat field)."""
    rng = np.random.default_rng(seed)
    cells = np.arange(CELLS)
    truth = np.full(CELLS, 0.3)
    for center in rng.integers(0, CELLS, 6):
        truth += 0.4 * np.exp(-0.5 * ((cells - center) / 300.0) ** 2)
    return truth, np.full(CELLS, 0.3)


def observe(truth: np.ndarray, length: int) -> np.ndarray:
    """The final state of the true run (the observation), computed once on the host."""
    x = truth.copy()
    for _ in range(length):
        out = np.empty_like(x)
        forward_step(x, out)
        x = out
    return x


def gradient_step(it, x0, observed: np.ndarray, length: int, fixed: tuple = ()):
    """One 4D-Var gradient step declared on iteration ``it`` (the forward steps in
    ``fixed`` declared not recomputable); returns the fetched loss."""
    states = [x0]
    for j in range(length):
        states.append(it.op(forward_step, states[-1], out=((CELLS,), "float64"),
                            name=f"step{j + 1}", recompute=j + 1 not in fixed))
    observed_t = it.input(observed, name="observed")
    loss = it.op(misfit, states[-1], observed_t, out=((), "float64"), name="misfit")
    lam = it.op(misfit_gradient, states[-1], observed_t, out=((CELLS,), "float64"),
                name="adjoint_start")
    for j in range(length, 0, -1):
        lam = it.op(adjoint_step, lam, states[j - 1], out=((CELLS,), "float64"),
                    name=f"adjoint{j}")
    it.op(descend, lam, updates=[x0], name="descend")
    return it.fetch(loss)


def floor_bytes() -> int:
    """One reverse step's working set plus one checkpoint (the control ``x0``): the two
    adjoints it reads and writes, the state a recompute reads and the one it writes, and
    the 512-byte loss (each tensor rounded up to the pool's 512-byte unit)."""
    state = -(-CELLS * 8 // 512) * 512
    return 5 * state + 512


def train(session, steps: int, length: int, fixed: tuple = ()) -> tuple[list, np.ndarray]:
    """Train for ``steps`` on ``session``; the losses and the final control."""
    truth, guess = truth_and_guess()
    observed = observe(truth, length)
    x0 = session.register("x0", guess)
    losses = []
    for _ in range(steps):
        with session.iteration() as it:
            loss = gradient_step(it, x0, observed, length, fixed)
        losses.append(float(loss.value))
    return losses, session.read(x0)


def check_budget(budget_bytes: int, length: int) -> None:
    """:class:`~cupool.program.BudgetTooSmallError` for a budget below
    :func:`floor_bytes`."""
    needed = floor_bytes()
    if budget_bytes < needed:
        raise BudgetTooSmallError(f"adjoint{length}", length + 3, needed,
                                         budget_bytes)


def resolve_budget(budget: str, length: int) -> int | str:
    """``"floor"``: :func:`floor_bytes`; a size is checked against it; a share of the
    program's peak (``"30%"``) is left to the session."""
    if budget == "floor":
        return floor_bytes()
    if budget.endswith("%"):
        return budget
    nbytes = parse_bytes(budget, "budget")
    check_budget(nbytes, length)
    return nbytes


def compare(length: int = 48, budget: str = "floor", steps: int = 4,
            device: str = "emulated", link: float | str = 0.02, fixed: tuple = ()) -> dict:
    """Train with cupool and without; what ``bench/chains.py`` reports of it."""
    chosen = resolve_budget(budget, length)
    with cupool.Session(chosen, device=device, link=link) as session:
        started = time.perf_counter()
        losses, x0 = train(session, steps, length, fixed)
        planned = [r.wall_us for r in session.reports if r.mode == "planned"]
        plan = session.plan
        stats = plan.stats if plan is not None else {}
        recomputes = sum(type(a).__name__ == "RecomputeAction" for a in plan.actions) \
            if plan is not None else 0
        swaps = sum(type(a).__name__ == "SwapOut" for a in plan.actions) \
            if plan is not None else 0
        row = {"member": stats.get("member"), "recomputes": recomputes, "swaps": swaps,
               "budget_bytes": session.budget_bytes, "peak_bytes": session.peak_bytes,
               "device_peak_bytes": max(r.device_peak_bytes for r in session.reports),
               "forced": stats.get("revolve_forced", []),
               "step_ms": float(np.median(planned)) / 1e3 if planned else None,
               "seconds": time.perf_counter() - started}
        xp = session.xp
    with cupool.EagerSession(xp) as eager:
        started = time.perf_counter()
        reference_losses, reference = train(eager, steps, length, fixed)
        row["eager_ms"] = (time.perf_counter() - started) * 1e3 / steps
    row["bitwise"] = bool(np.array_equal(x0, reference)) and losses == reference_losses
    row["losses"] = losses
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="emulated", choices=["auto", "emulated", "cuda"])
    parser.add_argument("--budget", default="floor")
    parser.add_argument("--length", type=int, default=48)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--link", type=float, default=0.02, help="GB/s the plan assumes")
    parser.add_argument("--not-recomputable", type=int, nargs="*", default=(), metavar="J",
                        help="forward steps declared recompute=False")
    args = parser.parse_args(argv)
    try:
        row = compare(args.length, args.budget, args.steps, args.device, args.link,
                      tuple(args.not_recomputable))
    except BudgetTooSmallError as exc:
        print(f"error: {exc}")
        return 2
    for step, loss in enumerate(row["losses"]):
        print(f"step {step}: loss {loss:.6f}")
    print(f"budget {row['budget_bytes']} B of the program's peak {row['peak_bytes']} B; "
          f"device peak {row['device_peak_bytes']} B")
    print(f"plan: {row['member']}, {row['recomputes']} recomputes, {row['swaps']} swaps")
    for reason in row["forced"]:
        print(f"kept, not recomputed: {reason}")
    print(f"loss decreased: {'yes' if row['losses'][-1] < row['losses'][0] else 'no'}")
    print(f"control bitwise identical to the run without cupool: "
          f"{'yes' if row['bitwise'] else 'no'}")
    return 0 if row["bitwise"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
