"""Seeded trace shapes that budget planning must always plan, for tests and benchmarks.

Each generator is a pure function of its arguments (NumPy's ``default_rng(seed)``): the
same arguments give the same :class:`~cupool.core.vocabulary.Trace`, bit for bit. They
stress what the tuned shapes do not: ops much shorter than one copy's fixed cost, a few
buffers each near the budget, steps that are mostly persistent state, and inference
traces that say nothing about writes.

=========================  =====================================================================
generator                  shape
=========================  =====================================================================
:func:`recurrent_trace`    a recurrent cell unrolled over ``steps``: forward, backward through
                           time, an update of every parameter; hundreds of ops of tens of µs
:func:`near_budget_trace`  a chain of ops, a few of them on buffers each near the peak
:func:`persistent_heavy`   a step whose bytes are mostly parameters and optimizer state,
                           each read in forward and backward and written by its update
:func:`inference_trace`    a forward pass over read-only-in-fact weights whose ``writes`` are
                           unknown (``None``), as PyTorch snapshots and CuPy hook logs give
:func:`tiny_trace`         a few ops and buffers of one size: every plan can be tried
=========================  =====================================================================
"""

from __future__ import annotations

import numpy as np

from cupool.core.vocabulary import PERSISTENT, Buffer, Op, Trace


class _Builder:
    """Ops appended in order, each naming the buffers it reads and writes; a temporary
    lives from its first use to one past its last, a persistent one spans the step."""

    def __init__(self, rng: np.random.Generator, op_us: tuple[float, float]) -> None:
        self.rng, self.op_us = rng, op_us
        self.ops: list[Op] = []
        self.sizes: list[int] = []
        self.kinds: list[str] = []
        self.uses: list[list[int]] = []
        self.writes: list[list[int]] = []
        self.known_writes: list[bool] = []

    def buffer(self, size: int, persistent: bool = False, known_writes: bool = True) -> int:
        self.sizes.append(int(size))
        self.kinds.append(PERSISTENT if persistent else "temporary")
        self.uses.append([])
        self.writes.append([])
        self.known_writes.append(known_writes)
        return len(self.sizes) - 1

    def op(self, name: str, phase: str, reads=(), writes=()) -> None:
        index = len(self.ops)
        for b in dict.fromkeys([*reads, *writes]):
            self.uses[b].append(index)
        for b in dict.fromkeys(writes):
            self.writes[b].append(index)
        low, high = self.op_us
        self.ops.append(Op(name, round(float(self.rng.uniform(low, high)), 3), phase=phase))

    def trace(self, name: str) -> Trace:
        n = len(self.ops)
        buffers = []
        for i, (size, kind, uses) in enumerate(zip(self.sizes, self.kinds, self.uses,
                                                   strict=True)):
            if not uses:
                continue
            start, end = (0, n) if kind == PERSISTENT else (uses[0], uses[-1] + 1)
            writes = tuple(self.writes[i]) if self.known_writes[i] else None
            buffers.append(Buffer(i, size, start, end, tuple(uses), kind, writes=writes))
        return Trace(name, tuple(self.ops), tuple(buffers), source="cupool.planning.shapes")


def recurrent_trace(steps: int = 56, seed: int = 0, *, layers: int = 1, batch: int = 64,
                    inputs: int = 512, hidden: int = 256,
                    op_us: tuple[float, float] = (15.0, 60.0), dtype_bytes: int = 4) -> Trace:
    """A stack of ``layers`` recurrent cells ``h_t = tanh(x_t W + h_{t-1} U + b)`` unrolled
    over ``steps``, as a program recorded op by op gives it (ops of ``op_us`` µs each, drawn
    from ``seed``; writes known; ``steps · (1 + 6 · layers) + 4 · layers + 1`` ops).

    Forward per step: *load* ``x_t``; per layer *project* (``x W``) and *cell*
    (``+ h U + b``, tanh → ``h_t``, the next layer's input). Backward per step and layer,
    reversed: *tanh backward* (``dz``), *dW* and *dU* (accumulated into the gradients),
    *dx* (``dz W^T``, the layer below's ``dh``) and *dh* (``dz U^T``, the step before's).
    Then one SGD *update* per parameter and one *zero_grad* per layer. Every layer input
    and ``h_t`` is saved for backward, so the peak is the activations of all steps; the
    parameters are read at every step::

        op:   load(0) project(0,0) cell(0,0) ... | tanh_bw(T-1,L-1) ... dh(0,0) | updates
        x_0   [==============================================================)
        W_0   [===================================================================)
    """
    rng = np.random.default_rng(seed)
    d = dtype_bytes
    g = _Builder(rng, op_us)
    widths = [inputs] + [hidden] * (layers - 1)
    params = [[g.buffer(widths[li] * hidden * d, persistent=True),
               g.buffer(hidden * hidden * d, persistent=True),
               g.buffer(hidden * d, persistent=True)] for li in range(layers)]
    grads = [[g.buffer(g.sizes[p], persistent=True) for p in layer] for layer in params]
    xs: dict[tuple[int, int], int] = {}
    hs: dict[tuple[int, int], int] = {}
    for t in range(steps):
        x = g.buffer(batch * inputs * d)
        g.op(f"load[{t}]", "fw", writes=[x])
        for li in range(layers):
            W, U, bias = params[li]
            xs[t, li] = x
            a = g.buffer(batch * hidden * d)
            g.op(f"project[{t},{li}]", "fw", reads=[x, W], writes=[a])
            h = g.buffer(batch * hidden * d)
            previous = [hs[t - 1, li]] if t else []
            g.op(f"cell[{t},{li}]", "fw", reads=[a, *previous, U, bias], writes=[h])
            hs[t, li] = h
            x = h
    dh_top = g.buffer(batch * hidden * d)
    g.op("loss", "fw", reads=[hs[steps - 1, layers - 1]], writes=[dh_top])
    carried: dict[int, int] = {}  # layer -> dh from the step after
    for t in reversed(range(steps)):
        from_above = dh_top if t == steps - 1 else None
        for li in reversed(range(layers)):
            W, U, _bias = params[li]
            dW, dU, db = grads[li]
            incoming = [b for b in (from_above, carried.get(li)) if b is not None]
            dz = g.buffer(batch * hidden * d)
            g.op(f"tanh_bw[{t},{li}]", "bw", reads=[*incoming, hs[t, li]], writes=[dz])
            g.op(f"dW[{t},{li}]", "bw", reads=[dz, xs[t, li]], writes=[dW, db])
            previous = [hs[t - 1, li]] if t else []
            g.op(f"dU[{t},{li}]", "bw", reads=[dz, *previous], writes=[dU])
            dx = g.buffer(batch * widths[li] * d)
            g.op(f"dx[{t},{li}]", "bw", reads=[dz, W], writes=[dx])
            dh = g.buffer(batch * hidden * d)
            g.op(f"dh[{t},{li}]", "bw", reads=[dz, U], writes=[dh])
            carried[li] = dh
            from_above = dx
    for li in range(layers):
        for p, grad in zip(params[li], grads[li], strict=True):
            g.op(f"update[{li}]", "opt", reads=[grad], writes=[p])
    for li in range(layers):
        g.op(f"zero_grad[{li}]", "opt", writes=grads[li])
    return g.trace(f"recurrent-{steps}x{layers}-seed{seed}")


MIB = 1 << 20


def near_budget_trace(seed: int = 0, *, ops: int = 27, big: int = 3, big_bytes: int = 312 * MIB,
                      small: int = 60, weights: int = 8,
                      op_us: tuple[float, float] = (200.0, 2000.0)) -> Trace:
    """A short fused training step with ``big`` buffers of ``big_bytes`` each (a fused
    recurrent layer's saved gates) made in the forward half and read once in the backward
    half, ``small`` temporaries of 1-64 MiB between, and ``weights`` persistent weights
    (8-64 MiB, read forward and backward, written by the last op). At 70% of the peak a
    big buffer is a large share of the budget, so where offsets leave no room for one the
    placement, not the bytes, is what fails::

        op:    0 ... 13 | 14 ... 25 | 26 (update)
        big_0  [===================)           made at a forward op, read at the mirror op
        w_k    [==================================)
    """
    rng = np.random.default_rng(seed)
    g = _Builder(rng, op_us)
    half = ops // 2
    made = {int(k): g.buffer(big_bytes) for k in rng.choice(half, size=big, replace=False)}
    temps = [(g.buffer(int(rng.integers(1, 65)) * MIB), int(rng.integers(0, ops - 1)))
             for _ in range(small)]
    spans = {b: (start, int(min(ops - 1, start + rng.integers(1, 6)))) for b, start in temps}
    params = [g.buffer(int(rng.integers(8, 65)) * MIB, persistent=True) for _ in range(weights)]
    for i in range(ops - 1):
        reads = [b for b, (start, end) in spans.items() if start < i <= end]
        writes = [b for b, (start, _end) in spans.items() if start == i]
        if i in made:
            writes.append(made[i])
        mirror = ops - 2 - i
        if mirror in made and i >= half:
            reads.append(made[mirror])
        layer = [params[i % weights]] if i < half else [params[(ops - 2 - i) % weights]]
        g.op(f"{'fw' if i < half else 'bw'}[{i}]", "fw" if i < half else "bw",
             reads=[*reads, *layer], writes=writes)
    g.op("update", "opt", writes=params)
    return g.trace(f"near-budget-{ops}x{big}-seed{seed}")


def persistent_heavy(seed: int = 0, *, layers: int = 12, weight_bytes: int = 16 * MIB,
                     activation_bytes: int = 2 * MIB,
                     op_us: tuple[float, float] = (30.0, 300.0)) -> Trace:
    """A training step that is mostly parameters and Adam state: per layer a weight (read
    forward and backward), its gradient (written backward, read by the update) and two
    moments (written by the update), each ``weight_bytes``; activations of
    ``activation_bytes`` saved forward for backward. Persistent state is over 80% of the
    peak, so under 70% of it the step must move state, not activations::

        op:    fw[0] ... fw[L-1] | bw[L-1] ... bw[0] | adam[0] ... adam[L-1]
        w_l    read              |  read             |  written
        m_l, v_l                                        written
    """
    rng = np.random.default_rng(seed)
    g = _Builder(rng, op_us)
    state = [[g.buffer(weight_bytes, persistent=True) for _ in range(4)] for _ in range(layers)]
    saved = []
    x = g.buffer(activation_bytes)
    g.op("input", "fw", writes=[x])
    for li in range(layers):
        out = g.buffer(activation_bytes)
        g.op(f"fw[{li}]", "fw", reads=[x, state[li][0]], writes=[out])
        saved.append(x)
        x = out
    grad = g.buffer(activation_bytes)
    g.op("loss", "fw", reads=[x], writes=[grad])
    for li in reversed(range(layers)):
        below = g.buffer(activation_bytes)
        weight, gradient = state[li][0], state[li][1]
        g.op(f"bw[{li}]", "bw", reads=[grad, saved[li], weight], writes=[below, gradient])
        grad = below
    for li in range(layers):
        weight, gradient, m, v = state[li]
        g.op(f"adam[{li}]", "opt", reads=[gradient], writes=[weight, m, v])
    return g.trace(f"persistent-heavy-{layers}-seed{seed}")


def inference_trace(seed: int = 0, *, layers: int = 40, weight_bytes: tuple[int, int] = (
                    MIB // 4, 8 * MIB), activation_bytes: tuple[int, int] = (MIB // 2, 12 * MIB),
                    op_us: tuple[float, float] = (5.0, 80.0)) -> Trace:
    """A batch-1 forward pass whose trace says nothing about writes (``writes`` unknown on
    every buffer, as PyTorch snapshots and CuPy hook logs give): per layer one weight
    (persistent, read once, in fact never written) and an output read by the next layer
    and, every fourth layer, by a residual add four layers on::

        op:    0   1   2   3   4   5 ...
        w_l        r                        (writes unknown: a copy out, unless read-only)
        y_0    [=======)           (+ residual [=================) )
    """
    rng = np.random.default_rng(seed)
    g = _Builder(rng, op_us)
    low, high = weight_bytes
    a_low, a_high = activation_bytes
    x = g.buffer(int(rng.integers(a_low, a_high)), known_writes=False)
    g.op("input", "fw", writes=[x])
    residual = x
    for li in range(layers):
        weight = g.buffer(int(rng.integers(low, high)), persistent=True, known_writes=False)
        out = g.buffer(int(rng.integers(a_low, a_high)), known_writes=False)
        reads = [x, weight] + ([residual] if li % 4 == 3 else [])
        g.op(f"layer[{li}]", "fw", reads=reads, writes=[out])
        if li % 4 == 3:
            residual = out
        x = out
    return g.trace(f"inference-{layers}-seed{seed}")


TINY_BYTES = 1000
"""The size of every buffer of :func:`tiny_trace`."""


def tiny_trace(seed: int = 0) -> Trace:
    """A step small enough to try every plan of (:mod:`cupool.sim.exhaustive`): three to
    five ops of 0-30 µs, two to four persistent buffers (read-only, or written at some of
    their uses) and up to two temporaries, every buffer :data:`TINY_BYTES` bytes::

        op:    0   1   2   3
        P_0        r       w      (uses drawn; writes among them, or none)
        T_4    [=======)          (made by its first op, read by some later ones)
    """
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 6))
    buffers = []
    for j in range(int(rng.integers(2, 5))):
        uses = tuple(sorted(int(u) for u in rng.choice(n, size=int(rng.integers(1, min(n, 3) + 1)),
                                                       replace=False)))
        writes = (() if rng.random() < 0.4
                  else tuple(u for u in uses if rng.random() < 0.6))
        buffers.append(Buffer(j, TINY_BYTES, 0, n, uses, PERSISTENT, writes=writes))
    for j in range(len(buffers), len(buffers) + int(rng.integers(0, 3))):
        start = int(rng.integers(0, n))
        uses = (start, *[u for u in range(start + 1, n) if rng.random() < 0.5])
        writes = tuple(u for u in uses if u == start or rng.random() < 0.3)
        buffers.append(Buffer(j, TINY_BYTES, start, uses[-1] + 1, uses, writes=writes))
    durations = [float(rng.choice([0.0, 5.0, 10.0, 20.0, 30.0])) for _ in range(n)]
    return Trace(f"tiny-seed{seed}", tuple(Op(f"op{i}", d) for i, d in enumerate(durations)),
                 tuple(buffers))
