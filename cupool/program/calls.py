"""Calling one declared op: its callable over the arrays of its tensors, checked.

``fn(*inputs, *updates, *outputs)`` is called with arrays over the tensors' bytes where the
plan put them; whatever it raises becomes an :class:`~cupool.program.errors.OpFailedError`
naming the op. Two mistakes that would otherwise give wrong results silently are caught:

- **an undeclared write** — the op writes into a tensor it declared as an input only (a
  plan may hold a copy of those bytes on the host, or recompute them, and the write would
  be lost or repeated). On the emulated device inputs are handed over as read-only NumPy
  views, so such a write raises at once; the op is then run again on scratch copies, one
  input read-only at a time, to name the tensor, and
  :class:`~cupool.program.errors.UndeclaredWriteError` is raised. CuPy arrays have no
  read-only flag: on a GPU the check is a checksum of every input before and after the
  op, made only when ``check_writes`` is on (it costs two reductions per input);
- **a returned result** — the op returns an array that is not one of its outputs or
  updates (so what it computed is lost): :class:`~cupool.program.errors.OpResultError`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from cupool.program.errors import OpFailedError, OpResultError, ProgramError, UndeclaredWriteError
from cupool.program.program import DeclaredOp
from cupool.program.tensors import array_module

_READ_ONLY = ("read-only", "not writeable")


def _read_only(array):
    if isinstance(array, np.ndarray):
        view = array.view()
        view.flags.writeable = False
        return view
    return array


def _checksum(array) -> int:
    """A checksum of the array's bytes (device side; one scalar copied back)."""
    raw = array.view("uint8").ravel()
    if raw.size == 0:
        return 0
    xp = array_module(raw)
    weights = xp.arange(1, raw.size + 1, dtype=xp.uint64)
    return int((raw.astype(xp.uint64) * weights).sum())


class OpCaller:
    """Calls declared ops (module docstring). ``gpu``: the arrays are CuPy arrays;
    ``check_writes``: check for undeclared writes (free on the emulated device; checksums
    on a GPU). ``iteration`` is the number errors report; the caller sets it."""

    def __init__(self, gpu: bool, check_writes: bool) -> None:
        self.gpu = gpu
        self.check_writes = check_writes
        self.iteration = 0

    def call(self, op: DeclaredOp, arrays: dict, names: dict) -> None:
        """Run ``op`` over ``arrays`` (tensor key → array; each key's array once). Raises
        the typed errors of the module docstring."""
        self.call_prepared(op, self.arguments(op, arrays), arrays, names)

    def arguments(self, op: DeclaredOp, arrays: dict) -> list:
        """``op``'s positional arguments over ``arrays``: its inputs (read-only views where
        the writes are checked on the emulated device), then its updates and outputs.
        Made once where the arrays stay (a planned step's fixed addresses)."""
        if self.check_writes and not self.gpu:
            args = [(_read_only(arrays[k]) if read_only else arrays[k])
                    for k, read_only in zip(op.inputs, op.read_only, strict=True)]
        else:
            args = [arrays[k] for k in op.inputs]
        for k in op.written_keys:
            args.append(arrays[k])
        return args

    def call_prepared(self, op: DeclaredOp, args: list, arrays: dict, names: dict) -> None:
        """Run ``op`` over ``args`` (made by :meth:`arguments` from ``arrays``)."""
        sums = None
        if self.check_writes and self.gpu:
            sums = {k: _checksum(arrays[k]) for k in dict.fromkeys(op.inputs)
                    if k not in op.writable}
        try:
            result = op.fn(*args)
        except Exception as exc:
            failure = self._failure(op, exc, arrays, names)
            if failure is exc:
                raise
            raise failure from exc
        if sums:
            for k, before in sums.items():
                if _checksum(arrays[k]) != before:
                    raise UndeclaredWriteError(op.name, op.index, names[k])
        if result is not None:
            _check_result(op, result, args[len(op.inputs):])

    def prepared(self, op: DeclaredOp, args: list, arrays: dict, names: dict,
                 sink) -> Callable[[], None]:
        """A call without arguments that runs ``op`` as :meth:`call_prepared` does and
        keeps its error in ``sink.failed`` instead of raising it; it runs nothing once
        ``sink.failed`` is set (an earlier op of the iteration failed). Made once for an
        op whose arrays stay where they are, it costs per call one Python frame besides
        the op's own."""
        if self.check_writes and self.gpu:  # checksums around the call
            def checked() -> None:
                if sink.failed is None:
                    try:
                        self.call_prepared(op, args, arrays, names)
                    except ProgramError as exc:
                        sink.failed = exc
            return checked
        fn, outputs = op.fn, args[len(op.inputs):]

        def call() -> None:
            if sink.failed is not None:
                return
            try:
                result = fn(*args)
            except Exception as exc:
                failure = self._failure(op, exc, arrays, names)
                if failure is not exc:
                    failure.__cause__ = exc
                sink.failed = failure
                return
            if result is not None:
                try:
                    _check_result(op, result, outputs)
                except ProgramError as exc:
                    sink.failed = exc
        return call

    def _failure(self, op: DeclaredOp, exc: Exception, arrays: dict,
                 names: dict) -> Exception:
        """The error ``op`` raising ``exc`` is reported as: a program error as it is; a
        write refused by a read-only input on the emulated device as the
        :class:`UndeclaredWriteError` naming the input; anything else as
        :class:`OpFailedError`."""
        if isinstance(exc, ProgramError):
            return exc
        if isinstance(exc, ValueError) and self.check_writes and not self.gpu and any(
                word in str(exc) for word in _READ_ONLY):
            return self._undeclared(op, arrays, names, op.writable)
        return OpFailedError(op.name, op.index, self.iteration, repr(exc))

    def _undeclared(self, op: DeclaredOp, arrays: dict, names: dict,
                    writable: frozenset) -> ProgramError:
        """Find which input the op wrote into by running it again on scratch copies, one
        input read-only at a time (nothing of the session's is touched)."""
        candidates = [k for k in dict.fromkeys(op.inputs) if k not in writable]
        for suspect in candidates:
            scratch = {k: np.array(a, copy=True) for k, a in arrays.items()}
            args = [(_read_only(scratch[k]) if k == suspect else scratch[k])
                    for k in op.inputs]
            args += [scratch[k] for k in (*op.updates, *op.output_keys)]
            try:
                op.fn(*args)
            except ValueError as exc:
                if any(word in str(exc) for word in _READ_ONLY):
                    return UndeclaredWriteError(op.name, op.index, names[suspect])
            except Exception:  # any other failure says nothing about this suspect
                continue
        label = names[candidates[0]] if len(candidates) == 1 else \
            " or ".join(names[k] for k in candidates)
        return UndeclaredWriteError(op.name, op.index, label)


def _check_result(op: DeclaredOp, result, writable_args) -> None:
    if result is None:
        return
    parts = result if isinstance(result, tuple) else (result,)
    for part in parts:
        if part is None or any(part is a for a in writable_args):
            continue
        if isinstance(part, np.ndarray) and any(
                isinstance(a, np.ndarray) and part.base is a for a in writable_args):
            continue
        raise OpResultError(op.name, op.index, type(part).__name__)


__all__ = ["OpCaller"]
