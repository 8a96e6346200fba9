"""How the swap engine scales and times a trace: :class:`EngineSettings`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineSettings:
    """How the engine scales a trace: ``size_scale`` (int >= 1) divides every size and
    offset; ``time_scale`` multiplies every op duration (a replay paces the link to
    match); ``seed`` seeds the patterns; ``staging_bytes`` is the pinned reservation
    (default: room for one host copy of every buffer the plan swaps out);
    ``time_ops_every`` (int >= 1): the engine's first three iterations, and every
    ``time_ops_every``-th after them, time each op with a timing event after it (the
    others record events only where the plan has a copy or a recompute)."""

    size_scale: int = 1
    time_scale: float = 1.0
    seed: int = 0
    staging_bytes: int | None = None
    time_ops_every: int = 4


__all__ = ["EngineSettings"]
