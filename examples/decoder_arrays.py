"""A small GPT-style decoder trained with AdamW, its step written once as plain array code
and run both without cupool (NumPy) and under ``cupool.Session`` within a memory budget.

Run: ``python examples/decoder_arrays.py`` (emulated device, 90%, 70% and 50% of the
program's peak, 4 steps); ``--budget 60%`` picks one budget, ``--steps N`` trains longer,
``--device cuda`` runs the session on a GPU (and the reference with CuPy). It prints the
loss of every step, how the session ran it, and whether the parameters are bitwise
identical to the same function run directly on plain arrays.

:func:`step` is ``step(xp, params, batch)`` (``xp``: ``numpy``/``cupy``, or ``it.xp``
under a session; ``params``: arrays or registered tensors, updated in place; ``batch``:
host tokens and targets, brought in with ``xp.asarray``). The model is the one of
``examples/gpt_decoder.py``: token embedding (a ``take`` forward; its gradient a one-hot
matmul, so no scatter-add, whose float atomics would make a GPU run irreproducible) plus
learned positions, pre-norm blocks (layer norm, causal multi-head attention, residual,
layer norm, GELU MLP, residual), a final layer norm and a linear head, cross-entropy on the
next token, every gradient by hand, AdamW. ``examples/gpt_decoder.py`` is the same model
written with explicit ops whose bodies fuse several of these calls each: the hand-tuned
version (about a fifth of the ops, so less host work per step).
"""

from __future__ import annotations

import argparse

import numpy as np

import cupool

BATCH, CONTEXT, VOCAB, WIDTH, HEADS, LAYERS, HIDDEN = 16, 32, 64, 64, 4, 2, 256
LEARNING_RATE, BETAS, ADAM_EPS, WEIGHT_DECAY, LN_EPS = 3e-3, (0.9, 0.999), 1e-8, 0.01, 1e-5
GELU_C = float(np.sqrt(2 / np.pi))
BUDGETS = ("90%", "70%", "50%")
B1, B2 = np.float32(BETAS[0]), np.float32(BETAS[1])
_BLOCK = ("ln1_g", "ln1_b", "w_qkv", "b_qkv", "w_o", "b_o", "ln2_g", "ln2_b", "w_fc", "b_fc",
          "w_out", "b_out")


# -- the step ---------------------------------------------------------------------------------
def _normalized(xp, x):
    centered = x - xp.mean(x, axis=1, keepdims=True)
    rstd = 1 / xp.sqrt(xp.mean(centered * centered, axis=1, keepdims=True) + LN_EPS)
    return centered * rstd, rstd


def _layer_norm(xp, x, gain, bias):
    return _normalized(xp, x)[0] * gain + bias


def _layer_norm_backward(xp, dy, x, gain, grads, names):
    xhat, rstd = _normalized(xp, x)
    grads[names[0]] = xp.sum(dy * xhat, axis=0)
    grads[names[1]] = xp.sum(dy, axis=0)
    dxhat = dy * gain
    return rstd * (dxhat - xp.mean(dxhat, axis=1, keepdims=True)
                   - xhat * xp.mean(dxhat * xhat, axis=1, keepdims=True))


def _heads(qkv, part, shape):
    """Part ``part`` (0 q, 1 k, 2 v) of ``qkv`` as (batch, heads, context, head): a view."""
    batch, context, heads, head = shape
    width = heads * head
    block = qkv[:, part * width:(part + 1) * width]
    return block.reshape(batch, context, heads, head).transpose(0, 2, 1, 3)


def _merge(xp, x, rows):
    """(batch, heads, context, head) back to (rows, width)."""
    return x.transpose(0, 2, 1, 3).reshape(rows, -1)


def _gelu(xp, h):
    return 0.5 * h * (1 + xp.tanh(GELU_C * (h + 0.044715 * h ** 3)))


def _gelu_grad(xp, da, h):
    t = xp.tanh(GELU_C * (h + 0.044715 * h ** 3))
    return da * (0.5 * (1 + t) + 0.5 * h * (1 - t * t) * GELU_C * (1 + 3 * 0.044715 * h * h))


def _adam(xp, params, name, grad, c1, c2, decay):
    param, m, v = params[name], params[f"m.{name}"], params[f"v.{name}"]
    m *= B1
    m += (1 - B1) * grad
    v *= B2
    v += (1 - B2) * grad * grad
    update = (m / c1) / (xp.sqrt(v / c2) + np.float32(ADAM_EPS))
    if decay:
        update += np.float32(WEIGHT_DECAY) * param
    param -= np.float32(LEARNING_RATE) * update


def step(xp, params: dict, batch) -> object:
    """One AdamW step of the decoder on ``batch`` (tokens, targets: (batch, context) ints);
    returns the loss."""
    tokens, targets = xp.asarray(batch[0]), xp.asarray(batch[1])
    batch_size, context = tokens.shape
    rows = batch_size * context
    vocab, width = params["wte"].shape
    layers = sum(1 for name in params if name.startswith("w_qkv"))
    shape = (batch_size, context, HEADS, width // HEADS)
    scale = np.float32(np.sqrt(width // HEADS))
    flat_tokens, flat_targets = tokens.reshape(rows), targets.reshape(rows)
    embedded = xp.take(params["wte"], flat_tokens, axis=0).reshape(batch_size, context, width)
    x = (embedded + params["wpe"]).reshape(rows, width)
    causal = xp.arange(context)[:, None] >= xp.arange(context)[None, :]
    saved = []
    for layer in range(layers):  # forward
        p = {name: params[f"{name}{layer}"] for name in _BLOCK}
        ln1 = _layer_norm(xp, x, p["ln1_g"], p["ln1_b"])
        qkv = ln1 @ p["w_qkv"] + p["b_qkv"]
        scores = _heads(qkv, 0, shape) @ _heads(qkv, 1, shape).transpose(0, 1, 3, 2) / scale
        scores = xp.where(causal, scores, -np.inf)
        e = xp.exp(scores - xp.max(scores, axis=-1, keepdims=True))
        probs = e / xp.sum(e, axis=-1, keepdims=True)
        mixed = _merge(xp, probs @ _heads(qkv, 2, shape), rows)
        x1 = mixed @ p["w_o"] + p["b_o"] + x
        ln2 = _layer_norm(xp, x1, p["ln2_g"], p["ln2_b"])
        h = ln2 @ p["w_fc"] + p["b_fc"]
        a = _gelu(xp, h)
        x2 = a @ p["w_out"] + p["b_out"] + x1
        saved.append((x, ln1, qkv, probs, mixed, x1, ln2, h, a))
        x = x2
    final = _layer_norm(xp, x, params["lnf_g"], params["lnf_b"])
    logits = final @ params["w_head"]
    top = xp.max(logits, axis=1, keepdims=True)
    e = xp.exp(logits - top)
    total = xp.sum(e, axis=1, keepdims=True)
    one_hot = (flat_targets[:, None] == xp.arange(vocab)).astype(xp.float32)
    loss = xp.mean(xp.log(total[:, 0]) + top[:, 0] - xp.sum(logits * one_hot, axis=1))
    dlogits = (e / total - one_hot) / rows  # backward
    grads = {"w_head": final.T @ dlogits}
    dfinal = dlogits @ params["w_head"].T
    dx = _layer_norm_backward(xp, dfinal, x, params["lnf_g"], grads, ("lnf_g", "lnf_b"))
    for layer in reversed(range(layers)):
        x, ln1, qkv, probs, mixed, x1, ln2, h, a = saved[layer]
        n = str(layer)
        grads["w_out" + n], grads["b_out" + n] = a.T @ dx, xp.sum(dx, axis=0)
        dh = _gelu_grad(xp, dx @ params["w_out" + n].T, h)
        grads["w_fc" + n], grads["b_fc" + n] = ln2.T @ dh, xp.sum(dh, axis=0)
        dln2 = dh @ params["w_fc" + n].T
        dx1 = _layer_norm_backward(xp, dln2, x1, params["ln2_g" + n], grads,
                                   ("ln2_g" + n, "ln2_b" + n)) + dx
        grads["w_o" + n], grads["b_o" + n] = mixed.T @ dx1, xp.sum(dx1, axis=0)
        dmixed = (dx1 @ params["w_o" + n].T).reshape(shape).transpose(0, 2, 1, 3)
        q, k, v = (_heads(qkv, part, shape) for part in range(3))
        dv = probs.transpose(0, 1, 3, 2) @ dmixed
        dprobs = dmixed @ v.transpose(0, 1, 3, 2)
        dscores = probs * (dprobs - xp.sum(dprobs * probs, axis=-1, keepdims=True)) / scale
        parts = (dscores @ k, dscores.transpose(0, 1, 3, 2) @ q, dv)
        dqkv = xp.concatenate([_merge(xp, part, rows) for part in parts], axis=1)
        grads["w_qkv" + n], grads["b_qkv" + n] = ln1.T @ dqkv, xp.sum(dqkv, axis=0)
        dln1 = dqkv @ params["w_qkv" + n].T
        dx = _layer_norm_backward(xp, dln1, x, params["ln1_g" + n], grads,
                                  ("ln1_g" + n, "ln1_b" + n)) + dx1
    token_hot = (flat_tokens[:, None] == xp.arange(vocab)).astype(xp.float32)
    grads["wte"] = token_hot.T @ dx
    grads["wpe"] = xp.sum(dx.reshape(batch_size, context, width), axis=0)
    params["step"] += 1  # AdamW
    c1, c2 = 1 - B1 ** params["step"], 1 - B2 ** params["step"]
    for name, grad in grads.items():
        _adam(xp, params, name, grad, c1, c2, name.startswith("w_"))
    return loss


# -- the model and the data -------------------------------------------------------------------
def initial_parameters(seed: int = 0, vocab: int = VOCAB, context: int = CONTEXT,
                       width: int = WIDTH, layers: int = LAYERS, hidden: int = HIDDEN) -> dict:
    """The parameters, their AdamW moments (``m.``, ``v.``) and the step count."""
    rng = np.random.default_rng(seed)

    def normal(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    ones, zeros = (lambda n: np.ones(n, np.float32)), (lambda n: np.zeros(n, np.float32))
    params = {"wte": normal(vocab, width), "wpe": normal(context, width)}
    for layer in range(layers):
        params |= {
            f"ln1_g{layer}": ones(width), f"ln1_b{layer}": zeros(width),
            f"w_qkv{layer}": normal(width, 3 * width), f"b_qkv{layer}": zeros(3 * width),
            f"w_o{layer}": normal(width, width), f"b_o{layer}": zeros(width),
            f"ln2_g{layer}": ones(width), f"ln2_b{layer}": zeros(width),
            f"w_fc{layer}": normal(width, hidden), f"b_fc{layer}": zeros(hidden),
            f"w_out{layer}": normal(hidden, width), f"b_out{layer}": zeros(width),
        }
    params |= {"lnf_g": ones(width), "lnf_b": zeros(width), "w_head": normal(width, vocab)}
    state = dict(params)
    for name, value in params.items():
        state[f"m.{name}"], state[f"v.{name}"] = np.zeros_like(value), np.zeros_like(value)
    state["step"] = np.zeros((), np.float32)
    return state


def batches(steps: int, seed: int = 1, batch: int = BATCH, context: int = CONTEXT,
            vocab: int = VOCAB) -> list:
    """``steps`` batches of (tokens, targets), (batch, context) each: counting modulo
    ``vocab`` from a random start with a random stride of 1, 2 or 3 per sequence."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        start = rng.integers(0, vocab, (batch, 1))
        stride = rng.integers(1, 4, (batch, 1))
        sequence = (start + stride * np.arange(context + 1)) % vocab
        out.append((sequence[:, :-1].astype(np.int32), sequence[:, 1:].astype(np.int32)))
    return out


def train_directly(xp, params: dict, data: list) -> tuple[list, dict]:
    """:func:`step` on plain arrays of ``xp`` (the program without cupool): the losses and
    the final state (host arrays)."""
    params = {name: xp.asarray(value).copy() for name, value in params.items()}
    losses = [float(step(xp, params, batch)) for batch in data]
    return losses, {name: _host(value) for name, value in params.items()}


def _host(array) -> np.ndarray:
    return array.get() if hasattr(array, "get") else np.array(array)


def train(session, params: dict, data: list) -> tuple[list, dict]:
    """:func:`step` under ``session`` (a ``cupool.Session`` or ``cupool.EagerSession``)
    through its array namespace: the losses and the final state (host arrays)."""
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
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args(argv)
    params, data = initial_parameters(), batches(args.steps)
    same_everywhere = True
    for budget in args.budget or BUDGETS:
        with cupool.Session(budget, device=args.device) as session:
            losses, trained = train(session, params, data)
            reports = session.reports
            peak, budget_bytes, xp = session.peak_bytes, session.budget_bytes, session.xp
            ops = len(session.trace.ops)
        reference_losses, reference = train_directly(xp, params, data)
        same = losses == reference_losses and all(
            np.array_equal(trained[k], reference[k]) for k in reference)
        same_everywhere &= same
        print(f"budget {budget}: program peak {peak} B, budget {budget_bytes} B, {ops} ops")
        for number, (loss, report) in enumerate(zip(losses, reports, strict=True)):
            print(f"  step {number}: loss {loss:.4f} ({report.mode}, device peak "
                  f"{report.device_peak_bytes} B, late prefetches {report.late_prefetches})")
        print(f"  parameters bitwise identical to the function run on plain arrays: "
              f"{'yes' if same else 'no'}")
    return 0 if same_everywhere else 1


if __name__ == "__main__":
    raise SystemExit(main())
