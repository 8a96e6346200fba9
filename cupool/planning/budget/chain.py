"""Chains in a trace: the states a reverse sweep reads back in the reverse of their order.

An adjoint solver, a 4D-Var step or a network's backward steps a state forward
``x₀ → x₁ → … → x_l`` and then reads the states back last first. In a trace such a state
is a temporary buffer made before the *turn* (the op with the most bytes alive, or the
first ``"bw"`` op when the ops have phases) and used again after it, idle in between::

    op:      0    1    2    3   ...   l    l+1  ...  2l-1  2l
    x1       [====)...........................[=)                x1 made by op 0, read by op 1
    x2            [====)................[=)                       and again by op 2l-1
    x3                 [====)......[=)
    need(x)                         ▲    ▲    ▲     (first use after the turn: decreasing)

:func:`find_chain` finds the longest run of such states where each one is recomputed from
the one before it (its recipe's inputs, through any freed intermediates between them, the
*links*, reach exactly that state, besides persistent buffers), read back in reverse
order (the first use after the turn, ``need``, does not increase along the chain). Every
other such state is *kept* (resident for its whole lifetime). A state whose op is not
recomputable stays on the chain as a *forced* checkpoint: kept from where it is made, it
splits the chain (``reason`` names the op).

:func:`adjoint_trace` makes the trace of such a program (the shape of
``examples/adjoint_chain.py``), for tests and ``bench/chains.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cupool.core.liveness import live_bytes
from cupool.core.vocabulary import PERSISTENT, Buffer, Op, Recompute, Trace


@dataclass(frozen=True)
class ChainState:
    """One state of a chain: buffer ``buffer_id``, made by op ``producer``, last used by op
    ``forward_last`` before the turn and by ops ``need`` .. ``end - 1`` after it; ``links``:
    the freed intermediates its recompute re-makes first (producer order);
    ``reason``: why it cannot be recomputed (``None``: it can)."""

    buffer_id: int
    producer: int
    forward_last: int
    need: int
    end: int
    links: tuple[int, ...] = ()
    reason: str | None = None

    @property
    def recomputable(self) -> bool:
        return self.reason is None


@dataclass(frozen=True)
class Chain:
    """``states`` x₁ .. x_l in producer order (x₀ is what x₁'s recompute reads: persistent
    or resident buffers); ``kept``: other states the reverse sweep reads (resident for
    their lifetime); ``notes``: why each left the chain."""

    states: tuple[ChainState, ...]
    kept: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def forced(self) -> tuple[int, ...]:
        """Positions (1-based) of the states that cannot be recomputed."""
        return tuple(j + 1 for j, x in enumerate(self.states) if not x.recomputable)


def turn_op(trace: Trace) -> int:
    """The forward/backward turn: the first ``"bw"`` op when the ops have phases, else the
    op with the most bytes alive (the first of them)."""
    phases = [op.phase for op in trace.ops]
    if "bw" in phases and "fw" in phases:
        return phases.index("bw")
    if trace.num_ops == 0:
        return 0
    b = trace.buffers
    live = live_bytes([x.start for x in b], [x.end for x in b], [x.size for x in b],
                      trace.num_ops)
    return int(np.argmax(live))


def _gap(buffer: Buffer, turn: int) -> tuple[int, int] | None:
    """``(last use before the turn, first use at or after it)`` when the buffer idles across
    the turn for at least one op."""
    before = [u for u in buffer.uses if u < turn]
    after = [u for u in buffer.uses if u >= turn]
    if not before or not after or after[0] - before[-1] < 2:
        return None
    return before[-1], after[0]


def find_chain(trace: Trace) -> Chain:
    """The longest chain of ``trace`` (module docstring); its ``states`` may be empty."""
    turn = turn_op(trace)
    gaps = {}
    for b in trace.buffers:
        if b.kind != PERSISTENT and b.uses and b.start < turn:
            gap = _gap(b, turn)
            if gap is not None:
                gaps[b.id] = gap
    candidates = sorted(gaps, key=lambda i: (trace.buffer(i).start, i))

    def resolve(buffer_id: int, need: int, links: list, deps: set, depth: int) -> str | None:
        """Walk the recipe of ``buffer_id``: candidate inputs into ``deps``, freed
        intermediates into ``links`` (inputs first); a reason when it cannot be re-made."""
        buffer = trace.buffer(buffer_id)
        op = trace.ops[buffer.start]
        if buffer.recompute is None:
            return f"op {buffer.start} ({op.name}) is not recomputable"
        for y in buffer.recompute.inputs:
            other = trace.buffer(y)
            if other.kind == PERSISTENT or y in deps or y in links:
                continue
            if y in gaps:
                deps.add(y)
            elif other.start <= need < other.end:
                continue  # resident when the recompute runs
            elif other.recompute is None or depth > 64:
                return (f"op {buffer.start} ({op.name}) reads buffer {y} ({other.name}), "
                        f"freed before op {need} and not recomputable")
            else:
                reason = resolve(y, need, links, deps, depth + 1)
                if reason is not None:
                    return reason
                links.append(y)
        return None

    states: list[ChainState] = []
    kept, notes = [], []
    for c in candidates:
        buffer = trace.buffer(c)
        last, need = gaps[c]
        links: list[int] = []
        deps: set[int] = set()
        reason = resolve(c, need, links, deps, 0)
        previous = states[-1] if states else None
        expected = {previous.buffer_id} if previous is not None else set()
        if previous is not None and need > previous.need:
            note = f"is read back before buffer {previous.buffer_id}: not in reverse order"
        elif reason is None and deps != expected:
            note = (f"is recomputed from buffers {sorted(deps)}, not from the chain's last "
                    f"state")
        else:  # on the chain (a state that cannot be recomputed: a forced checkpoint)
            states.append(ChainState(c, buffer.start, last, need, buffer.end,
                                     tuple(links) if reason is None else (), reason))
            continue
        kept.append(c)
        notes.append(f"buffer {c} ({buffer.name}) {note}")
    return Chain(tuple(states), tuple(kept), tuple(notes))


def adjoint_trace(length: int, state_bytes: int, step_us: float = 10.0,
                  adjoint_us: float | None = None, name: str | None = None,
                  not_recomputable: tuple[int, ...] = ()) -> Trace:
    """The trace of an adjoint program over a chain of ``length`` steps: a persistent
    initial state ``x0`` (the control), forward steps ``f1 .. f_l`` (op ``j - 1`` makes
    ``x_j`` from ``x_{j-1}``, ``step_us`` each), a loss and its gradient ``λ_l`` from
    ``x_l``, adjoint steps ``b_l .. b_1`` (``λ_{j-1}`` from ``λ_j`` and ``x_{j-1}``,
    ``adjoint_us`` each, default ``step_us``), the update of ``x0`` by ``λ_0`` and a fetch
    of the loss. Every state and adjoint is ``state_bytes``; the recipes are the
    program's (each op re-run from its inputs), but for the states ``x_j`` with ``j`` in
    ``not_recomputable`` (their ops declared not recomputable)."""
    if length < 1:
        raise ValueError(f"length (={length}) must be >= 1")
    adjoint_us = step_us if adjoint_us is None else adjoint_us
    n = 2 * length + 4
    ops = [Op(f"f{j}", step_us, phase="fw") for j in range(1, length + 1)]
    ops += [Op("loss", step_us / 4, phase="fw"), Op("dloss", step_us / 4, phase="bw")]
    ops += [Op(f"b{j}", adjoint_us, phase="bw") for j in range(length, 0, -1)]
    ops += [Op("update", step_us / 4, phase="opt"), Op("fetch", 1.0, phase="opt")]
    back = {j: length + 2 + (length - j) for j in range(1, length + 1)}  # op of b_j
    buffers = [Buffer(0, state_bytes, 0, n, (0, back[1], n - 2), PERSISTENT, "x0")]
    for j in range(1, length + 1):  # x_j: made by op j - 1, read by f_{j+1} and b_{j+1}
        uses = [j - 1]
        if j < length:
            uses += [j, back[j + 1]]
        else:
            uses += [length, length + 1]
        recipe = None if j in not_recomputable else Recompute(j - 1, (j - 1,))
        buffers.append(Buffer(j, state_bytes, j - 1, max(uses) + 1, tuple(uses), name=f"x{j}",
                              recompute=recipe))
    loss = length + 1
    buffers.append(Buffer(loss, 512, length, n, (length, n - 1), name="loss",
                          recompute=Recompute(length, (length,))))
    lam = loss + 1  # λ_l, then λ_{l-1} .. λ_0
    buffers.append(Buffer(lam, state_bytes, length + 1, back[length] + 1,
                          (length + 1, back[length]), name=f"lam{length}",
                          recompute=Recompute(length + 1, (length,))))
    for j in range(length, 0, -1):
        made = back[j]
        reader = back[j - 1] if j > 1 else n - 2
        ident = lam + (length - j) + 1
        buffers.append(Buffer(ident, state_bytes, made, reader + 1, (made, reader),
                              name=f"lam{j - 1}",
                              recompute=Recompute(made, (ident - 1, j - 1))))
    return Trace(name or f"adjoint chain l={length}", tuple(ops), tuple(buffers),
                 source="cupool.planning.budget.chain.adjoint_trace")


__all__ = ["Chain", "ChainState", "adjoint_trace", "find_chain", "turn_op"]
