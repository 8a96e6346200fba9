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

Such buffers are the *candidates*. Each one's recipe is walked back to what its recompute
*reads*: other candidates, persistent buffers, buffers resident when it runs, and freed
intermediates between them, the *links*, which it re-makes first.

**States of several buffers.** A program's graph is rarely a pure chain: a step may make
several buffers the reverse sweep reads (a reaction term beside the state, a misfit per
observation), a state may be made from the two before it (leapfrog). :func:`find_chain`
cuts the candidates, in the order they are made, into consecutive *states* so that each
candidate's recompute reads only candidates of its own state or of the one before; a
state is then re-made from the one before it, and revolve schedules the states. The cut
is greedy: a candidate opens a new state when everything it reads lies in the state
before and it is read back no later than that state; else it joins the current state::

    made:   r1 x1 r2 x2 r3 x3        x_j reads x_{j-1} and r_j, r_j reads x_{j-1}
    states: [r1 x1][r2 x2][r3 x3]    each re-made from the state before

Passing through a state on the way to another, a recompute re-makes only the buffers the
states above it read (their *carry*); a state delivered to the reverse sweep is re-made
whole.

**What stays off the chain.** A *side input* (a candidate whose recompute reads no other
candidate, read by three or more: a coefficient field made once from persistent
parameters) stays resident for its lifetime, and the states read it as they read
persistent buffers. A candidate that reads one two states back or more is *kept* instead
(resident for its lifetime), or the candidate it reads is, when later candidates read that
one too; so is one that cannot be re-made and that no other candidate reads. ``notes``
says why each left the chain. A state holding a buffer whose op is not recomputable (or
that reads a freed buffer without a recipe) is a *forced* checkpoint: kept from where it
is made, it splits the chain (``reason`` names the op).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from cupool.core.liveness import live_bytes
from cupool.core.vocabulary import PERSISTENT, Buffer, Trace

SIDE_INPUT_READERS = 3
"""Candidates that must read a candidate made from no other one for it to be a side
input (a chain's root is read by one or two)."""


@dataclass(frozen=True)
class StateBuffer:
    """A buffer of a chain state: ``buffer_id``, made by op ``producer``, last used by op
    ``forward_last`` before the turn and first by op ``need`` after it (its last use:
    ``end - 1``); ``links``: the freed intermediates its recompute re-makes first (inputs
    first); ``reads``: the chain's buffers its recompute reads (through the links)."""

    buffer_id: int
    producer: int
    forward_last: int
    need: int
    end: int
    links: tuple[int, ...] = ()
    reads: tuple[int, ...] = ()


@dataclass(frozen=True)
class ChainState:
    """One state of a chain: the buffers a stretch of the forward sweep makes that the
    reverse sweep reads back (one in a pure chain), in producer order; ``reason``: why it
    cannot be recomputed (``None``: it can)."""

    buffers: tuple[StateBuffer, ...]
    reason: str | None = None

    @property
    def recomputable(self) -> bool:
        return self.reason is None

    @property
    def buffer_ids(self) -> tuple[int, ...]:
        return tuple(b.buffer_id for b in self.buffers)

    @property
    def need(self) -> int:
        """The first op after the turn that reads one of its buffers."""
        return min(b.need for b in self.buffers)

    @property
    def producer(self) -> int:
        return self.buffers[0].producer


@dataclass(frozen=True)
class Chain:
    """``states`` x₁ .. x_l in producer order (x₀ is what x₁'s recompute reads: persistent
    or resident buffers); ``kept``: candidates off the chain (resident for their
    lifetime), ``side`` among them the side inputs; ``notes``: why each left the chain."""

    states: tuple[ChainState, ...]
    kept: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()
    side: tuple[int, ...] = ()

    @property
    def forced(self) -> tuple[int, ...]:
        """Positions (1-based) of the states that cannot be recomputed."""
        return tuple(j + 1 for j, x in enumerate(self.states) if not x.recomputable)

    @property
    def buffer_ids(self) -> tuple[int, ...]:
        """Every state's buffers, state by state."""
        return tuple(b for x in self.states for b in x.buffer_ids)


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


@dataclass
class _Walk:
    """What one candidate's recipe walk found: the candidates it reads, its links, why it
    cannot be re-made (``None``: it can)."""

    reads: list
    links: list
    reason: str | None


def _walk(trace: Trace, buffer_id: int, need: int, turn: int, gaps: dict) -> _Walk:
    """Walk the recipe of candidate ``buffer_id`` (read back first by op ``need``)."""
    reads: list[int] = []
    links: list[int] = []

    def visit(current: int, depth: int) -> str | None:
        buffer = trace.buffer(current)
        op = trace.ops[buffer.start]
        if buffer.recompute is None:
            return f"op {buffer.start} ({op.name}) is not recomputable"
        for y in buffer.recompute.inputs:
            other = trace.buffer(y)
            if other.kind == PERSISTENT or y in reads or y in links:
                continue
            if y in gaps:
                reads.append(y)
            elif other.start < turn and need < other.end:
                continue  # resident whenever a recompute of the chain runs
            elif other.recompute is None or depth > 64:
                return (f"op {buffer.start} ({op.name}) reads buffer {y} ({other.name}), "
                        f"freed before op {need} and not recomputable")
            else:
                reason = visit(y, depth + 1)
                if reason is not None:
                    return reason
                links.append(y)
        return None

    reason = visit(buffer_id, 0)
    return _Walk(reads, links, reason)


def _cut(order: list, reads: dict, need: dict) -> tuple[list, tuple | None]:
    """The greedy cut of ``order`` into states (module docstring): ``(states, None)``, or
    ``([], (candidate, far))`` at the first candidate that reads ``far``, candidates two
    states back or more."""
    states: list[list[int]] = []
    state_need: list[int] = []
    state_of: dict[int, int] = {}
    for c in order:
        k = len(states)
        lowest = min((state_of.get(d, k) for d in reads[c]), default=k)
        if k == 0 or (lowest >= k - 1 and need[c] <= state_need[-1]):
            states.append([c])
            state_need.append(need[c])
        elif lowest >= k - 2:
            states[-1].append(c)
            state_need[-1] = min(state_need[-1], need[c])
        else:
            return [], (c, tuple(d for d in reads[c] if state_of.get(d, k) < k - 2))
        state_of[c] = len(states) - 1
    return states, None


_CHAINS: dict = {}  # id(trace) -> (weak reference, Chain)


def find_chain(trace: Trace) -> Chain:
    """The chain of ``trace`` (module docstring); its ``states`` may be empty. Kept while
    the trace lives (traces and chains are immutable): ``auto`` lists its members and
    both revolve members plan from one trace, and the search takes seconds on a
    13k-buffer one."""
    entry = _CHAINS.get(id(trace))
    if entry is None or entry[0]() is not trace:
        if len(_CHAINS) >= 8:
            _CHAINS.clear()
        entry = _CHAINS[id(trace)] = (weakref.ref(trace), _search_chain(trace))
    return entry[1]


def _search_chain(trace: Trace) -> Chain:
    turn = turn_op(trace)
    gaps = {}
    for b in trace.buffers:
        if b.kind != PERSISTENT and b.uses and b.start < turn:
            gap = _gap(b, turn)
            if gap is not None:
                gaps[b.id] = gap
    order = sorted(gaps, key=lambda i: (trace.buffer(i).start, i))
    walks = {c: _walk(trace, c, gaps[c][1], turn, gaps) for c in order}
    off: dict[int, str] = {}  # candidate -> why it left the chain (through ``leave``)
    side: list[int] = []
    # what reason_of and reads_of answered, until a buffer the walk reads leaves the chain
    # (their only input that changes): each pass asks again for every candidate
    reasons: dict[int, str | None] = {}
    reads: dict[int, list] = {}
    readers: dict[int, list[int]] = {}  # buffer -> the candidates whose walk reads it
    for c in order:
        for y in walks[c].reads:
            readers.setdefault(y, []).append(c)

    def leave(c: int, why: str) -> None:
        off[c] = why
        for reader in readers.get(c, ()):
            reasons.pop(reader, None)
            reads.pop(reader, None)

    def reason_of(c: int) -> str | None:
        """Why ``c`` cannot be re-made: its walk's reason, or a candidate off the chain it
        reads that is freed before ``c`` is read back."""
        if c in reasons:
            return reasons[c]
        reason = walks[c].reason
        if reason is None:
            for y in walks[c].reads:
                other = trace.buffer(y)
                if y in off and not other.end > gaps[c][1]:
                    op = trace.buffer(c).start
                    reason = (f"op {op} ({trace.ops[op].name}) reads buffer {y} "
                              f"({other.name}), off the chain and freed before op "
                              f"{gaps[c][1]}")
                    break
        reasons[c] = reason
        return reason

    def reads_of(c: int) -> list:
        if c not in reads:
            reads[c] = [] if reason_of(c) is not None else [y for y in walks[c].reads
                                                              if y not in off]
        return reads[c]

    states: list = []
    for _ in range(len(order) + 1):  # each pass moves a candidate off or ends
        on = [c for c in order if c not in off]
        counts: dict[int, int] = {}  # how many candidates on the chain read each buffer
        for c in on:
            for y in reads_of(c):
                counts[y] = counts.get(y, 0) + 1
        new_side = [c for c in on if reason_of(c) is None and not reads_of(c)
                    and counts.get(c, 0) >= SIDE_INPUT_READERS]
        for c in new_side:
            leave(c, f"is a side input (read by {counts[c]} candidates, made from none): "
                     f"resident for its lifetime")
            side.append(c)
        unread = [c for c in on if reason_of(c) is not None and c not in counts]
        for c in unread:  # no checkpoint: nothing on the chain is re-made from it
            leave(c, f"cannot be re-made ({reason_of(c)}) and no state reads it")
        if new_side or unread:
            continue
        states, conflict = _cut(on, {c: reads_of(c) for c in on},
                                {c: gaps[c][1] for c in on})
        if conflict is None:
            break
        c, far = conflict
        later = {y for d in on[on.index(c) + 1:] for y in reads_of(d)}
        moved = [d for d in far if d in later]
        for d in moved:
            leave(d, "is read by candidates several states apart: resident for its lifetime")
        if not moved:
            leave(c, f"reads buffers {sorted(far)}, two states back or more")
    chain_states = []
    for members in states:
        buffers = []
        for c in members:
            buffer, walk = trace.buffer(c), walks[c]
            recomputable = reason_of(c) is None
            buffers.append(StateBuffer(c, buffer.start, gaps[c][0], gaps[c][1], buffer.end,
                                       tuple(walk.links) if recomputable else (),
                                       tuple(reads_of(c))))
        reason = next((reason_of(c) for c in members if reason_of(c) is not None), None)
        chain_states.append(ChainState(tuple(buffers), reason))
    kept = tuple(c for c in order if c in off)
    notes = tuple(f"buffer {c} ({trace.buffer(c).name}) {off[c]}" for c in kept)
    return Chain(tuple(chain_states), kept, notes, tuple(side))


__all__ = ["Chain", "ChainState", "StateBuffer", "find_chain", "turn_op"]
