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
