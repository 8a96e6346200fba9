"""Which swap-outs of a plan leave clean data, and so drop it instead of copying it.

A buffer's host copy is valid from the end of a copy out until an op in its ``writes``
runs; a residency entered by a swap-in holds exactly that host copy until it is written.
So a swap-out leaving such a residency with no write since its start is a *drop*: no link
time, its bytes free at the residency's end. A read-only persistent buffer
(``writes == []``) is clean everywhere (its host copy, where it was loaded from, never goes
stale) and is never copied out at all: it streams in ahead of each use and is dropped after
it (weight streaming)::

    op:          0   1   2   3   4   5   6   7
    uses of w:           r       r
    residencies:     [=====)   [=====)            w read-only, or written at neither use
                     ^ swap-in   ^ swap-in
                           ^ drop    ^ drop      (nothing copied out)

The flags are worked out again from the final residencies and actions (whatever moved a
trigger or cancelled a swap on the way), the rule the validator checks. Buffers whose
``writes`` are unknown keep their swap-outs as they are: plans of traces without
``writes`` stay what they were.
"""

from __future__ import annotations

from dataclasses import replace

from cupool.core.vocabulary import Residency, SwapIn, SwapOut, Trace


def mark_drops(trace: Trace, residencies, actions) -> tuple:
    """``actions`` with each swap-out of a buffer with known ``writes`` flagged ``drop``
    exactly when the data it leaves is clean (module docstring)."""
    known = trace.ids_with_writes()
    if not known:
        return tuple(actions)
    spans: dict[int, list[Residency]] = {}
    for r in residencies:
        if r.buffer_id in known:
            spans.setdefault(r.buffer_id, []).append(r)
    entered = {(a.buffer_id, a.trigger_op): a for a in actions
               if isinstance(a, SwapIn) and a.buffer_id in known}
    out = []
    for action in actions:
        if isinstance(action, SwapOut) and action.buffer_id in known:
            drop = _clean(trace, spans.get(action.buffer_id, ()), entered, action)
            if drop != action.drop:
                action = replace(action, drop=drop)
        out.append(action)
    return tuple(out)


def _clean(trace: Trace, spans, entered, out: SwapOut) -> bool:
    buffer = trace.buffer(out.buffer_id)
    if buffer.read_only:
        return True
    holder = next((r for r in spans if r.start <= out.after_op < r.end), None)
    if holder is None:
        return False
    entry = entered.get((out.buffer_id, holder.start))
    return (entry is not None and entry.level == out.level
            and not buffer.written_in(holder.start, out.after_op))
