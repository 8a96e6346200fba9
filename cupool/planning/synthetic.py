"""Seeded synthetic offset-assignment problems, for scale tests, benchmarks and properties.

Every generator is a pure function of its arguments: same arguments (seed included) →
the same :class:`~cupool.planning.problem.StaticProblem`, bit for bit (NumPy's
``default_rng(seed)``). Lifetimes are half-open ``[start, end)`` op intervals, sizes bytes.

=====================  ===========================================================================
generator              shape
=====================  ===========================================================================
:func:`random_problem` ``n`` short-lived buffers scattered over a long time axis (few live at once):
                       the 100,000-buffer scale test of the greedy solvers
:func:`lstm_problem`   one unrolled LSTM training step: long-lived forward activations freed by
                       their backward step, short workspaces, gradients, persistent weights
:func:`lstm_trace`     the same network as a full trace: ops with roofline durations, every
                       buffer's uses, persistent weights, gradients and Adam moments
:func:`small_problem`  a handful of buffers on a short axis, every lifetime shape (full horizon,
                       one op, nested, touching): the property tests' family
=====================  ===========================================================================
"""

from __future__ import annotations

import numpy as np

from cupool.core.vocabulary import PERSISTENT, Buffer, Device, Op, Trace
from cupool.planning.problem import StaticProblem


def random_problem(n: int, seed: int = 0, *, mean_lifetime: float = 8.0,
                   live_at_once: float = 32.0, min_size: int = 256,
                   max_size: int = 1 << 24, name: str = "") -> StaticProblem:
    """``n`` short-lived buffers with random starts, lifetimes and log-uniform sizes.

    Shape: the time axis has ``num_ops = ceil(n * mean_lifetime / live_at_once)`` ops;
    starts are uniform on it, lifetimes are ``1 + geometric`` with mean ``mean_lifetime``
    (clipped at the axis end), sizes log-uniform in ``[min_size, max_size]`` rounded up to
    256 bytes. About ``live_at_once`` buffers are live at any op, so a solver that looks only
    at the buffers overlapping a new one does ``O(live_at_once)`` work per buffer, while one
    that scans everything placed so far does ``O(n)``::

        op:   0    1    2    3    4    5    6    7  ...
              [====)    [=========)    [==)
                   [==============)         [=========)
                        [==)   ...
    """
    rng = np.random.default_rng(seed)
    num_ops = max(1, int(np.ceil(n * mean_lifetime / live_at_once)))
    starts = rng.integers(0, num_ops, size=n)
    lifetimes = rng.geometric(1.0 / mean_lifetime, size=n)
    ends = np.minimum(starts + lifetimes, num_ops)
    log_sizes = rng.uniform(np.log(min_size), np.log(max_size), size=n)
    sizes = (np.ceil(np.exp(log_sizes) / 256.0) * 256).astype(np.int64)
    return StaticProblem.from_arrays(starts, ends, sizes, num_ops=num_ops,
                                     name=name or f"random-{n}-seed{seed}")


def lstm_problem(steps: int = 200, layers: int = 4, seed: int = 0, *, batch: int = 32,
                 hidden: int = 1024, dtype_bytes: int = 4, name: str = "") -> StaticProblem:
    """One training step of a ``layers``-deep LSTM unrolled over ``steps`` time steps.

    The batch is a packed batch of ``batch`` sequences whose lengths are drawn from ``seed``
    (the longest is ``steps``), so step ``t`` runs ``b_t`` rows (non-increasing in ``t``) and
    sizes vary the way they do with ``pack_padded_sequence``. Ops, in order:

    - forward, for each step ``t`` and layer ``l``: *gates* (matmul into a ``4·b_t·H`` buffer,
      with a one-op workspace), *activate* (gate activations i, f, g, o), *cell* (c, tanh c, h);
    - backward, steps and layers reversed: *cell backward* (d gates, workspace, dh and dc
      carried to step ``t-1``, dx handed to the layer below), *weight gradient* (workspace);
    - one optimizer op.

    Lifetimes: each cell's saved activations (i, f, g, o, c, tanh c, h) live from their forward
    op until that cell's backward op, so the live set climbs through the forward pass and
    drains through the backward one (the classic triangle); the pre-activation gates and the
    workspaces live one or two ops; carried gradients live one backward cell; weights, their
    gradients and two Adam moments per layer span the whole step. Buffer count is
    ``15·steps·layers + 4·layers`` (12,016 at the defaults; 15,016 for ``steps=250``)::

        op:  fw(0,0) ... fw(T-1,L-1) | bw(T-1,L-1) ... bw(0,0) | adam
        h(0,0)   [=================================================)
        h(T-1,.)           [==========)
        weights  [=============================================================)
    """
    rng = np.random.default_rng(seed)
    lengths = np.sort(rng.integers(1, steps + 1, size=batch))[::-1]
    lengths[0] = steps
    rows = np.array([(lengths > t).sum() for t in range(steps)], dtype=np.int64)
    row_bytes = hidden * dtype_bytes
    starts: list[int] = []
    ends: list[int] = []
    sizes: list[int] = []

    def buffer(start: int, end: int, size: int) -> None:
        starts.append(start)
        ends.append(end)
        sizes.append(int(size))

    forward_ops = 3 * steps * layers
    backward_ops = 2 * steps * layers
    num_ops = forward_ops + backward_ops + 1

    def fw_op(t: int, layer: int, phase: int) -> int:
        return 3 * (t * layers + layer) + phase

    def bw_op(t: int, layer: int, phase: int) -> int:
        cell = (steps - 1 - t) * layers + (layers - 1 - layer)
        return forward_ops + 2 * cell + phase

    for t in range(steps):
        act = rows[t] * row_bytes
        for layer in range(layers):
            gates, activate, cell = (fw_op(t, layer, p) for p in range(3))
            backward = bw_op(t, layer, 0) + 1
            workspace = int(act * rng.uniform(0.5, 2.0)) // 256 * 256 + 256
            buffer(gates, gates + 1, workspace)            # matmul workspace
            buffer(gates, activate + 1, 4 * act)           # pre-activation gates
            for _ in range(4):                             # i, f, g, o (saved)
                buffer(activate, backward, act)
            for _ in range(3):                             # c, tanh c, h (saved)
                buffer(cell, backward, act)
    for t in reversed(range(steps)):
        act = rows[t] * row_bytes
        for layer in reversed(range(layers)):
            cell_bw, weight_bw = bw_op(t, layer, 0), bw_op(t, layer, 1)
            carried_end = bw_op(t - 1, layer, 0) + 1 if t > 0 else weight_bw + 1
            below_end = bw_op(t, layer - 1, 0) + 1 if layer > 0 else weight_bw + 1
            buffer(cell_bw, weight_bw + 1, 4 * act)        # d gates
            buffer(cell_bw, cell_bw + 1, act)              # workspace
            buffer(cell_bw, carried_end, act)              # dh to step t-1
            buffer(cell_bw, carried_end, act)              # dc to step t-1
            buffer(cell_bw, below_end, act)                # dx to the layer below
            buffer(weight_bw, weight_bw + 1, 2 * act)      # weight-gradient workspace
    weight_bytes = 4 * hidden * 2 * hidden * dtype_bytes
    for _ in range(layers):
        for _ in range(4):                                 # weights, gradients, two moments
            buffer(0, num_ops, weight_bytes)
    return StaticProblem.from_arrays(starts, ends, sizes, num_ops=num_ops,
                                     name=name or f"lstm-{steps}x{layers}-seed{seed}")


def small_problem(seed: int, n: int = 8, num_ops: int = 10, max_size: int = 16) -> StaticProblem:
    """``n`` buffers on a ``num_ops``-op axis with sizes in ``[1, max_size]``.

    Lifetimes are drawn from a mix that covers the cases solvers get wrong: one op, random
    spans, and the full horizon ``[0, num_ops)`` (about one buffer in six), so that touching
    (``a.end == b.start``), nested and identical lifetimes all occur at small ``n``.
    """
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, num_ops, size=n)
    ends = starts + 1 + rng.integers(0, num_ops - starts)
    full = rng.random(n) < 1 / 6
    starts[full] = 0
    ends[full] = num_ops
    sizes = rng.integers(1, max_size + 1, size=n)
    return StaticProblem.from_arrays(starts, ends, sizes, num_ops=num_ops,
                                     name=f"small-{n}-seed{seed}")


LSTM_PEAK_FLOPS = 66.9e12
"""The generator's roofline: dense FP32 peak (FLOP/s), HBM bytes/s, per-op launch µs and
efficiency of an H100-SXM-like device (the figures of the capture roofline's preset)."""
LSTM_HBM_BYTES_PER_S = 3.35e12
LSTM_LAUNCH_US = 4.0
LSTM_EFFICIENCY = 0.7


class _TraceBuilder:
    """Ops appended in order; each op names the buffers it uses (reads or writes). A
    temporary buffer lives from its first use to one past its last; a persistent one spans
    the step. Durations follow the roofline (``LSTM_*``) from the op's FLOPs and the bytes
    of the buffers it touches."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.sizes: list[int] = []
        self.kinds: list[str] = []
        self.names: list[str] = []
        self.uses: list[list[int]] = []

    def buffer(self, size: int, name: str, kind: str = "temporary") -> int:
        self.sizes.append(int(size))
        self.kinds.append(kind)
        self.names.append(name)
        self.uses.append([])
        return len(self.sizes) - 1

    def op(self, name: str, phase: str, flops: int, used: list[int]) -> None:
        index = len(self.ops)
        moved = 0
        for b in dict.fromkeys(used):
            self.uses[b].append(index)
            moved += self.sizes[b]
        seconds = max(flops / LSTM_PEAK_FLOPS, moved / LSTM_HBM_BYTES_PER_S) / LSTM_EFFICIENCY
        self.ops.append(Op(name, round(seconds * 1e6 + LSTM_LAUNCH_US, 3), int(flops), phase))

    def trace(self, name: str) -> Trace:
        num_ops = len(self.ops)
        buffers = []
        for i, (size, kind, label, uses) in enumerate(zip(self.sizes, self.kinds, self.names,
                                                          self.uses, strict=True)):
            start, end = (0, num_ops) if kind == PERSISTENT else (uses[0], uses[-1] + 1)
            buffers.append(Buffer(i, size, start, end, tuple(uses), kind, label))
        return Trace(name, tuple(self.ops), tuple(buffers), source="synthetic lstm_trace",
                     device=Device("H100-SXM (roofline)", hbm_gbps=3350.0))


def lstm_trace(steps: int = 250, layers: int = 4, seed: int = 0, *, batch: int = 32,
               hidden: int = 1024, vocab: int = 8192, dtype_bytes: int = 4,
               name: str = "") -> Trace:
    """One training step of a ``layers``-deep LSTM language model over ``steps`` time steps.

    The batch is packed as in :func:`lstm_problem` (``b_t`` rows at step ``t``, lengths drawn
    from ``seed``). Ops, in order, with the buffers each uses:

    - per step ``t``: *embed* (embedding table → x); per layer ``l``: *gates* (matmul of
      ``[x, h_{t-1}]`` by the layer's weight into 4·b·H pre-activations), *activate* (i, f, g,
      o saved for backward), *cell* (c_t, tanh c_t, h_t, all saved); then *project* (top h
      by the output weight into b·V logits) and *loss* (logits → d logits, freed at once);
    - backward, steps and layers reversed: *project backward* (d logits → dh of the top
      layer; output-weight gradient), and per cell *cell backward* (the saved activations,
      dh from above and from step t+1, dc from t+1 → d gates, dc_t), *input backward*
      (d gates by the weight → dx for the layer below, dh for step t-1), *weight gradient*
      (d gates with x and h_{t-1} into the layer's gradient);
    - *adam*: one op per weight (weight, gradient, two moments).

    Each buffer lives from its producing op (its first use) to one past its last use, so
    activations climb through the forward pass and drain through the backward one. Op
    durations are the roofline of the op's FLOPs (2 per multiply-add) and the bytes of the
    buffers it uses. Buffer count is ``12·steps·layers + 4·steps + 4·(layers + 2)``
    (13,024 at the defaults)::

        op:  embed(0) gates(0,0) ... loss(T-1) | proj_bw(T-1) cell_bw(T-1,L-1) ... | adam
        h(0,0)      [=======================================================)
        logits(T-1)                       [=)
        weights     [==================================================================)
    """
    rng = np.random.default_rng(seed)
    lengths = np.sort(rng.integers(1, steps + 1, size=batch))[::-1]
    lengths[0] = steps
    rows = [int((lengths > t).sum()) for t in range(steps)]
    H, V, d = hidden, vocab, dtype_bytes
    g = _TraceBuilder()
    embedding = [g.buffer(V * H * d, f"embedding.{k}", PERSISTENT)
                 for k in ("weight", "grad", "m", "v")]
    weights = [[g.buffer(4 * H * 2 * H * d, f"lstm{li}.{k}", PERSISTENT)
                for k in ("weight", "grad", "m", "v")] for li in range(layers)]
    output = [g.buffer(H * V * d, f"output.{k}", PERSISTENT) for k in ("weight", "grad", "m", "v")]
    x: dict[tuple[int, int], int] = {}      # input of layer li at step t (h of layer li-1)
    h: dict[tuple[int, int], int] = {}
    c: dict[tuple[int, int], int] = {}
    saved: dict[tuple[int, int], list[int]] = {}
    for t in range(steps):
        b = rows[t]
        act = b * H * d
        x[t, 0] = g.buffer(act, f"x[{t}]")
        g.op(f"embed[{t}]", "fw", 0, [embedding[0], x[t, 0]])
        for li in range(layers):
            previous = [h[t - 1, li], c[t - 1, li]] if t > 0 else []
            gates = g.buffer(4 * act, f"gates[{t},{li}]")
            g.op(f"gates[{t},{li}]", "fw", 2 * b * 2 * H * 4 * H,
                 [x[t, li], *previous[:1], weights[li][0], gates])
            ifgo = [g.buffer(act, f"{k}[{t},{li}]") for k in "ifgo"]
            g.op(f"activate[{t},{li}]", "fw", 0, [gates, *ifgo])
            c[t, li], tanh_c, h[t, li] = (g.buffer(act, f"{k}[{t},{li}]")
                                           for k in ("c", "tanh_c", "h"))
            g.op(f"cell[{t},{li}]", "fw", 0, [*ifgo, *previous[1:], c[t, li], tanh_c, h[t, li]])
            saved[t, li] = [*ifgo, tanh_c]
            if li + 1 < layers:
                x[t, li + 1] = h[t, li]
        logits = g.buffer(b * V * d, f"logits[{t}]")
        g.op(f"project[{t}]", "fw", 2 * b * H * V, [h[t, layers - 1], output[0], logits])
        dlogits = g.buffer(b * V * d, f"dlogits[{t}]")
        g.op(f"loss[{t}]", "fw", 0, [logits, dlogits])
        saved[t, layers] = [dlogits]
    dh: dict[tuple[int, int], int] = {}
    dc: dict[tuple[int, int], int] = {}
    for t in reversed(range(steps)):
        b = rows[t]
        act = b * H * d
        top = g.buffer(act, f"dh_top[{t}]")
        g.op(f"project_bw[{t}]", "bw", 2 * 2 * b * H * V,
             [saved[t, layers][0], output[0], output[1], h[t, layers - 1], top])
        from_above = top
        for li in reversed(range(layers)):
            dgates = g.buffer(4 * act, f"dgates[{t},{li}]")
            dc_t = g.buffer(act, f"dc[{t},{li}]")
            carried = [dh[t + 1, li], dc[t + 1, li]] if t + 1 < steps else []
            previous_c = [c[t - 1, li]] if t > 0 else []
            g.op(f"cell_bw[{t},{li}]", "bw", 0,
                 [*saved[t, li], c[t, li], *previous_c, from_above, *carried, dgates, dc_t])
            dx = g.buffer(act, f"dx[{t},{li}]")
            dh[t, li] = g.buffer(act, f"dh[{t},{li}]")
            dc[t, li] = dc_t
            g.op(f"input_bw[{t},{li}]", "bw", 2 * b * 4 * H * 2 * H,
                 [dgates, weights[li][0], dx, dh[t, li]])
            previous_h = [h[t - 1, li]] if t > 0 else []
            g.op(f"weight_grad[{t},{li}]", "bw", 2 * b * 4 * H * 2 * H,
                 [dgates, x[t, li], *previous_h, weights[li][1]])
            from_above = dx
        g.op(f"embed_bw[{t}]", "bw", 0, [from_above, embedding[1]])
    for label, group in [("embedding", embedding), *((f"lstm{li}", w) for li, w in
                                                      enumerate(weights)), ("output", output)]:
        g.op(f"adam[{label}]", "opt", 8 * (g.sizes[group[0]] // d), group)
    return g.trace(name or f"lstm-lm-{steps}x{layers}-seed{seed}")
