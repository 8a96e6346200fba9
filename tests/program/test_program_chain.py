"""A chain inside a larger program through ``cupool.Session``: a coefficient field made
once from persistent parameters and read by every step (a side input), a root made from
the control by an op of its own, adjoint steps that read the states and the field; at a
tight budget the plan is revolve's over the states alone, and the control after training
is bitwise the one computed without cupool."""

from __future__ import annotations

import numpy as np

import cupool
from cupool.planning.budget.chain import find_chain

CELLS, LENGTH = 512, 10


def coefficients(theta, out):
    out[...] = 0.1 + 0.05 * np.tanh(theta)


def lift(u, out):
    out[...] = 0.5 * u


def step(x, c, out):
    out[...] = x + c * (np.roll(x, 1) - 2 * x + np.roll(x, -1))


def adjoint(lam, x, c, out):
    out[...] = lam + c * (np.roll(lam, 1) - 2 * lam + np.roll(lam, -1)) + 0.01 * x


def misfit_gradient(x, observed, out):
    out[...] = x - observed


def descend(gradient, u):
    u -= 0.1 * gradient


def gradient_step(it, u, theta, observed):
    c = it.op(coefficients, theta, out=((CELLS,), "float64"), name="coeff")
    states = [it.op(lift, u, out=((CELLS,), "float64"), name="lift")]
    for j in range(LENGTH):
        states.append(it.op(step, states[-1], c, out=((CELLS,), "float64"),
                            name=f"step{j + 1}"))
    lam = it.op(misfit_gradient, states[-1], it.input(observed, name="observed"),
                out=((CELLS,), "float64"), name="adjoint_start")
    for j in range(LENGTH, 0, -1):
        lam = it.op(adjoint, lam, states[j - 1], c, out=((CELLS,), "float64"),
                    name=f"adjoint{j}")
    it.op(descend, lam, updates=[u], name="descend")


def train(session, steps=2):
    rng = np.random.default_rng(0)
    u = session.register("u", rng.random(CELLS))
    theta = session.register("theta", rng.random(CELLS))
    observed = rng.random(CELLS)
    for _ in range(steps):
        with session.iteration() as it:
            gradient_step(it, u, theta, observed)
    return session.read(u)


def test_a_chain_with_a_side_input_and_a_temporary_root_through_a_session():
    state = CELLS * 8
    budget = 8 * state  # u, theta, c, two adjoints, a step's two states, one more
    with cupool.Session(budget, device="emulated", link=0.01) as session:
        trained = train(session)
        plan, trace = session.plan, session.trace
    chain = find_chain(trace)
    names = {b.id: b.name for b in trace.buffers}
    assert [names[b] for b in chain.side] == ["coeff"]
    assert [names[b] for b in chain.buffer_ids][:2] == ["lift", "step1"]
    # a copy takes far longer than a step: a revolve schedule (one level or two) wins
    assert plan.stats["member"].startswith("revolve") and plan.stats["revolve_recomputes"] > 0
    assert not plan.stats["revolve_host"]
    with cupool.EagerSession(np) as eager:
        reference = train(eager)
    assert np.array_equal(trained, reference)
