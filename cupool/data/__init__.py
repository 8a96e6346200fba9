"""Data shipped with cupool: real traces (``traces/``) and hard static instances (``dsa/``).

See ``traces/README.md`` and ``dsa/README.md`` for where they come from.
"""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent


def bundled_traces() -> list[Path]:
    """The bundled real traces (trace v1, gzipped), sorted by name."""
    return sorted((DATA_DIR / "traces").glob("*.trace.json.gz"))


def bundled_dsa() -> list[Path]:
    """The bundled MiniMalloc CSV instances; the capacity is the number in each file name."""
    return sorted((DATA_DIR / "dsa").glob("*.csv"))


def dsa_capacity(path: Path) -> int:
    """The capacity encoded in a dsa file name: ``challenging-A.1048576.csv`` → 1048576."""
    return int(Path(path).name.split(".")[-2])
