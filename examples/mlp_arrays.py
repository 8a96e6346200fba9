"""An MLP classifier trained with SGD, its step written once as plain array code and run
both without cupool (NumPy) and under ``cupool.Session`` within a memory budget.

Run: ``python examples/mlp_arrays.py`` (emulated device, 90%, 70% and 50% of the program's
peak, 6 steps); ``--budget 60%`` picks one budget, ``--steps N`` trains longer, ``--device
cuda`` runs the session on a GPU (and the reference with CuPy). It prints the loss of every
step, how the session ran it, and whether the parameters are bitwise identical to the
same function run directly on NumPy arrays.

:func:`step` is ``step(xp, params, batch)``: ``xp`` is ``numpy`` (or ``cupy``) for the run
without cupool, and ``it.xp``, the session's array namespace, under a budget; ``params``
are NumPy arrays or the session's registered tensors, updated in place (``w -= lr * dw``);
``batch`` is host data, brought in with ``xp.asarray``. Under a session each call of the
function is one declared op, named after the function and this file's line, so the plan
and the trace read like this code. ``examples/mlp_sgd.py`` is the same model written with
explicit ops: its op bodies fuse several of these calls each (fewer ops, less host work
per step), the hand-tuned version.
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np

import cupool

BATCH, FEATURES, HIDDEN, LAYERS, CLASSES = 256, 64, 256, 4, 10
LEARNING_RATE = 0.03
BUDGETS = ("90%", "70%", "50%")


def step(xp, params: dict, batch) -> object:
    """One SGD step of the MLP on ``batch`` (features, labels); returns the loss."""
    x, labels = xp.asarray(batch[0]), xp.asarray(batch[1])
    layers = len(params) // 2
    inputs, pre = [], []
    h = x
    for layer in range(layers):
        inputs.append(h)
        z = h @ params[f"w{layer}"] + params[f"b{layer}"]
        pre.append(z)
        h = xp.maximum(z, 0) if layer < layers - 1 else z
    classes = h.shape[1]
    top = xp.max(h, axis=1, keepdims=True)
    e = xp.exp(h - top)
    total = xp.sum(e, axis=1, keepdims=True)
    one_hot = (labels[:, None] == xp.arange(classes)).astype(xp.float32)
    loss = xp.mean(xp.log(total[:, 0]) + top[:, 0] - xp.sum(h * one_hot, axis=1))
    dz = (e / total - one_hot) / x.shape[0]
    for layer in reversed(range(layers)):
        w, b = params[f"w{layer}"], params[f"b{layer}"]
        dw = inputs[layer].T @ dz
        db = xp.sum(dz, axis=0)
        if layer > 0:
            dz = (dz @ w.T) * (pre[layer - 1] > 0)
        w -= LEARNING_RATE * dw
        b -= LEARNING_RATE * db
    return loss


def initial_parameters(seed: int = 0, features: int = FEATURES, hidden: int = HIDDEN,
                       layers: int = LAYERS, classes: int = CLASSES) -> dict:
    rng = np.random.default_rng(seed)
    sizes = [features] + [hidden] * (layers - 1) + [classes]
    params = {}
    for layer, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        scale = np.sqrt(2.0 / fan_in)
        params[f"w{layer}"] = (rng.standard_normal((fan_in, fan_out)) * scale).astype(np.float32)
        params[f"b{layer}"] = np.zeros(fan_out, np.float32)
    return params


def batches(steps: int, seed: int = 1, batch: int = BATCH, features: int = FEATURES,
            classes: int = CLASSES) -> list:
    """``steps`` batches of (features, labels) from fixed Gaussian clusters."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((classes, features)).astype(np.float32) * 2
    out = []
    for _ in range(steps):
        labels = rng.integers(0, classes, batch).astype(np.int32)
        x = centers[labels] + rng.standard_normal((batch, features)).astype(np.float32)
        out.append((x.astype(np.float32), labels))
    return out


def train_directly(xp, params: dict, data: list) -> tuple[list, dict]:
    """:func:`step` on plain arrays of ``xp`` (the program without cupool): the losses and
    the final parameters (host arrays)."""
    params = {name: xp.asarray(value).copy() for name, value in params.items()}
    losses = [float(step(xp, params, batch)) for batch in data]
    return losses, {name: _host(value) for name, value in params.items()}


def _host(array) -> np.ndarray:
    return array.get() if hasattr(array, "get") else np.array(array)


def train(session, params: dict, data: list) -> tuple[list, dict]:
    """:func:`step` under ``session`` (a ``cupool.Session`` or ``cupool.EagerSession``)
    through its array namespace: the losses and the final parameters (host arrays)."""
    tensors = {name: session.register(name, value) for name, value in params.items()}
    losses = []
    for batch in data:
        with session.iteration() as it:
            loss = it.fetch(step(it.xp, tensors, batch))
        losses.append(float(loss.value))
    return losses, {name: session.read(t) for name, t in tensors.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="emulated", choices=["auto", "emulated", "cuda"])
    parser.add_argument("--budget", action="append", help="a budget (default: 90%%, 70%%, "
                                                          "50%%); repeat for several")
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args(argv)
    params, data = initial_parameters(), batches(args.steps)
    same_everywhere = True
    for budget in args.budget or BUDGETS:
        with cupool.Session(budget, device=args.device) as session:
            losses, trained = train(session, params, data)
            reports = session.reports
            peak, budget_bytes, xp = session.peak_bytes, session.budget_bytes, session.xp
        reference_losses, reference = train_directly(xp, params, data)
        same = losses == reference_losses and all(
            np.array_equal(trained[k], reference[k]) for k in reference)
        same_everywhere &= same
        print(f"budget {budget}: program peak {peak} B, budget {budget_bytes} B, "
              f"{len(session.trace.ops)} ops")
        for number, (loss, report) in enumerate(zip(losses, reports, strict=True)):
            print(f"  step {number}: loss {loss:.4f} ({report.mode}, device peak "
                  f"{report.device_peak_bytes} B, late prefetches {report.late_prefetches})")
        print(f"  parameters bitwise identical to the function run on plain arrays: "
              f"{'yes' if same else 'no'}")
    return 0 if same_everywhere else 1


if __name__ == "__main__":
    raise SystemExit(main())
