"""Byte quantities as people write them: ``123``, ``4GiB``, ``1.5 GB``, ``70%``.

Binary suffixes (KiB, MiB, GiB, TiB) are powers of 1024, decimal ones (kB, MB, GB, TB)
powers of 1000; ``B`` or no suffix is bytes. A percentage is relative to a reference
(the lower bound, for budgets) and is resolved by :func:`parse_budget`.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from cupool.errors import UnitError

_SUFFIXES = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
    "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(text: str | int, what: str = "size") -> int:
    """Parse ``"4GiB"`` → 4294967296. Raises :class:`UnitError` quoting the bad text."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text <= 0:
            raise UnitError(f"{what} (={text}) must be > 0 bytes")
        return text
    match = _PATTERN.match(str(text))
    if not match or match.group(2).lower() not in _SUFFIXES:
        raise UnitError(
            f"{what} (={text!r}) is not a byte count; expected e.g. 1048576, 512MiB, 4GiB, 1.5GB"
        )
    value = float(match.group(1)) * _SUFFIXES[match.group(2).lower()]
    if not math.isfinite(value) or value < 1:
        raise UnitError(f"{what} (={text!r}) must be at least 1 byte")
    return int(value)


def parse_budget(text: str | int, reference_bytes: int, what: str = "budget") -> int:
    """Parse a budget: bytes (``"8GiB"``) or a percentage of ``reference_bytes`` (``"70%"``)."""
    if isinstance(text, str) and text.strip().endswith("%"):
        number = text.strip()[:-1]
        try:
            percent = float(number)
        except ValueError:
            raise UnitError(f"{what} (={text!r}) is not a percentage; expected e.g. 70%") from None
        if not math.isfinite(percent) or percent <= 0:
            raise UnitError(f"{what} (={text!r}) must be a percentage > 0")
        exact = Fraction(number.strip()) * reference_bytes / 100  # no float rounding
        return max(1, int(exact))
    return parse_bytes(text, what)


def format_bytes(n: int) -> str:
    """``1536`` → ``"1.50 KiB"``; exact bytes below 1 KiB."""
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024.0
        if n < 1024 or unit == "TiB":
            return f"{n:.2f} {unit}"
    raise AssertionError("unreachable")
