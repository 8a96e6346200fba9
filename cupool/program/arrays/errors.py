"""Typed, picklable errors of the array namespace, raised when a call is made (not when the
step runs), each naming the function, the operands' shapes and the source line of the call.

    ProgramError
      ArrayCallError               the base: ``function``, ``shapes``, ``where``, ``detail``
        UnsupportedFunctionError   a function, method or argument outside the subset
          MissingFunctionError     ... looked up as an attribute (also an AttributeError)
        ShapeMismatchError         operands that do not broadcast, a matmul's inner sizes,
                                   an axis out of range (also a ValueError)
        ArrayDtypeError            a dtype the device cannot hold, a cast an in-place
                                   write refuses (also a TypeError)
        ReadOnlyWriteError         a write into a read-only tensor or a view of one
        ArrayValueError            a tensor's value asked for while the step is declared
                                   (``float(t)``, ``bool(t)``): fetch it with ``it.fetch``
        ArrayScopeError            a tensor of another session or of an iteration that
                                   ended (also a ``TensorScopeError``)
        ArrayReleasedError         a released persistent tensor (also a
                                   ``TensorReleasedError``)
        ArraySessionClosedError    a call on a closed session (also a
                                   ``SessionClosedError``)

``shapes`` holds one entry per operand: its shape (a tuple), or the ``repr`` of a
non-array operand (a Python scalar, a ``None`` axis...). ``where`` is ``"file.py:42"``.
"""

from __future__ import annotations

from cupool.program.errors import (
    ProgramError,
    SessionClosedError,
    TensorReleasedError,
    TensorScopeError,
)

IT_OP = "declare it with it.op(fn, *inputs, out=(shape, dtype)) (a custom op)"


def _shown(shapes: tuple) -> str:
    return ", ".join(str(s) for s in shapes)


class ArrayCallError(ProgramError):
    """The call of ``function`` with operands of ``shapes`` at ``where`` (``file:line``) was
    refused: ``detail`` says why."""

    def __init__(self, function: str, shapes: tuple, where: str, detail: str) -> None:
        self.function, self.shapes, self.where, self.detail = function, tuple(shapes), where, \
            detail
        ProgramError.__init__(self, f"{where}: {function}({_shown(self.shapes)}): {detail}")


class UnsupportedFunctionError(ArrayCallError):
    """``function`` (or one of its arguments) is outside the namespace's subset: the message
    points to ``it.op``, which declares any callable as an op."""


class MissingFunctionError(UnsupportedFunctionError, AttributeError):
    """An attribute of the namespace or of a tensor that the subset does not have."""


class ShapeMismatchError(ArrayCallError, ValueError):
    """The operands' shapes do not fit the function (broadcasting, a matmul's inner size,
    an axis, a reshape's size)."""


class ArrayDtypeError(ArrayCallError, TypeError):
    """A dtype the device cannot hold, or a cast the call refuses."""


class ReadOnlyWriteError(ArrayCallError):
    """A write into a read-only tensor (uploaded from a read-only host array) or into a view
    of one (or a broadcast view)."""


class ArrayValueError(ArrayCallError):
    """A tensor's value was asked for while its step is being declared: the step runs when
    the ``with`` block ends; fetch values with ``it.fetch``."""


class ArrayScopeError(ArrayCallError, TensorScopeError):
    """A tensor of another session, or of an iteration that has ended; ``tensor`` names
    it."""

    def __init__(self, function: str, shapes: tuple, where: str, detail: str,
                 tensor: str = "") -> None:
        super().__init__(function, shapes, where, detail)
        self.tensor, self.operation, self.why = tensor, function, detail


class ArrayReleasedError(ArrayCallError, TensorReleasedError):
    """A persistent tensor used after ``session.release``; ``tensor`` names it."""

    def __init__(self, function: str, shapes: tuple, where: str, detail: str,
                 tensor: str = "") -> None:
        super().__init__(function, shapes, where, detail)
        self.tensor, self.operation = tensor, function


class ArraySessionClosedError(ArrayCallError, SessionClosedError):
    """A call made after the tensors' session was closed."""

    def __init__(self, function: str, shapes: tuple, where: str, detail: str) -> None:
        super().__init__(function, shapes, where, detail)
        self.operation = function


__all__ = ["IT_OP", "ArrayCallError", "ArrayDtypeError", "ArrayReleasedError",
           "ArrayScopeError", "ArraySessionClosedError", "ArrayValueError",
           "MissingFunctionError", "ReadOnlyWriteError", "ShapeMismatchError",
           "UnsupportedFunctionError"]
