"""A recurrent program of about 350 small ops, written for ``cupool.Session`` the way the
examples are (``register``, ``batches``, ``train_step``): an Elman network
``h_t = tanh(x_t @ Wx + h_{t-1} @ Wh)`` over ``STEPS`` time steps, the loss
``sum(h_T**2) / 2B``, back-propagation through time (four ops a time step) and SGD.

Every op is small (a (16, 64) matrix product and less): the program is bound by what each
op costs the host, which is what ``bench/host_cost.py`` measures it for.
"""

from __future__ import annotations

import numpy as np

import cupool

STEPS = 50
BATCH = 16
FEATURES = 32
HIDDEN = 64
LEARNING_RATE = 0.05


def cell(x, h, wx, wh, out):
    xp = cupool.array_module(x)
    xp.matmul(x, wx, out=out)
    out += h @ wh
    xp.tanh(out, out=out)


def first_cell(x, wx, out):
    xp = cupool.array_module(x)
    xp.tanh(x @ wx, out=out)


def loss_of(h, out):
    out[...] = (h * h).sum() / (2 * h.shape[0])


def loss_grad(h, out):
    cupool.array_module(h).divide(h, h.shape[0], out=out)


def tanh_grad(dh, h, out):
    cupool.array_module(dh).multiply(dh, 1 - h * h, out=out)


def accumulate(a, dz, grad):
    grad += a.T @ dz


def through_time(dz, wh, out):
    cupool.array_module(dz).matmul(dz, wh.T, out=out)


def zero(grad):
    grad[...] = 0


def sgd(grad, param):
    param -= LEARNING_RATE * grad


def initial_parameters(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"wx": (rng.standard_normal((FEATURES, HIDDEN)) / np.sqrt(FEATURES)).astype(np.float32),
            "wh": (rng.standard_normal((HIDDEN, HIDDEN)) / np.sqrt(HIDDEN)).astype(np.float32),
            "gwx": np.zeros((FEATURES, HIDDEN), np.float32),
            "gwh": np.zeros((HIDDEN, HIDDEN), np.float32)}


def batches(steps: int, seed: int = 1) -> list:
    """``steps`` batches, each a tuple of one (BATCH, FEATURES) array."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((STEPS, BATCH, FEATURES)).astype(np.float32),)
            for _ in range(steps)]


def train_step(it, p: dict, xs):
    """One step of back-propagation through time declared on ``it`` over ``xs`` (time
    steps × batch × features; the sizes are those of ``xs`` and ``p``); returns the
    loss."""
    f32, state = "float32", (xs.shape[1], p["wh"].shape[0])
    steps = xs.shape[0]
    inputs = [it.input(xs[t], name=f"x{t}") for t in range(steps)]
    hs = [it.op(first_cell, inputs[0], p["wx"], out=(state, f32), name="cell0")]
    for t in range(1, steps):
        hs.append(it.op(cell, inputs[t], hs[-1], p["wx"], p["wh"], out=(state, f32),
                        name="cell"))
    loss = it.op(loss_of, hs[-1], out=((), f32), name="loss")
    dh = it.op(loss_grad, hs[-1], out=(state, f32), name="dloss")
    it.op(zero, updates=[p["gwx"]], name="zero_gwx")
    it.op(zero, updates=[p["gwh"]], name="zero_gwh")
    for t in reversed(range(steps)):
        dz = it.op(tanh_grad, dh, hs[t], out=(state, f32), name="dtanh")
        it.op(accumulate, inputs[t], dz, updates=[p["gwx"]], name="acc_wx")
        if t > 0:
            it.op(accumulate, hs[t - 1], dz, updates=[p["gwh"]], name="acc_wh")
            dh = it.op(through_time, dz, p["wh"], out=(state, f32), name="dh")
    it.op(sgd, p["gwx"], updates=[p["wx"]], name="sgd_wx")
    it.op(sgd, p["gwh"], updates=[p["wh"]], name="sgd_wh")
    return it.fetch(loss)


def register(session, seed: int = 0) -> dict:
    return {name: session.register(name, value)
            for name, value in initial_parameters(seed).items()}
