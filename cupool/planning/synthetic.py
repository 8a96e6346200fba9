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
:func:`small_problem`  a handful of buffers on a short axis, every lifetime shape (full horizon,
                       one op, nested, touching): the property tests' family
=====================  ===========================================================================
"""

from __future__ import annotations

import numpy as np

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
