"""Persistent state declared read-only for an iteration (inference), for traces that do
not say which uses write.

Traces from PyTorch snapshots and CuPy hook logs have no ``writes``: every use of a weight
may write it, so a weight taken off the device must be copied back to the host before its
bytes are reused. A user who knows the step never writes its persistent state (a forward
pass) says so, and the weights become read-only (``writes == ()``): evicting one drops it
(its host copy, where it was loaded from, stays valid), and the planners, the bound and the
validator all see that. A trace whose ``writes`` say a persistent buffer is written
contradicts the declaration: :class:`ReadOnlyStateError` names the buffer and the op.
"""

from __future__ import annotations

from dataclasses import replace

from cupool.core.vocabulary import PERSISTENT, Trace
from cupool.errors import InputError


class ReadOnlyStateError(InputError):
    """Persistent state was declared read-only, but the trace says an op writes it:
    ``"buffer 3 ('fc.weight'): op 41 writes it, so persistent state is not read-only"``."""


def read_only_state(trace: Trace) -> Trace:
    """``trace`` with every persistent buffer read-only (``writes == ()``): those whose
    writes are unknown become read-only, those already read-only stay; a persistent buffer
    that a known write touches raises :class:`ReadOnlyStateError`. Temporaries are kept as
    they are. The digest (ids, sizes, lifetimes) does not change."""
    buffers = []
    for b in trace.buffers:
        if b.kind == PERSISTENT and b.writes:
            label = f" ({b.name!r})" if b.name else ""
            raise ReadOnlyStateError(
                f"op {b.writes[0]} writes it, so persistent state is not read-only "
                f"during the iteration (its writes: {list(b.writes)})",
                where=f"persistent buffer {b.id}{label}")
        if b.kind == PERSISTENT and b.writes is None:
            b = replace(b, writes=())
        buffers.append(b)
    return replace(trace, buffers=tuple(buffers))
