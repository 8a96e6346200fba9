"""Errors pickle by one mechanism: the arguments an error was constructed with, recorded by
``CupoolError``, and the same call again when it is unpickled."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import cupool
from cupool.devices.errors import DeviceOutOfMemoryError, InvalidSizeError
from cupool.errors import ArgumentError, CupoolError, InputError, OutputError, TraceFormatError
from cupool.program.errors import BudgetTooSmallError
from cupool.sharing.errors import AdmissionError, SharingArgumentError
from cupool.swap.errors import CopyFailedError

PACKAGE = Path(cupool.__file__).resolve().parent
HAND_WRITTEN = {("errors.py", "CupoolError"),  # the mechanism itself
                ("allocator/errors.py", "PoolOutOfMemoryError")}  # CuPy's class, not ours


def _round_trip(error):
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error)
    assert vars(copy) == vars(error)
    return copy


def test_no_error_class_writes_its_own_reduce():
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(f, ast.FunctionDef) and f.name == "__reduce__"
                    for f in node.body):
                found.add((path.relative_to(PACKAGE).as_posix(), node.name))
    assert found == HAND_WRITTEN


def test_errors_pickle_as_the_call_that_made_them():
    errors = [
        CupoolError("plain"),
        InputError("end (=4) must be > start (=9)", "buffer 17"),
        InputError("bad version", path="t.json"),  # a keyword argument
        TraceFormatError("no ops", where="field 'ops'", path="t.json"),
        OutputError("out/plan.json", 28, "no space left on device"),
        ArgumentError("reserve", "size", -3, "must be > 0"),
        BudgetTooSmallError("fc0", 2, 394240, 200000),
        DeviceOutOfMemoryError("reserve", 1 << 30, 1 << 20, 1 << 24),
        InvalidSizeError("reserve", "size", -3, "must be > 0"),  # two bases
        CopyFailedError(7, "h2d", 4096, "the stream failed"),
        AdmissionError("job-a", 1 << 20, 1 << 21, 1 << 19, 1 << 20),
        SharingArgumentError("BrokerConfig", "slice_iterations", 0, "must be >= 1"),
    ]
    for error in errors:
        _round_trip(error)
    keyword = _round_trip(errors[2])
    assert (keyword.detail, keyword.where, keyword.path) == ("bad version", None, "t.json")
    assert _round_trip(errors[-1]).to_wire() == errors[-1].to_wire()


class RangeError(CupoolError):
    """A subclass that derives a field from its arguments and writes no ``__reduce__``."""

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end, self.length = start, end, end - start
        super().__init__(f"range [{start}, {end}) is empty")


def test_a_subclass_with_derived_fields_needs_no_reduce():
    copy = _round_trip(RangeError(9, 4))
    assert (copy.start, copy.end, copy.length) == (9, 4, -5)
