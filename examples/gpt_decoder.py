"""A small GPT-style decoder trained with AdamW, each step a program run within a memory
budget.

Run: ``python examples/gpt_decoder.py`` (emulated device, 50% of the program's peak, 8
steps); ``--device cuda`` runs it unchanged on a GPU, ``--budget 70%`` picks another budget,
``--steps N`` trains longer. It prints the loss of every step, how the session ran it, and
whether the parameters are bitwise identical to the same program run without cupool.

The model: token embedding (a one-hot matmul, so its gradient is a matmul too: no
scatter-add, whose float atomics would make a GPU run irreproducible) plus learned
positions, ``LAYERS`` pre-norm blocks (layer norm, causal multi-head attention, residual,
layer norm, GELU MLP, residual), a final layer norm and a linear head; cross-entropy on the
next token; every gradient written out by hand. The data: sequences counting modulo the
vocabulary with a per-sequence stride (1, 2 or 3), drawn with a fixed seed, so the next
token is predictable from the context and the loss falls. Op bodies are array-module
generic (``xp = cupool.array_module(x)``).

This is the fused, hand-tuned version: each op body does the work of several array
calls (fewer ops, less host work per step). ``examples/decoder_arrays.py`` is the same model as
one plain array-code step function, ``step(xp, params, batch)``, run with NumPy and
under a session through its array namespace (``it.xp``).
"""

from __future__ import annotations

import argparse

import numpy as np

import cupool

BATCH, CONTEXT, VOCAB, WIDTH, HEADS, LAYERS, HIDDEN = 16, 32, 64, 64, 4, 2, 256
ROWS, HEAD = BATCH * CONTEXT, WIDTH // HEADS
LEARNING_RATE, BETAS, ADAM_EPS, WEIGHT_DECAY, LN_EPS = 3e-3, (0.9, 0.999), 1e-8, 0.01, 1e-5
GELU_C = float(np.sqrt(2 / np.pi))
F32 = "float32"

am = cupool.array_module


# -- forward ops ----------------------------------------------------------------------------
def one_hot(tokens, out):
    xp = am(tokens)
    out[...] = 0
    out[xp.arange(tokens.shape[0]), tokens] = 1


def embed(one_hot_tokens, wte, wpe, out):
    am(wte).matmul(one_hot_tokens, wte, out=out)
    out.reshape(BATCH, CONTEXT, WIDTH)[...] += wpe


def _normalized(x):
    xp = am(x)
    centered = x - x.mean(axis=1, keepdims=True)
    rstd = 1 / xp.sqrt((centered * centered).mean(axis=1, keepdims=True) + LN_EPS)
    return centered * rstd, rstd


def layer_norm(x, gain, bias, out):
    xhat, _ = _normalized(x)
    am(x).multiply(xhat, gain, out=out)
    out += bias


def matmul(x, w, out):
    am(x).matmul(x, w, out=out)


def linear(x, w, b, out):
    am(x).matmul(x, w, out=out)
    out += b


def linear_residual(x, w, b, residual, out):
    linear(x, w, b, out)
    out += residual


def _heads(qkv, part):
    """Part ``part`` (0 q, 1 k, 2 v) of ``qkv`` as (batch, heads, context, head)."""
    block = qkv[:, part * WIDTH:(part + 1) * WIDTH]
    return block.reshape(BATCH, CONTEXT, HEADS, HEAD).transpose(0, 2, 1, 3)


def attention_probs(qkv, out):
    xp = am(qkv)
    scores = _heads(qkv, 0) @ _heads(qkv, 1).transpose(0, 1, 3, 2) / np.float32(np.sqrt(HEAD))
    future = xp.triu(xp.ones((CONTEXT, CONTEXT), dtype=bool), 1)
    scores[..., future] = -np.inf
    scores -= scores.max(axis=-1, keepdims=True)
    e = xp.exp(scores)
    xp.divide(e, e.sum(axis=-1, keepdims=True), out=out)


def attention_out(probs, qkv, out):
    mixed = probs @ _heads(qkv, 2)
    out[...] = mixed.transpose(0, 2, 1, 3).reshape(ROWS, WIDTH)


def gelu(h, out):
    xp = am(h)
    out[...] = 0.5 * h * (1 + xp.tanh(GELU_C * (h + 0.044715 * h ** 3)))


def cross_entropy(logits, targets, out):
    xp = am(logits)
    top = logits.max(axis=1, keepdims=True)
    lse = xp.log(xp.exp(logits - top).sum(axis=1)) + top[:, 0]
    out[...] = (lse - logits[xp.arange(targets.shape[0]), targets]).mean()


# -- backward ops ---------------------------------------------------------------------------
def cross_entropy_grad(logits, targets, out):
    xp = am(logits)
    e = xp.exp(logits - logits.max(axis=1, keepdims=True))
    out[...] = e / e.sum(axis=1, keepdims=True)
    out[xp.arange(targets.shape[0]), targets] -= 1
    out /= targets.shape[0]


def weight_grad(x, dy, out):
    am(x).matmul(x.T, dy, out=out)


def bias_grad(dy, out):
    am(dy).sum(dy, axis=0, out=out)


def input_grad(dy, w, out):
    am(dy).matmul(dy, w.T, out=out)


def add(a, b, out):
    am(a).add(a, b, out=out)


def gelu_grad(da, h, out):
    xp = am(h)
    t = xp.tanh(GELU_C * (h + 0.044715 * h ** 3))
    out[...] = da * (0.5 * (1 + t) + 0.5 * h * (1 - t * t) * GELU_C * (1 + 3 * 0.044715 * h * h))


def layer_norm_grad(dy, x, gain, out):
    xhat, rstd = _normalized(x)
    dxhat = dy * gain
    out[...] = rstd * (dxhat - dxhat.mean(axis=1, keepdims=True)
                       - xhat * (dxhat * xhat).mean(axis=1, keepdims=True))


def layer_norm_param_grads(dy, x, dgain, dbias):
    xp = am(x)
    xhat, _ = _normalized(x)
    xp.sum(dy * xhat, axis=0, out=dgain)
    xp.sum(dy, axis=0, out=dbias)


def attention_grad(d_out, probs, qkv, out):
    heads = d_out.reshape(BATCH, CONTEXT, HEADS, HEAD).transpose(0, 2, 1, 3)
    q, k, v = (_heads(qkv, part) for part in range(3))
    dv = probs.transpose(0, 1, 3, 2) @ heads
    dprobs = heads @ v.transpose(0, 1, 3, 2)
    dscores = probs * (dprobs - (dprobs * probs).sum(axis=-1, keepdims=True))
    dscores /= np.float32(np.sqrt(HEAD))
    for part, grad in enumerate((dscores @ k, dscores.transpose(0, 1, 3, 2) @ q, dv)):
        out[:, part * WIDTH:(part + 1) * WIDTH] = grad.transpose(0, 2, 1, 3).reshape(ROWS, WIDTH)


def position_grad(dx, out):
    am(dx).sum(dx.reshape(BATCH, CONTEXT, WIDTH), axis=0, out=out)


# -- AdamW --------------------------------------------------------------------------------
def tick(step):
    step += 1


def _adam(grad, step, param, m, v, decay):
    xp = am(param)
    b1, b2 = np.float32(BETAS[0]), np.float32(BETAS[1])
    t = step.astype(param.dtype)
    m *= b1
    m += (1 - b1) * grad
    v *= b2
    v += (1 - b2) * grad * grad
    update = (m / (1 - b1 ** t)) / (xp.sqrt(v / (1 - b2 ** t)) + np.float32(ADAM_EPS))
    if decay:
        update += np.float32(WEIGHT_DECAY) * param
    param -= np.float32(LEARNING_RATE) * update


def adamw(grad, step, param, m, v):
    """AdamW for a weight matrix (decoupled weight decay)."""
    _adam(grad, step, param, m, v, True)


def adam(grad, step, param, m, v):
    """Adam for a bias, a gain or an embedding row set (no weight decay)."""
    _adam(grad, step, param, m, v, False)


# -- the model and the data --------------------------------------------------------------
def initial_parameters(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)

    def normal(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    params = {"wte": normal(VOCAB, WIDTH), "wpe": normal(CONTEXT, WIDTH)}
    ones, zeros = (lambda n: np.ones(n, np.float32)), (lambda n: np.zeros(n, np.float32))
    for layer in range(LAYERS):
        params |= {
            f"ln1_g{layer}": ones(WIDTH), f"ln1_b{layer}": zeros(WIDTH),
            f"w_qkv{layer}": normal(WIDTH, 3 * WIDTH), f"b_qkv{layer}": zeros(3 * WIDTH),
            f"w_o{layer}": normal(WIDTH, WIDTH), f"b_o{layer}": zeros(WIDTH),
            f"ln2_g{layer}": ones(WIDTH), f"ln2_b{layer}": zeros(WIDTH),
            f"w_fc{layer}": normal(WIDTH, HIDDEN), f"b_fc{layer}": zeros(HIDDEN),
            f"w_out{layer}": normal(HIDDEN, WIDTH), f"b_out{layer}": zeros(WIDTH),
        }
    params |= {"lnf_g": np.ones(WIDTH, np.float32), "lnf_b": np.zeros(WIDTH, np.float32),
               "w_head": normal(WIDTH, VOCAB)}
    return params


def batches(steps: int, seed: int = 1) -> list:
    """``steps`` batches of (tokens, targets), each ``ROWS`` long: counting modulo ``VOCAB``
    from a random start with a random stride of 1, 2 or 3 per sequence."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        start = rng.integers(0, VOCAB, (BATCH, 1))
        stride = rng.integers(1, 4, (BATCH, 1))
        sequence = (start + stride * np.arange(CONTEXT + 1)) % VOCAB
        out.append((sequence[:, :-1].reshape(-1).astype(np.int32),
                    sequence[:, 1:].reshape(-1).astype(np.int32)))
    return out


def register(session, seed: int = 0) -> dict:
    """The parameters, their AdamW moments and the step count, registered on ``session``."""
    state = {}
    for name, value in initial_parameters(seed).items():
        state[name] = session.register(name, value)
        state[f"m.{name}"] = session.register(f"m.{name}", np.zeros_like(value))
        state[f"v.{name}"] = session.register(f"v.{name}", np.zeros_like(value))
    state["step"] = session.register("step", np.zeros((), np.float32))
    return state


def _block_forward(it, s, layer, x):
    ln1 = it.op(layer_norm, x, s[f"ln1_g{layer}"], s[f"ln1_b{layer}"], out=x, name=f"ln1.{layer}")
    qkv = it.op(linear, ln1, s[f"w_qkv{layer}"], s[f"b_qkv{layer}"],
                out=((ROWS, 3 * WIDTH), F32), name=f"qkv.{layer}")
    probs = it.op(attention_probs, qkv, out=((BATCH, HEADS, CONTEXT, CONTEXT), F32),
                  name=f"probs.{layer}")
    mixed = it.op(attention_out, probs, qkv, out=x, name=f"attn.{layer}")
    x1 = it.op(linear_residual, mixed, s[f"w_o{layer}"], s[f"b_o{layer}"], x, out=x,
               name=f"proj.{layer}")
    ln2 = it.op(layer_norm, x1, s[f"ln2_g{layer}"], s[f"ln2_b{layer}"], out=x,
                name=f"ln2.{layer}")
    h = it.op(linear, ln2, s[f"w_fc{layer}"], s[f"b_fc{layer}"], out=((ROWS, HIDDEN), F32),
              name=f"fc.{layer}")
    a = it.op(gelu, h, out=h, name=f"gelu.{layer}")
    x2 = it.op(linear_residual, a, s[f"w_out{layer}"], s[f"b_out{layer}"], x1, out=x,
               name=f"mlp.{layer}")
    return x2, (x, ln1, qkv, probs, mixed, x1, ln2, h, a)


def _linear_backward(it, s, grads, x, dy, w, b, name, need_input=True):
    grads[w] = it.op(weight_grad, x, dy, out=s[w], name=f"d{w}")
    grads[b] = it.op(bias_grad, dy, out=s[b], name=f"d{b}")
    return it.op(input_grad, dy, s[w], out=x, name=f"d{name}") if need_input else None


def _layer_norm_backward(it, s, grads, dy, x, gain, bias, residual_grad):
    grads[gain], grads[bias] = it.op(layer_norm_param_grads, dy, x, outputs=[s[gain], s[bias]],
                                     name=f"d{gain}")
    dx = it.op(layer_norm_grad, dy, x, s[gain], out=x, name=f"dx.{gain}")
    return it.op(add, dx, residual_grad, out=x, name=f"sum.{gain}")


def _block_backward(it, s, grads, layer, saved, dx2):
    x, ln1, qkv, probs, mixed, x1, ln2, h, a = saved
    da = _linear_backward(it, s, grads, a, dx2, f"w_out{layer}", f"b_out{layer}", f"a{layer}")
    dh = it.op(gelu_grad, da, h, out=h, name=f"dgelu.{layer}")
    dln2 = _linear_backward(it, s, grads, ln2, dh, f"w_fc{layer}", f"b_fc{layer}",
                            f"ln2.{layer}")
    dx1 = _layer_norm_backward(it, s, grads, dln2, x1, f"ln2_g{layer}", f"ln2_b{layer}", dx2)
    dmixed = _linear_backward(it, s, grads, mixed, dx1, f"w_o{layer}", f"b_o{layer}",
                              f"attn{layer}")
    dqkv = it.op(attention_grad, dmixed, probs, qkv, out=qkv, name=f"dattn.{layer}")
    dln1 = _linear_backward(it, s, grads, ln1, dqkv, f"w_qkv{layer}", f"b_qkv{layer}",
                            f"ln1.{layer}")
    return _layer_norm_backward(it, s, grads, dln1, x, f"ln1_g{layer}", f"ln1_b{layer}", dx1)


def train_step(it, s: dict, tokens, targets):
    """One AdamW step of the decoder declared on iteration ``it``; returns the fetched loss."""
    tokens_t, targets_t = it.input(tokens, name="tokens"), it.input(targets, name="targets")
    hot = it.op(one_hot, tokens_t, out=((ROWS, VOCAB), F32), name="one_hot")
    x = it.op(embed, hot, s["wte"], s["wpe"], out=((ROWS, WIDTH), F32), name="embed")
    saved = []
    for layer in range(LAYERS):
        x, kept = _block_forward(it, s, layer, x)
        saved.append(kept)
    final = it.op(layer_norm, x, s["lnf_g"], s["lnf_b"], out=x, name="lnf")
    logits = it.op(matmul, final, s["w_head"], out=((ROWS, VOCAB), F32), name="head")
    loss = it.op(cross_entropy, logits, targets_t, out=((), F32), name="loss")
    dlogits = it.op(cross_entropy_grad, logits, targets_t, out=logits, name="dlogits")
    grads = {"w_head": it.op(weight_grad, final, dlogits, out=s["w_head"], name="dw_head")}
    dfinal = it.op(input_grad, dlogits, s["w_head"], out=final, name="dfinal")
    grads["lnf_g"], grads["lnf_b"] = it.op(layer_norm_param_grads, dfinal, x,
                                           outputs=[s["lnf_g"], s["lnf_b"]], name="dlnf")
    dx = it.op(layer_norm_grad, dfinal, x, s["lnf_g"], out=x, name="dx.lnf")
    for layer in reversed(range(LAYERS)):
        dx = _block_backward(it, s, grads, layer, saved[layer], dx)
    grads["wte"] = it.op(weight_grad, hot, dx, out=s["wte"], name="dwte")
    grads["wpe"] = it.op(position_grad, dx, out=s["wpe"], name="dwpe")
    it.op(tick, updates=[s["step"]], name="tick")
    for name, grad in grads.items():
        rule = adamw if name.startswith("w_") else adam
        it.op(rule, grad, s["step"], updates=[s[name], s[f"m.{name}"], s[f"v.{name}"]],
              name=f"adam.{name}")
    return it.fetch(loss)


def train(session, steps: int, seed: int = 0) -> tuple[list, dict]:
    """Train for ``steps`` on ``session`` (a ``cupool.Session`` or ``cupool.EagerSession``);
    returns the losses and the final parameters (host arrays)."""
    state = register(session, seed)
    losses = []
    for tokens, targets in batches(steps):
        with session.iteration() as it:
            loss = train_step(it, state, tokens, targets)
        losses.append(float(loss.value))
    return losses, {name: session.read(t) for name, t in state.items()}


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
