"""Traces of adjoint programs over a chain, for tests and ``bench/chains.py``.

:func:`adjoint_trace` makes the trace of the shape of ``examples/adjoint_chain.py``: a
state stepped forward ``l`` times, a loss, and an adjoint stepped back through the states
last first. Its options add what a real program has beside the chain: a *side input*
(a coefficient field made once from persistent parameters before the forward sweep and
read by every forward and adjoint step: it stays resident, it is no state of the chain)
and a *temporary root* (``x₀`` made from the persistent control by an op of its own and
read back by the last adjoint step: the chain's first state, re-made from the control
rather than held)::

    op:     init  coeff  f1 .. fl  loss  dloss  bl .. b1  update  fetch
    u       ====...................................................====   control (persistent)
    c             [=====================================)                  side input
    x0      [====.......................................=)                 temporary root
    xj                  [=)...........[=)                                  read by f_{j+1}, b_{j+1}
"""

from __future__ import annotations

from cupool.core.vocabulary import PERSISTENT, Buffer, Op, Recompute, Trace


def adjoint_trace(length: int, state_bytes: int, step_us: float = 10.0,
                  adjoint_us: float | None = None, name: str | None = None,
                  not_recomputable: tuple[int, ...] = (), side_input: bool = False,
                  temporary_root: bool = False) -> Trace:
    """The trace of an adjoint program over a chain of ``length`` steps: an initial state
    ``x0`` (the persistent control, or with ``temporary_root`` made from the control ``u``
    by op ``init``), forward steps ``f1 .. f_l`` (``f_j`` makes ``x_j`` from
    ``x_{j-1}``, ``step_us`` each), a loss and its gradient ``λ_l`` from ``x_l``, adjoint
    steps ``b_l .. b_1`` (``λ_{j-1}`` from ``λ_j`` and ``x_{j-1}``, ``adjoint_us`` each,
    default ``step_us``), the update of the control by ``λ_0`` and a fetch of the loss.
    With ``side_input``, op ``coeff`` makes a field ``c`` from persistent parameters
    ``theta`` first, and every forward and adjoint step reads it too. Every state, adjoint,
    control and field is ``state_bytes``; the recipes are the program's (each op re-run
    from its inputs), but for the states ``x_j`` with ``j`` in ``not_recomputable``
    (their ops declared not recomputable)."""
    if length < 1:
        raise ValueError(f"length (={length}) must be >= 1")
    adjoint_us = step_us if adjoint_us is None else adjoint_us
    ops = []
    if temporary_root:
        ops.append(Op("init", step_us / 4, phase="fw"))
    if side_input:
        ops.append(Op("coeff", step_us / 4, phase="fw"))
    head = len(ops)
    ops += [Op(f"f{j}", step_us, phase="fw") for j in range(1, length + 1)]
    ops += [Op("loss", step_us / 4, phase="fw"), Op("dloss", step_us / 4, phase="bw")]
    ops += [Op(f"b{j}", adjoint_us, phase="bw") for j in range(length, 0, -1)]
    ops += [Op("update", step_us / 4, phase="opt"), Op("fetch", 1.0, phase="opt")]
    n = len(ops)
    forward = {j: head + j - 1 for j in range(1, length + 1)}  # op of f_j
    back = {j: head + length + 2 + (length - j) for j in range(1, length + 1)}  # op of b_j
    update = n - 2
    buffers: list[Buffer] = []

    def add(size, start, end, uses, kind="temporary", name="", recompute=None) -> int:
        buffers.append(Buffer(len(buffers), size, start, end, tuple(sorted(set(uses))), kind,
                              name, recompute=recompute))
        return len(buffers) - 1

    side: tuple[int, ...] = ()
    if temporary_root:
        control = add(state_bytes, 0, n, (0, update), PERSISTENT, "u")
        root = add(state_bytes, 0, back[1] + 1, (0, forward[1], back[1]), name="x0",
                   recompute=Recompute(0, (control,)))
    else:
        root = control = add(state_bytes, 0, n, (forward[1], back[1], update), PERSISTENT,
                             "x0")
    if side_input:
        theta = add(state_bytes, 0, n, (head - 1,), PERSISTENT, "theta")
        readers = (head - 1, *forward.values(), *back.values())
        side = (add(state_bytes, head - 1, back[1] + 1, readers, name="c",
                    recompute=Recompute(head - 1, (theta,))),)
    states = [root]
    for j in range(1, length + 1):  # x_j: made by f_j, read by f_{j+1} and b_{j+1}
        op = forward[j]
        uses = [op] + ([op + 1, back[j + 1]] if j < length else [op + 1, op + 2])
        recipe = None if j in not_recomputable else Recompute(op, (states[-1], *side))
        states.append(add(state_bytes, op, max(uses) + 1, uses, name=f"x{j}",
                          recompute=recipe))
    loss_op = head + length
    loss = add(512, loss_op, n, (loss_op, n - 1), name="loss",
               recompute=Recompute(loss_op, (states[-1],)))
    del loss
    lam = add(state_bytes, loss_op + 1, back[length] + 1, (loss_op + 1, back[length]),
              name=f"lam{length}", recompute=Recompute(loss_op + 1, (states[-1],)))
    for j in range(length, 0, -1):  # λ_{j-1}: made by b_j from λ_j and x_{j-1}
        made = back[j]
        reader = back[j - 1] if j > 1 else update
        lam = add(state_bytes, made, reader + 1, (made, reader), name=f"lam{j - 1}",
                  recompute=Recompute(made, (lam, states[j - 1], *side)))
    return Trace(name or f"adjoint chain l={length}", tuple(ops), tuple(buffers),
                 source="cupool.planning.budget.chain_traces.adjoint_trace")


__all__ = ["adjoint_trace"]
