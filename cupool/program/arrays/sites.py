"""Where a namespace call comes from, and its errors: the first frame of the program outside
``cupool/program`` (the call's ``file:line``), the op's name ``function@file.py:line``, and
the typed errors built from the call's operands (their shapes) and that line."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from cupool.program.arrays.views import View
from cupool.program.tensors import Tensor

PROGRAM_DIR = str(Path(__file__).resolve().parents[1]) + os.sep
LIMIT = 8192
_LABELS: dict = {}


def caller():
    """The first frame outside ``cupool/program`` (the program's call)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(PROGRAM_DIR):
        frame = frame.f_back
    return frame


def where(frame) -> str:
    return "<unknown>" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


def label(fname: str, frame) -> str:
    """``fname@file.py:line`` for a call from ``frame`` (cached per function and line)."""
    if frame is None:
        return fname
    code = frame.f_code
    key = (fname, code.co_filename, frame.f_lineno)
    found = _LABELS.get(key)
    if found is None:
        if len(_LABELS) >= LIMIT:
            _LABELS.clear()
        found = _LABELS[key] = f"{fname}@{os.path.basename(key[1])}:{key[2]}"
    return found


def site(frame) -> tuple:
    """The part of a cache key that names a call's site: its code object's ``id`` (the
    cached entry keeps the code object alive, so that the ``id`` names no other while the
    key exists) and the instruction of the call."""
    return (id(frame.f_code), frame.f_lasti) if frame is not None else (None, 0)


def inside(frame) -> bool:
    """Whether ``frame`` runs code of ``cupool/program`` (not the program's own)."""
    return frame is not None and frame.f_code.co_filename.startswith(PROGRAM_DIR)


def outside(frame):
    """The first frame from ``frame`` outward that is not in ``cupool/program``. The
    namespace caches entries only under the sites of such frames, so that a key found
    names the program's call."""
    while frame is not None and frame.f_code.co_filename.startswith(PROGRAM_DIR):
        frame = frame.f_back
    return frame


def shown(value):
    """An operand as an error shows it: a shape, or the ``repr`` of anything else."""
    if isinstance(value, (Tensor, View)):
        return tuple(value.shape)
    if isinstance(value, np.ndarray):
        return f"host array {value.shape}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def error(cls, fname: str, args, detail: str, frame=None, **extra):
    frame = frame if frame is not None else caller()
    return cls(fname, tuple(shown(a) for a in args), where(frame), detail, **extra)


__all__ = ["LIMIT", "PROGRAM_DIR", "caller", "error", "inside", "label", "outside", "shown",
           "site", "where"]
