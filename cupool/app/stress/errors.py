"""The stress run's typed errors (picklable through :class:`~cupool.errors.CupoolError`)."""

from __future__ import annotations

from cupool.errors import CupoolError


class StressError(CupoolError):
    """``cupool stress`` cannot run as asked (bad minutes, unknown device, no usable GPU,
    no kernel compiler); the message is one line saying what is missing."""


class WalkError(CupoolError):
    """:func:`~cupool.app.stress.independent_walker.walk_plan` cannot run this plan (the
    reason quotes the buffer and offsets)."""
