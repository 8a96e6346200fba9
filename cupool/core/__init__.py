"""Vocabulary and units: the words every other module of cupool speaks."""

from cupool.core.units import format_bytes, parse_budget, parse_bytes
from cupool.core.vocabulary import (
    BUFFER_KINDS,
    PERSISTENT,
    TEMPORARY,
    Buffer,
    Device,
    Op,
    Placement,
    Plan,
    Recompute,
    SolveStatus,
    Trace,
)

__all__ = [
    "BUFFER_KINDS", "PERSISTENT", "TEMPORARY", "Buffer", "Device", "Op", "Placement", "Plan",
    "Recompute", "SolveStatus", "Trace", "format_bytes", "parse_budget", "parse_bytes",
]
