"""What a program's user holds: output specs, tensor handles, fetched values, and the array
module of the arrays an op is given.

A :class:`Tensor` is a handle, never the bytes: its bytes live wherever the session's plan
puts them (resident at a planned offset, on the host after a swap-out, or not at all until
recomputed), and an op's callable receives arrays over them only while it runs. Keys
identify a tensor within a program, the same in every iteration of the same program::

    ("p", n)        the n-th persistent tensor registered with the session
    ("t", i, k)     output k of op i of the iteration
"""

from __future__ import annotations

import math
import operator
import sys
from dataclasses import dataclass

import numpy as np

from cupool.program.errors import NotReadyError, SpecError
from cupool.program.tensor_methods import ArrayMethods


@dataclass(frozen=True)
class Spec:
    """An array's layout: ``shape`` (a tuple of ints >= 0) and ``dtype`` (a NumPy dtype);
    ``name`` names the tensor in errors and reports (optional)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    name: str = ""

    @property
    def nbytes(self) -> int:
        """Bytes the array needs (``prod(shape) * itemsize``)."""
        return math.prod(self.shape) * self.dtype.itemsize


_MADE: dict = {}
"""Specs :func:`make_spec` made from tuples: ``(shape, dtype[, name])`` → :class:`Spec`
(most programs declare the same few layouts in every iteration)."""
_LAYOUTS: dict = {}
"""Specs made from tensors: ``(shape, dtype)`` → ``Spec(shape, dtype)``."""
_MADE_LIMIT = 4096


def make_spec(op: str, value: object) -> Spec:
    """``value`` as a :class:`Spec`: a ``Spec``, a ``(shape, dtype)`` or ``(shape, dtype,
    name)`` tuple, or a :class:`Tensor` (its spec). :class:`SpecError` quotes a bad one."""
    if isinstance(value, Spec):
        return value
    if isinstance(value, Tensor):  # its layout as is (a registered array's, unchecked)
        layout = value.spec.shape, value.spec.dtype
        made = _LAYOUTS.get(layout)
        if made is None:
            if len(_LAYOUTS) >= _MADE_LIMIT:
                _LAYOUTS.clear()
            made = _LAYOUTS[layout] = Spec(*layout)
        return made
    if not isinstance(value, tuple) or len(value) not in (2, 3):
        raise SpecError(op, f"output spec (={value!r}) must be a cupool.Spec, a tensor or a "
                            f"(shape, dtype[, name]) tuple")
    exact = _exact(value)
    if exact:  # an equal tuple of the same exact types checks to the same Spec
        made = _MADE.get(value)
        if made is not None:
            return made
    made = spec(value[0], value[1], value[2] if len(value) == 3 else "", op=op)
    if exact:
        if len(_MADE) >= _MADE_LIMIT:
            _MADE.clear()
        _MADE[value] = made
    return made


def _exact(value: tuple) -> bool:
    """Whether ``value`` may key the spec cache: a hashable tuple of a shape made of
    ``int`` (not ``bool``, not a float equal to one) and a ``str`` name if any. Equal
    such tuples make equal specs (an equal dtype is the same NumPy dtype)."""
    shape = value[0]
    if type(shape) is not tuple or (len(value) == 3 and type(value[2]) is not str):
        return False
    for n in shape:
        if type(n) is not int:
            return False
    try:
        hash(value[1])
    except TypeError:
        return False
    return True


def spec(shape, dtype="float32", name: str = "", *, op: str = "spec") -> Spec:
    """A checked :class:`Spec` (``cupool.spec((64, 128), "float32")``)."""
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        dims = tuple(operator.index(n) for n in shape)
    except TypeError:
        raise SpecError(op, f"shape (={shape!r}) must be a tuple of ints") from None
    if any(n < 0 for n in dims):
        raise SpecError(op, f"shape (={dims!r}) must not be negative")
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise SpecError(op, f"dtype (={dtype!r}) must be a NumPy dtype") from None
    if dt.itemsize == 0 or dt.hasobject:
        raise SpecError(op, f"dtype (={dt}) must be a fixed-size, non-object dtype")
    return Spec(dims, dt, str(name))


class Tensor(ArrayMethods):
    """A handle on one array of a program (module docstring). ``name``, ``shape``,
    ``dtype`` and ``nbytes`` describe it; ``persistent`` says whether it lives across
    iterations (registered state) or is an op's output (alive until its iteration ends).
    Its operators and array methods declare ops of the iteration being declared
    (:mod:`cupool.program.tensor_methods`, ``it.xp``)."""

    __slots__ = ("iteration", "key", "name", "owner", "persistent", "released", "spec")

    def __init__(self, owner: object, key: tuple, spec: Spec, name: str,
                 iteration: int | None) -> None:
        # The compiled declaring (program/_declare.c) makes tensors by storing these
        # slots where it checked, at import, that doing so gives what this makes.
        self.owner, self.key, self.spec, self.name = owner, key, spec, name
        self.iteration = iteration
        self.persistent = iteration is None
        self.released = False

    @property
    def shape(self) -> tuple[int, ...]:
        return self.spec.shape

    @property
    def dtype(self) -> np.dtype:
        return self.spec.dtype

    @property
    def nbytes(self) -> int:
        return self.spec.nbytes

    def __repr__(self) -> str:
        what = "persistent" if self.persistent else f"iteration {self.iteration}"
        state = ", released" if self.released else ""
        return (f"<cupool.Tensor {self.name!r} {self.shape} {self.dtype} "
                f"({what}{state})>")


class Fetch:
    """A tensor's value copied to the host at the end of its iteration: ``value`` (a NumPy
    array) once the iteration's ``with`` block has ended; :class:`NotReadyError` before."""

    __slots__ = ("_value", "tensor")

    def __init__(self, tensor: Tensor) -> None:
        self.tensor = tensor
        self._value = None

    @property
    def ready(self) -> bool:
        return self._value is not None

    @property
    def value(self) -> np.ndarray:
        if self._value is None:
            raise NotReadyError(self.tensor.name)
        return self._value

    def _set(self, value: np.ndarray) -> None:
        self._value = value

    def __repr__(self) -> str:
        return f"<cupool.Fetch {self.tensor.name!r} {'ready' if self.ready else 'pending'}>"


def array_module(*arrays):
    """The array module of ``arrays``: ``cupy`` when any of them is a ``cupy.ndarray``, else
    ``numpy`` (as ``cupy.get_array_module``, without importing CuPy where nobody did).
    Op bodies written with it run unchanged on the emulated device (NumPy views of its
    memory) and on a GPU (CuPy arrays)."""
    cupy = sys.modules.get("cupy")
    if cupy is not None and any(isinstance(a, cupy.ndarray) for a in arrays):
        return cupy
    return np


def to_host(array) -> np.ndarray:
    """A C-contiguous NumPy copy of ``array`` (NumPy or CuPy; a 0-d array stays 0-d)."""
    get = getattr(array, "get", None)
    if get is not None and not isinstance(array, np.ndarray):
        array = get()
    return np.array(array, copy=True, order="C")


__all__ = ["Fetch", "Spec", "Tensor", "array_module", "make_spec", "spec", "to_host"]
