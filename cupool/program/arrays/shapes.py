"""Result shapes and dtypes by NumPy's rules, found without computing the result.

Shapes by arithmetic (broadcasting, matmul and dot, einsum's subscripts, reductions,
concatenation); dtypes by NumPy itself on tiny stand-ins: the ufunc or function applied to
0-d or one-element arrays of the operands' dtypes (Python scalars passed as they are, so
NumPy 2's weak promotion of ``x * 0.5`` applies), cached per combination. A rule that
refuses raises :class:`Refusal`, which the namespace turns into its typed error with the
function's name, the operands' shapes and the call's source line.
"""

from __future__ import annotations

import math
import operator
import warnings

import numpy as np

SUPPORTED_KINDS = frozenset("biufc")
"""Dtype kinds a device array holds: bool, signed and unsigned ints, floats, complex."""
_UNSUPPORTED_CHARS = frozenset("gG")  # long double, complex long double: not on a GPU


class Refusal(Exception):
    """A rule refused the call: ``kind`` is ``"shape"``, ``"dtype"``, ``"unsupported"`` or
    ``"read-only"``; ``detail`` says why."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind, self.detail = kind, detail


def check_dtype(dtype) -> np.dtype:
    """``dtype`` as a NumPy dtype a device holds, or a ``"dtype"`` refusal."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise Refusal("dtype", f"{dtype!r} is not a dtype") from None
    if dt.kind not in SUPPORTED_KINDS or dt.char in _UNSUPPORTED_CHARS:
        raise Refusal("dtype", f"dtype {dt} cannot be held by the device (bool, integer, "
                               f"float and complex dtypes up to 128 bits can)")
    return dt


# -- shapes ------------------------------------------------------------------------------
def broadcast(*shapes: tuple) -> tuple:
    """NumPy's broadcast of ``shapes``."""
    first = shapes[0]
    if all(s == first for s in shapes):
        return first
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise Refusal("shape", "the operands do not broadcast together") from None


def normalize_axis(axis: int, ndim: int) -> int:
    try:
        axis = operator.index(axis)
    except TypeError:
        raise Refusal("unsupported", f"axis (={axis!r}) must be an int") from None
    if not -ndim <= axis < ndim:
        raise Refusal("shape", f"axis {axis} is out of bounds for {ndim} dimensions")
    return axis % ndim


_AXES: dict = {}


def normalize_axes(axis, ndim: int) -> tuple | None:
    """``axis`` (None, an int or a tuple of ints) as a sorted tuple of distinct axes, or
    ``None`` for all of them (cached per ``(axis, ndim)`` where ``axis`` is an int or a
    tuple of ints)."""
    if axis is None:
        return None
    cls = axis.__class__
    key = (cls, axis, ndim) if cls is int or (cls is tuple and all(
        a.__class__ is int for a in axis)) else None
    if key is not None:
        found = _AXES.get(key)
        if found is not None:
            return found
    axes = (axis,) if not isinstance(axis, (tuple, list)) else tuple(axis)
    normal = tuple(normalize_axis(a, ndim) for a in axes)
    if len(set(normal)) != len(normal):
        raise Refusal("shape", f"axis {axis!r} repeats an axis")
    normal = tuple(sorted(normal))
    if key is not None:
        if len(_AXES) >= _LIMIT:
            _AXES.clear()
        _AXES[key] = normal
    return normal


def reduced(shape: tuple, axes: tuple | None, keepdims: bool) -> tuple:
    """The shape of a reduction of ``shape`` over ``axes`` (``None``: all)."""
    if axes is None:
        return (1,) * len(shape) if keepdims else ()
    if keepdims:
        return tuple(1 if i in axes else n for i, n in enumerate(shape))
    return tuple(n for i, n in enumerate(shape) if i not in axes)


def matmul(a: tuple, b: tuple) -> tuple:
    """NumPy's ``matmul`` of shapes ``a`` and ``b`` (1-D operands promoted and removed)."""
    if not a or not b:
        raise Refusal("shape", "matmul does not take 0-d operands (use multiply)")
    left = (1, *a) if len(a) == 1 else a
    right = (*b, 1) if len(b) == 1 else b
    if left[-1] != right[-2]:
        raise Refusal("shape", f"the inner sizes differ: {left[-1]} (last axis of the first) "
                               f"and {right[-2]} (the second's "
                               f"{'only' if len(b) == 1 else 'second-to-last'} axis)")
    try:
        batch = tuple(np.broadcast_shapes(left[:-2], right[:-2]))
    except ValueError:
        raise Refusal("shape", "the batch axes do not broadcast together") from None
    out = (*batch, left[-2], right[-1])
    if len(a) == 1:
        out = (*out[:-2], out[-1])
    if len(b) == 1:
        out = out[:-1]
    return out


def dot(a: tuple, b: tuple) -> tuple:
    """NumPy's ``dot`` of shapes ``a`` and ``b``."""
    if not a or not b:  # a 0-d operand: dot multiplies
        return a or b
    if len(b) == 1:
        if a[-1] != b[0]:
            raise Refusal("shape", f"the summed sizes differ: {a[-1]} and {b[0]}")
        return a[:-1]
    inner = b[-2]
    if a[-1] != inner:
        raise Refusal("shape", f"the summed sizes differ: {a[-1]} (last axis of the first) "
                               f"and {inner} (second-to-last of the second)")
    return (*a[:-1], *b[:-2], b[-1])


def einsum(subscripts: str, shapes: tuple) -> tuple:
    """The output shape of ``np.einsum(subscripts, *operands)`` (explicit or implicit
    output; no ``...``)."""
    text = subscripts.replace(" ", "")
    if "." in text:
        raise Refusal("unsupported", "einsum subscripts with '...' are outside the subset")
    inputs, arrow, output = text.partition("->")
    parts = inputs.split(",")
    if len(parts) != len(shapes):
        raise Refusal("shape", f"{len(parts)} subscript groups for {len(shapes)} operands")
    sizes: dict = {}
    counts: dict = {}
    for part, shape in zip(parts, shapes, strict=True):
        if not part.isalpha() and part:
            raise Refusal("unsupported", f"einsum subscript {part!r} is not letters")
        if len(part) != len(shape):
            raise Refusal("shape", f"subscripts {part!r} for an operand of {len(shape)} "
                                   f"dimensions")
        for label, n in zip(part, shape, strict=True):
            counts[label] = counts.get(label, 0) + 1
            known = sizes.get(label)
            if known is None or known == 1:
                sizes[label] = n
            elif n not in (1, known):
                raise Refusal("shape", f"label {label!r} has sizes {known} and {n}")
    if not arrow:
        output = "".join(sorted(label for label, c in counts.items() if c == 1))
    if len(set(output)) != len(output) or any(label not in sizes for label in output):
        raise Refusal("shape", f"output subscripts {output!r} must be distinct input labels")
    return tuple(sizes[label] for label in output)


def concatenate(shapes: tuple, axis) -> tuple:
    if axis is None:
        return (sum(math.prod(s) for s in shapes),)
    first = shapes[0]
    if not first:
        raise Refusal("shape", "0-d operands cannot be concatenated")
    axis = normalize_axis(axis, len(first))
    for s in shapes[1:]:
        if len(s) != len(first) or any(m != n for i, (m, n) in enumerate(zip(s, first, strict=True))
                                        if i != axis):
            raise Refusal("shape", "the operands' shapes differ outside the axis joined")
    return (*first[:axis], sum(s[axis] for s in shapes), *first[axis + 1:])


def stack(shapes: tuple, axis: int) -> tuple:
    first = shapes[0]
    if any(s != first for s in shapes):
        raise Refusal("shape", "stacked operands must have one shape")
    axis = normalize_axis(axis, len(first) + 1)
    return (*first[:axis], len(shapes), *first[axis:])


def reshaped(shape: tuple, new) -> tuple:
    """``new`` (ints, one of them possibly -1) for an array of ``shape``."""
    if isinstance(new, (int, np.integer)):
        new = (new,)
    try:
        new = tuple(operator.index(n) for n in new)
    except TypeError:
        raise Refusal("unsupported", f"shape {new!r} must be a tuple of ints") from None
    total = math.prod(shape)
    unknown = [i for i, n in enumerate(new) if n == -1]
    if len(unknown) > 1 or any(n < -1 for n in new):
        raise Refusal("shape", f"shape {new} may hold one -1 and no other negative size")
    if unknown:
        known = math.prod(n for n in new if n != -1)
        if known == 0 or total % known:
            raise Refusal("shape", f"cannot reshape {total} elements into {new}")
        new = tuple(total // known if n == -1 else n for n in new)
    if math.prod(new) != total:
        raise Refusal("shape", f"cannot reshape {total} elements into {new}")
    return new


def indexed(shape: tuple, key) -> tuple:
    """The shape of ``x[key]`` for an array of ``shape`` (basic and integer-array keys:
    arrays given as ``np.broadcast_to`` stand-ins of their shape), from NumPy on a
    zero-strided stand-in of ``shape`` (nothing is read)."""
    stand_in = np.broadcast_to(np.empty((), np.bool_), shape)
    try:
        return stand_in[key].shape
    except IndexError as exc:
        raise Refusal("shape", str(exc)) from None
    except (TypeError, ValueError) as exc:
        raise Refusal("unsupported", f"index {key!r}: {exc}") from None


# -- dtypes --------------------------------------------------------------------------------
_DTYPES: dict = {}
_LIMIT = 4096


def _stand_in(value):
    """A one-element array of ``value``'s dtype (a tensor's or view's: ``dtype``
    attribute), or the Python/NumPy scalar itself."""
    dtype = getattr(value, "dtype", None)
    if dtype is None or isinstance(value, np.generic):
        return value
    return np.ones((), dtype)


def result_dtype(key, compute, *operands) -> np.dtype:
    """NumPy's result dtype of ``compute(*stand_ins)`` for ``operands`` (tensors give their
    dtype; scalars are passed as they are), cached under ``key``."""
    found = _DTYPES.get(key)
    if found is not None:
        return found
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a stand-in's values mean nothing
            result = compute(*[_stand_in(v) for v in operands])
    except (TypeError, OverflowError, ValueError) as exc:
        raise Refusal("dtype", str(exc).splitlines()[0]) from None
    dt = check_dtype(result if isinstance(result, np.dtype) else np.asarray(result).dtype)
    if len(_DTYPES) >= _LIMIT:
        _DTYPES.clear()
    _DTYPES[key] = dt
    return dt


__all__ = ["SUPPORTED_KINDS", "Refusal", "broadcast", "check_dtype", "concatenate", "dot",
           "einsum", "indexed", "matmul", "normalize_axes", "normalize_axis", "reduced",
           "reshaped", "result_dtype", "stack"]
