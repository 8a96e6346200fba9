"""The namespace's rules: for each kind of call, its result's shape and dtype by NumPy's
rules (:mod:`cupool.program.arrays.shapes`) and the implementation its op body runs
(:mod:`cupool.program.arrays.bodies`).

A rule of an op with an output is ``rule(args, params) -> (shape, dtype, impl)``; a rule of
an update is ``rule(target, args, params) -> impl``. ``args`` are the call's operands
(tensors and views give their shape and dtype; Python and NumPy scalars are passed as they
are, so NumPy 2's weak promotion applies), ``params`` what else the call fixes (a ufunc's
name, axes, a key). A rule that refuses raises :class:`~cupool.program.arrays.shapes.
Refusal`. Implementations are made once per parameters (:func:`implementation`).
"""

from __future__ import annotations

import math

import numpy as np

from cupool.program.arrays import bodies, shapes
from cupool.program.arrays.shapes import Refusal
from cupool.program.arrays.views import View
from cupool.program.tensors import Tensor

ELEMENTWISE_BINARY = {
    "add": "add", "subtract": "subtract", "multiply": "multiply", "divide": "divide",
    "true_divide": "divide", "floor_divide": "floor_divide", "remainder": "remainder",
    "mod": "remainder", "pow": "power", "power": "power", "maximum": "maximum",
    "minimum": "minimum", "equal": "equal", "not_equal": "not_equal", "less": "less",
    "less_equal": "less_equal", "greater": "greater", "greater_equal": "greater_equal",
    "logical_and": "logical_and", "logical_or": "logical_or", "logical_xor": "logical_xor",
    "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
    "arctan2": "arctan2", "atan2": "arctan2", "hypot": "hypot", "copysign": "copysign",
    "logaddexp": "logaddexp",
}
"""Namespace function -> NumPy/CuPy ufunc, for the elementwise functions of two operands."""

ELEMENTWISE_UNARY = {
    "negative": "negative", "positive": "positive", "abs": "absolute",
    "absolute": "absolute", "exp": "exp", "expm1": "expm1", "log": "log", "log1p": "log1p",
    "log2": "log2", "log10": "log10", "sqrt": "sqrt", "square": "square", "tanh": "tanh",
    "sinh": "sinh", "cosh": "cosh", "sin": "sin", "cos": "cos", "tan": "tan",
    "arctan": "arctan", "atan": "arctan", "arcsin": "arcsin", "asin": "arcsin",
    "arccos": "arccos", "acos": "arccos", "arctanh": "arctanh", "atanh": "arctanh",
    "arcsinh": "arcsinh", "asinh": "arcsinh", "arccosh": "arccosh", "acosh": "arccosh",
    "floor": "floor", "ceil": "ceil", "trunc": "trunc", "sign": "sign",
    "logical_not": "logical_not", "invert": "invert", "bitwise_invert": "invert",
    "isnan": "isnan", "isinf": "isinf", "isfinite": "isfinite", "reciprocal": "reciprocal",
}
"""Namespace function -> ufunc, for the elementwise functions of one operand."""

REDUCTIONS = ("sum", "prod", "mean", "var", "std", "max", "min", "argmax", "argmin", "any",
              "all")
_ASSIGNED = frozenset({"mean", "var", "std"})
_NEEDS_ELEMENTS = frozenset({"max", "min", "argmax", "argmin"})


def shape_of(value):
    shape = getattr(value, "shape", None)
    return tuple(shape) if shape is not None else ()


def constant_key(value):
    cls = value.__class__
    if cls is float:
        return ("c", cls, value, math.copysign(1.0, value))
    if cls is complex:
        return ("c", cls, value, math.copysign(1.0, value.real), math.copysign(1.0, value.imag))
    if isinstance(value, np.generic):
        return ("c", cls, value.tobytes())
    return ("c", cls, value)


def dtype_key(value):
    """What decides ``value``'s part in a result dtype: a tensor's dtype, a NumPy scalar's,
    a Python int's value (NumPy 2 refuses one its partner's dtype cannot hold), another
    Python scalar's type."""
    dtype = getattr(value, "dtype", None)
    if dtype is not None:
        return dtype
    return ("int", value) if value.__class__ is int else value.__class__


def elementwise_rule(args, ufunc_name):
    shape = shapes.broadcast(*[shape_of(a) for a in args])
    fn = getattr(np, ufunc_name)
    dtype = shapes.result_dtype((ufunc_name, *map(dtype_key, args)), fn, *args)
    return shape, dtype, implementation(("ufunc", ufunc_name), bodies.ufunc, ufunc_name)


def power_operator_rule(args, _params):
    shape = shapes.broadcast(*[shape_of(a) for a in args])
    dtype = shapes.result_dtype(("**", *map(dtype_key, args)), lambda a, b: a ** b, *args)
    return shape, dtype, bodies.power_operator


_IMPLS: dict = {}


def implementation(key, make, *args, **kwargs):
    """``make(*args, **kwargs)``, made once per ``key``."""
    found = _IMPLS.get(key)
    if found is None:
        if len(_IMPLS) >= 4096:
            _IMPLS.clear()
        found = _IMPLS[key] = make(*args, **kwargs)
    return found


def as_shape(shape) -> tuple:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        dims = tuple(int(n) for n in shape)
    except TypeError:
        raise Refusal("unsupported", f"shape {shape!r} must be a tuple of ints") from None
    if any(n < 0 for n in dims):
        raise Refusal("shape", f"shape {dims} has a negative size")
    return dims


def dtype_option(dtype) -> tuple:
    return () if dtype is None else (("dtype", shapes.check_dtype(dtype)),)


def where_rule(args, _params):
    shape = shapes.broadcast(*[shape_of(a) for a in args])
    dtype = shapes.result_dtype(("where", *map(dtype_key, args)), np.where, *args)
    return shape, dtype, implementation("where", _where_impl)


def _where_impl():
    def impl(condition, a, b, out):
        out[...] = bodies._mod(out).where(condition, a, b)

    return impl


def clip_rule(args, _params):
    x, low, high = args
    if low is None and high is None:
        raise Refusal("unsupported", "clip needs min or max")
    present = [a for a in args if a is not None]
    shape = shapes.broadcast(*[shape_of(a) for a in present])
    if shape != shape_of(x):
        raise Refusal("shape", "the bounds must broadcast to x's shape")
    dtype = shapes.result_dtype(("clip", *(dtype_key(a) if a is not None else None
                                           for a in args)), np.clip, *args)
    return shape, dtype, bodies.clip


def round_rule(args, decimals):
    (x,) = args
    dtype = shapes.result_dtype(("round", dtype_key(x)), np.round, x)
    return shape_of(x), dtype, implementation(("round", decimals), bodies.rounded, decimals)


def cast_rule(args, dtype):
    (x,) = args
    return shape_of(x), x.dtype if dtype is None else dtype, bodies.cast


def reshape_copy_rule(args, new):
    (x,) = args
    return new, x.dtype, bodies.reshaped_copy


def linear_rule(args, name):
    a, b = args
    for value in args:
        if not isinstance(value, (Tensor, View)):
            raise Refusal("unsupported", f"{name} takes two tensors (use multiply for a "
                                         f"scalar)")
    shape = (shapes.matmul if name == "matmul" else shapes.dot)(shape_of(a), shape_of(b))
    dtype = shapes.result_dtype((name, a.dtype, b.dtype),
                                lambda x, y: getattr(np, name)(x.reshape(1, 1),
                                                               y.reshape(1, 1)), a, b)
    return shape, dtype, implementation(("linear", name), bodies.linear, name)


def einsum_rule(args, subscripts):
    for value in args:
        if not isinstance(value, (Tensor, View)):
            raise Refusal("unsupported", "einsum takes tensors")
    shape = shapes.einsum(subscripts, tuple(shape_of(a) for a in args))
    dtype = shapes.result_dtype(("einsum", *(a.dtype for a in args)), np.result_type, *args)
    if len(args) == 1:
        return shape, dtype, implementation(("einsum1", subscripts), _einsum_one, subscripts)
    return shape, dtype, implementation(("einsum", subscripts), bodies.einsum, subscripts)


def _einsum_one(subscripts: str):
    def impl(a, out):
        xp = bodies._mod(out)
        if xp is np:
            np.einsum(subscripts, a, out=out)
        else:
            out[...] = xp.einsum(subscripts, a)

    return impl


def _reduction_rule(name: str):
    def rule(args, params):
        (x,) = args
        if not isinstance(x, (Tensor, View)):
            raise Refusal("unsupported", f"{name} takes a tensor")
        axes, keepdims, options = params
        shape = shape_of(x)
        if name in _NEEDS_ELEMENTS:
            if name in ("argmax", "argmin") and axes is not None and len(axes) > 1:
                raise Refusal("unsupported", f"{name} takes one axis or None")
            covered = shape if axes is None else tuple(shape[a] for a in axes)
            if any(n == 0 for n in covered):
                raise Refusal("shape", f"{name} of an empty axis has no value")
        out_shape = shapes.reduced(shape, axes, keepdims)
        kwargs = dict(options)
        fn = getattr(np, name)
        dtype = shapes.result_dtype((name, x.dtype, options),
                                    lambda v: fn(v.reshape(1), **kwargs), x)
        axis = axes if axes is None or len(axes) != 1 or name not in ("argmax", "argmin") \
            else axes[0]
        make = bodies.assigned_reduction if name in _ASSIGNED else bodies.reduction
        impl = implementation((name, axis, keepdims, options), make, name, axis, keepdims, **kwargs)
        return out_shape, dtype, impl

    return rule


REDUCE_RULES = {name: _reduction_rule(name) for name in REDUCTIONS}


def join_rule(args, params):
    name, axis = params
    if not args:
        raise Refusal("shape", f"{name} needs at least one array")
    for value in args:
        if not isinstance(value, (Tensor, View)):
            raise Refusal("unsupported", f"{name} takes tensors")
    shape_list = tuple(shape_of(a) for a in args)
    shape = (shapes.concatenate if name == "concatenate" else shapes.stack)(shape_list, axis)
    dtype = shapes.result_dtype((name, *(a.dtype for a in args)), np.result_type, *args)
    return shape, dtype, implementation(("join", name, axis), bodies.joined, name, axis)


def gather_rule(args, template):
    x, *indices = args
    key = _stand_in_key(template, indices)
    return shapes.indexed(shape_of(x), key), x.dtype, implementation(("gather", template),
                                                             bodies.gather, template)


def _stand_in_key(template, indices) -> tuple:
    zero = np.zeros((), np.intp)
    return tuple(np.broadcast_to(zero, shape_of(indices[item[1]]))
                 if isinstance(item, tuple) and item[0] == "a"
                 else slice(*item[1:]) if isinstance(item, tuple) else item
                 for item in template)


def take_rule(args, axis):
    x, indices = args
    if indices.dtype.kind not in "iu":
        raise Refusal("dtype", f"take's indices must hold integers, not {indices.dtype}")
    shape = shape_of(x)
    if axis is None:
        out = shape_of(indices)
    else:
        a = shapes.normalize_axis(axis, len(shape))
        out = (*shape[:a], *shape_of(indices), *shape[a + 1:])
    return out, x.dtype, implementation(("take", axis), bodies.take, axis)


def fill_rule(args, params):
    shape, dtype, value_key, value = params
    return shape, dtype, implementation(("fill", dtype, value_key), bodies.fill, value)


def arange_rule(args, params):
    shape, dtype, _key, (start, stop, step) = params
    return shape, dtype, bodies.arange(start, stop, step)


def inplace_rule(target, args, ufunc):
    (value,) = args
    shape = shape_of(target)
    if ufunc == "matmul":
        if not isinstance(value, (Tensor, View)):
            raise Refusal("unsupported", "@= takes a tensor")
        result = shapes.matmul(shape, shape_of(value))
    else:
        result = shapes.broadcast(shape, shape_of(value))
    if result != shape:
        raise Refusal("shape", f"the result's shape {result} is not the target's {shape}")
    compute = (lambda a, b: a ** b) if ufunc == "pow" else (
        (lambda a, b: np.matmul(a.reshape(1, 1), b.reshape(1, 1))) if ufunc == "matmul"
        else getattr(np, ELEMENTWISE_BINARY[ufunc]))
    dtype = shapes.result_dtype(("in place", ufunc, target.dtype, dtype_key(value)), compute,
                                target, value)
    if not np.can_cast(dtype, target.dtype, "same_kind"):
        raise Refusal("dtype", f"the result ({dtype}) cannot be cast to the target's dtype "
                               f"({target.dtype}) by the rule 'same_kind'")
    return implementation(("inplace", ufunc), bodies.inplace, ufunc)


def set_rule(target, args, params):
    kind, key = params
    shape = shape_of(target)
    if kind == "basic":
        (value,) = args
        selected = shapes.indexed(shape, tuple(slice(*i[1:]) if isinstance(i, tuple) else i
                                               for i in key))
        impl = implementation(("set", key), bodies.set_basic,
                     tuple(slice(*i[1:]) if isinstance(i, tuple) else i for i in key))
    else:
        *indices, value = args
        selected = shapes.indexed(shape, _stand_in_key(key, indices))
        impl = implementation(("set indexed", key), bodies.set_indexed, key)
    if shapes.broadcast(shape_of(value), selected) != selected:
        raise Refusal("shape", f"a value of shape {shape_of(value)} does not fit "
                               f"the {selected} elements selected")
    _check_value_dtype(value)
    return impl


def add_at_rule(target, args, template):
    *indices, value = args
    selected = shapes.indexed(shape_of(target), _stand_in_key(template, indices))
    if shapes.broadcast(shape_of(value), selected) != selected:
        raise Refusal("shape", f"values of shape {shape_of(value)} do not fit the "
                               f"{selected} elements selected")
    _check_value_dtype(value)
    dtype = shapes.result_dtype(("add.at", target.dtype, dtype_key(value)), np.add, target,
                                value)
    if not np.can_cast(dtype, target.dtype, "same_kind"):
        raise Refusal("dtype", f"the sum ({dtype}) cannot be cast to the target's dtype "
                               f"({target.dtype})")
    return implementation(("add.at", template), bodies.add_at, template)


def _check_value_dtype(value) -> None:
    dtype = getattr(value, "dtype", None)
    if dtype is not None:
        shapes.check_dtype(dtype)


__all__ = ["ELEMENTWISE_BINARY", "ELEMENTWISE_UNARY", "REDUCE_RULES", "REDUCTIONS",
           "add_at_rule", "arange_rule", "as_shape", "cast_rule", "clip_rule",
           "constant_key", "dtype_key", "dtype_option", "einsum_rule", "elementwise_rule",
           "fill_rule", "gather_rule", "implementation", "inplace_rule", "join_rule",
           "linear_rule", "power_operator_rule", "reshape_copy_rule", "round_rule",
           "set_rule", "shape_of", "take_rule", "where_rule"]
