"""The argument checks every device operation shares: sizes, pointers and array layouts.

Each returns the checked value in its plain form (an ``int``, or a NumPy dtype and a shape
tuple) or raises :class:`~cupool.devices.errors.InvalidSizeError` quoting the bad value and
the operation that received it. The base :class:`~cupool.devices.protocol.Device` runs them
before any backend hook, so backends never repeat them.
"""

from __future__ import annotations

import operator

import numpy as np

from cupool.devices.errors import InvalidSizeError


def _index(operation: str, name: str, value: object, what: str) -> int:
    """``value`` as an ``int`` (NumPy integers too), else :class:`InvalidSizeError` saying
    it must be ``what``; a bool is refused by name."""
    if isinstance(value, bool):
        raise InvalidSizeError(operation, name, value, f"must be {what}, not a bool")
    try:
        return operator.index(value)
    except TypeError:
        raise InvalidSizeError(operation, name, value, f"must be {what}") from None


def check_size(operation: str, name: str, value: object, *, allow_zero: bool = False) -> int:
    """``value`` as an ``int`` that is ``> 0`` (``>= 0`` with ``allow_zero``), else
    :class:`InvalidSizeError` quoting it. NumPy integers are accepted; bools and
    floats are not."""
    number = _index(operation, name, value, "an int")
    if number < 0 or (number == 0 and not allow_zero):
        raise InvalidSizeError(operation, name, number, "must be >= 0" if allow_zero
                               else "must be > 0")
    return number


def check_layout(operation: str, nbytes: int, dtype: object,
                 shape: object) -> tuple[np.dtype, tuple[int, ...]]:
    """``(np.dtype, shape)`` for an array over ``nbytes`` bytes, else
    :class:`InvalidSizeError` quoting the bad dtype or shape (see
    :meth:`~cupool.devices.protocol.Device.array_at`)."""
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise InvalidSizeError(operation, "dtype", dtype, "must be a NumPy dtype") from None
    if dtype.itemsize == 0 or dtype.hasobject:
        raise InvalidSizeError(operation, "dtype", str(dtype),
                               "must be a fixed-size, non-object dtype")
    if shape is None:
        if nbytes % dtype.itemsize:
            raise InvalidSizeError(operation, "nbytes", nbytes,
                                   f"must be a multiple of the {dtype} item size "
                                   f"({dtype.itemsize}) for a flat array")
        return dtype, (nbytes // dtype.itemsize,)
    try:
        shape = tuple(operator.index(n) for n in shape)
    except TypeError:
        raise InvalidSizeError(operation, "shape", shape, "must be a tuple of ints") from None
    if any(n < 0 for n in shape):
        raise InvalidSizeError(operation, "shape", shape, "must not be negative")
    needed = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if needed > nbytes:
        raise InvalidSizeError(operation, "shape", shape,
                               f"needs {needed} bytes of {dtype}, only {nbytes} are given")
    return dtype, shape


def check_pointer(operation: str, name: str, value: object) -> int:
    """``value`` as a non-negative ``int`` address, else :class:`InvalidSizeError`."""
    number = _index(operation, name, value, "an int address")
    if number < 0:
        raise InvalidSizeError(operation, name, number, "must be >= 0")
    return number
