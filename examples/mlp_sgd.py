"""An MLP classifier trained with SGD, each step a program run within a memory budget.

Run: ``python examples/mlp_sgd.py`` (emulated device, 50% of the program's peak, 8 steps);
``--device cuda`` runs it unchanged on a GPU, ``--budget 70%`` or ``--budget 3MiB`` picks
another budget, ``--steps N`` trains longer. It prints the loss of every step, how the
session ran it, and whether the parameters are bitwise identical to the same program run
without cupool (``cupool.EagerSession``: every op at once, on plain arrays).

The data are Gaussian clusters, one per class, drawn here with a fixed seed. Every op body
is array-module generic (``xp = cupool.array_module(x)``): NumPy views of the emulated
device's memory, CuPy arrays on a GPU.

This is the fused, hand-tuned version: each op body does the work of several array
calls (fewer ops, less host work per step). ``examples/mlp_arrays.py`` is the same model as
one plain array-code step function, ``step(xp, params, batch)``, run with NumPy and
under a session through its array namespace (``it.xp``).
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np

import cupool

BATCH, FEATURES, HIDDEN, LAYERS, CLASSES = 256, 64, 256, 4, 10
LEARNING_RATE = 0.03


# -- op bodies: each writes its outputs (the last arguments) -------------------------------
def linear(h, w, b, out):
    xp = cupool.array_module(h)
    xp.matmul(h, w, out=out)
    out += b


def relu(z, out):
    cupool.array_module(z).maximum(z, 0, out=out)


def cross_entropy(logits, labels, out):
    xp = cupool.array_module(logits)
    top = logits.max(axis=1, keepdims=True)
    lse = xp.log(xp.exp(logits - top).sum(axis=1)) + top[:, 0]
    out[...] = (lse - logits[xp.arange(labels.shape[0]), labels]).mean()


def cross_entropy_grad(logits, labels, out):
    xp = cupool.array_module(logits)
    e = xp.exp(logits - logits.max(axis=1, keepdims=True))
    out[...] = e / e.sum(axis=1, keepdims=True)
    out[xp.arange(labels.shape[0]), labels] -= 1
    out /= labels.shape[0]


def weight_grad(h, dz, out):
    cupool.array_module(h).matmul(h.T, dz, out=out)


def bias_grad(dz, out):
    cupool.array_module(dz).sum(dz, axis=0, out=out)


def input_grad(dz, w, out):
    cupool.array_module(dz).matmul(dz, w.T, out=out)


def relu_grad(dh, z, out):
    xp = cupool.array_module(dh)
    xp.multiply(dh, z > 0, out=out)


def sgd(grad, param):
    param -= LEARNING_RATE * grad


# -- the model and the data ---------------------------------------------------------------
def initial_parameters(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    sizes = [FEATURES] + [HIDDEN] * (LAYERS - 1) + [CLASSES]
    params = {}
    for layer, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        scale = np.sqrt(2.0 / fan_in)
        params[f"w{layer}"] = (rng.standard_normal((fan_in, fan_out)) * scale).astype(np.float32)
        params[f"b{layer}"] = np.zeros(fan_out, np.float32)
    return params


def batches(steps: int, seed: int = 1) -> list:
    """``steps`` batches of (features, labels) from fixed Gaussian clusters."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32) * 2
    out = []
    for _ in range(steps):
        labels = rng.integers(0, CLASSES, BATCH).astype(np.int32)
        x = centers[labels] + rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
        out.append((x.astype(np.float32), labels))
    return out


def train_step(it, p: dict, x, labels):
    """One SGD step declared on iteration ``it``; returns the fetched loss."""
    f32 = "float32"
    h, zs, hs = it.input(x, name="x"), [], []
    labels_t = it.input(labels, name="labels")
    for layer in range(LAYERS):
        width = p[f"w{layer}"].shape[1]
        hs.append(h)
        z = it.op(linear, h, p[f"w{layer}"], p[f"b{layer}"], out=((BATCH, width), f32),
                  name=f"fc{layer}")
        zs.append(z)
        h = it.op(relu, z, out=((BATCH, width), f32), name=f"relu{layer}") \
            if layer < LAYERS - 1 else z
    loss = it.op(cross_entropy, h, labels_t, out=((), f32), name="loss")
    dz = it.op(cross_entropy_grad, h, labels_t, out=h, name="dlogits")
    for layer in reversed(range(LAYERS)):
        w, b = p[f"w{layer}"], p[f"b{layer}"]
        dw = it.op(weight_grad, hs[layer], dz, out=w, name=f"dw{layer}")
        db = it.op(bias_grad, dz, out=b, name=f"db{layer}")
        if layer > 0:
            dh = it.op(input_grad, dz, w, out=hs[layer], name=f"dh{layer}")
            dz = it.op(relu_grad, dh, zs[layer - 1], out=dh, name=f"dz{layer - 1}")
        it.op(sgd, dw, updates=[w], name=f"sgd_w{layer}")
        it.op(sgd, db, updates=[b], name=f"sgd_b{layer}")
    return it.fetch(loss)


def register(session, seed: int = 0) -> dict:
    """The parameters, registered on ``session`` (SGD keeps no other state)."""
    return {name: session.register(name, value)
            for name, value in initial_parameters(seed).items()}


def train(session, steps: int, seed: int = 0) -> tuple[list, dict]:
    """Train for ``steps`` on ``session`` (a ``cupool.Session`` or ``cupool.EagerSession``);
    returns the losses and the final parameters (host arrays)."""
    params = register(session, seed)
    losses = []
    for x, labels in batches(steps):
        with session.iteration() as it:
            loss = train_step(it, params, x, labels)
        losses.append(float(loss.value))
    return losses, {name: session.read(t) for name, t in params.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="emulated", choices=["auto", "emulated", "cuda"])
    parser.add_argument("--budget", default="50%")
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args(argv)
    with cupool.Session(args.budget, device=args.device) as session:
        losses, params = train(session, args.steps)
        for step, (loss, report) in enumerate(zip(losses, session.reports, strict=True)):
            print(f"step {step}: loss {loss:.4f} ({report.mode}, device peak "
                  f"{report.device_peak_bytes} B of {report.budget_bytes} B, "
                  f"late prefetches {report.late_prefetches})")
        print(f"program peak {session.peak_bytes} B, budget {session.budget_bytes} B, "
              f"plan: {len(session.plan.actions) if session.plan else 0} swap/recompute "
              f"actions")
        xp = session.xp
    with cupool.EagerSession(xp) as eager:
        reference_losses, reference = train(eager, args.steps)
    same = all(np.array_equal(params[k], reference[k]) for k in reference)
    print(f"loss decreased: {'yes' if losses[-1] < losses[0] else 'no'}")
    print(f"parameters bitwise identical to the run without cupool: {'yes' if same else 'no'}")
    return 0 if same and losses == reference_losses else 1


if __name__ == "__main__":
    raise SystemExit(main())
