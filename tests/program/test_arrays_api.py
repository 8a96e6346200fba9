"""Array-API code runs unchanged on a session's tensors: every function of the supported
subset, called through ``x.__array_namespace__()``, gives the same bytes (dtype, shape,
values) as ``array-api-strict`` on NumPy for inputs Hypothesis generates; the NumPy-only
functions of the subset (``dot``, ``einsum``, ``swapaxes``, ``add.at``, item assignment...)
give the bytes NumPy gives. The tensors are an ``EagerSession``'s, whose ops run at once
through the same namespace, shape rules and op bodies as a planned session's."""

from __future__ import annotations

import array_api_strict as strict
import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cupool
from cupool.program.arrays.namespace import ArrayNamespace
from cupool.program.arrays.rules import ELEMENTWISE_BINARY, ELEMENTWISE_UNARY

FEW = settings(max_examples=12, deadline=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
EACH = settings(FEW, max_examples=4)
"""Per function of a list (each function is a case of its own, so every one is compared in
every run): a few generated inputs each."""
FLOATS = st.sampled_from([np.float32, np.float64])
INTS = st.sampled_from([np.int8, np.int32, np.int64, np.uint8])


def _values(dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return st.floats(-4, 4, width=dtype.itemsize * 8, allow_subnormal=False)
    if dtype.kind == "b":
        return st.booleans()
    info = np.iinfo(dtype)
    return st.integers(max(info.min, -50), min(info.max, 50))


def arrays(dtype, shape):
    return hnp.arrays(dtype, shape, elements=_values(dtype))


def _host(result) -> np.ndarray:
    return np.from_dlpack(result) if not isinstance(result, np.ndarray) else result


def run_both(fn, *host):
    """``fn(xp, *arrays)`` on array-api-strict arrays and on an eager session's tensors
    (``xp`` from ``__array_namespace__``): both results as NumPy arrays."""
    with np.errstate(all="ignore"):
        expected = _host(fn(strict, *(strict.asarray(a) for a in host)))
    with cupool.EagerSession() as session, session.iteration() as it, \
            np.errstate(all="ignore"):
        tensors = [it.xp.asarray(a) for a in host]
        xp = tensors[0].__array_namespace__() if tensors else it.xp
        result = fn(xp, *tensors)
        fetched = it.fetch(result if isinstance(result, cupool.Tensor)
                           else xp.asarray(result, copy=True))
    return expected, fetched.value


def same_bytes(expected, got) -> None:
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    assert got.tobytes() == np.ascontiguousarray(expected).tobytes()


BINARY_FLOAT = ["add", "subtract", "multiply", "divide", "floor_divide", "remainder", "pow",
                "maximum", "minimum", "equal", "not_equal", "less", "less_equal", "greater",
                "greater_equal", "atan2", "hypot", "copysign", "logaddexp"]
BINARY_INT = ["add", "subtract", "multiply", "floor_divide", "remainder", "maximum",
              "minimum", "bitwise_and", "bitwise_or", "bitwise_xor", "equal", "less"]
BINARY_BOOL = ["logical_and", "logical_or", "logical_xor", "equal", "not_equal"]
UNARY_FLOAT = ["negative", "positive", "abs", "exp", "expm1", "log", "log1p", "log2", "log10",
               "sqrt", "square", "tanh", "sinh", "cosh", "sin", "cos", "tan", "atan", "asin",
               "acos", "atanh", "asinh", "acosh", "floor", "ceil", "trunc", "sign", "round",
               "isnan", "isinf", "isfinite", "reciprocal"]
UNARY_INT = ["negative", "abs", "square", "sign", "bitwise_invert"]
UNARY_BOOL = ["logical_not"]
NUMPY_NAMES = {"true_divide": "float", "mod": "float", "power": "float", "arctan2": "float",
               "absolute": "float", "arccos": "float", "arccosh": "float", "arcsin": "float",
               "arcsinh": "float", "arctan": "float", "arctanh": "float", "invert": "int"}
"""The namespace's elementwise functions under NumPy's names only (compared with NumPy)."""
OPERATORS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
             "/": lambda a, b: a / b, "//": lambda a, b: a // b, "%": lambda a, b: a % b,
             "**": lambda a, b: a ** b, "<": lambda a, b: a < b, ">=": lambda a, b: a >= b,
             "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


def test_the_namespace_has_every_function_the_tests_compare_and_no_other_elementwise_one():
    names = set(dir(ArrayNamespace))
    compared = {*BINARY_FLOAT, *BINARY_INT, *BINARY_BOOL, *UNARY_FLOAT, *UNARY_INT,
                *UNARY_BOOL}
    assert compared | set(NUMPY_NAMES) <= names
    assert {*ELEMENTWISE_BINARY, *ELEMENTWISE_UNARY} <= compared | set(NUMPY_NAMES)


@pytest.mark.parametrize("name", BINARY_FLOAT)
@EACH
@given(data=st.data(), dtype=FLOATS)
def test_binary_float_functions_broadcast_and_match(data, name, dtype):
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3))
    a = data.draw(arrays(dtype, shapes.input_shapes[0]))
    b = data.draw(arrays(dtype, shapes.input_shapes[1]))
    same_bytes(*run_both(lambda xp, x, y: getattr(xp, name)(x, y), a, b))


@pytest.mark.parametrize("name", BINARY_INT)
@EACH
@given(data=st.data(), dtype=INTS)
def test_binary_integer_functions_match(data, name, dtype):
    shape = data.draw(hnp.array_shapes(max_dims=2, max_side=4))
    a = data.draw(arrays(dtype, shape))
    b = data.draw(arrays(dtype, shape).filter(lambda v: (v != 0).all()))
    same_bytes(*run_both(lambda xp, x, y: getattr(xp, name)(x, y), a, b))


@pytest.mark.parametrize("name", BINARY_BOOL)
@EACH
@given(data=st.data())
def test_binary_boolean_functions_match(data, name):
    shape = data.draw(hnp.array_shapes(max_dims=2, max_side=4))
    a, b = data.draw(arrays(np.bool_, shape)), data.draw(arrays(np.bool_, shape))
    same_bytes(*run_both(lambda xp, x, y: getattr(xp, name)(x, y), a, b))


@pytest.mark.parametrize("name", UNARY_FLOAT)
@EACH
@given(data=st.data(), dtype=FLOATS)
def test_unary_float_functions_match(data, name, dtype):
    a = data.draw(arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=3, max_side=3)))
    same_bytes(*run_both(lambda xp, x: getattr(xp, name)(x), a))


@pytest.mark.parametrize("name", UNARY_INT)
@EACH
@given(data=st.data(), dtype=INTS)
def test_unary_integer_functions_match(data, name, dtype):
    a = data.draw(arrays(dtype, hnp.array_shapes(max_dims=2, max_side=4)))
    same_bytes(*run_both(lambda xp, x: getattr(xp, name)(x), a))


@pytest.mark.parametrize("name", UNARY_BOOL)
@EACH
@given(data=st.data())
def test_unary_boolean_functions_match(data, name):
    a = data.draw(arrays(np.bool_, hnp.array_shapes(max_dims=2, max_side=4)))
    same_bytes(*run_both(lambda xp, x: getattr(xp, name)(x), a))


@pytest.mark.parametrize("op", sorted(OPERATORS))
@EACH
@given(data=st.data(), dtype=FLOATS, scalar=st.sampled_from([None, 0.5, 2, -1.25]))
def test_operators_with_arrays_and_python_scalars_match(data, op, dtype, scalar):
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3))
    a = data.draw(arrays(dtype, shapes.input_shapes[0]))
    b = data.draw(arrays(dtype, shapes.input_shapes[1]))
    fn = OPERATORS[op]
    if scalar is None:
        same_bytes(*run_both(lambda xp, x, y: fn(x, y), a, b))
    else:
        same_bytes(*run_both(lambda xp, x: fn(x, scalar), a))
        same_bytes(*run_both(lambda xp, x: fn(scalar, x), a))


@FEW
@given(data=st.data(), dtype=FLOATS)
def test_in_place_operators_and_unary_operators_match(data, dtype):
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=1, base_shape=(2, 3),
                                                         max_dims=2))
    a = data.draw(arrays(dtype, (2, 3)))
    b = data.draw(arrays(dtype, shapes.input_shapes[0]))

    def update(xp, x, y):
        z = x * 1
        z += y
        z -= 0.5
        z *= y
        z /= 3
        return -z + abs(z) - (+z)

    same_bytes(*run_both(update, a, b))


REDUCTIONS = ["sum", "prod", "mean", "var", "std", "max", "min", "argmax", "argmin"]


@pytest.mark.parametrize("name", REDUCTIONS)
@EACH
@given(data=st.data(), dtype=FLOATS, keepdims=st.booleans())
def test_reductions_with_axis_and_keepdims_match(data, name, dtype, keepdims):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=4))
    a = data.draw(arrays(dtype, shape))
    if name in ("argmax", "argmin"):
        axis = data.draw(st.none() | st.integers(-len(shape), len(shape) - 1))
        if axis is None:
            keepdims = False
    else:
        axis = data.draw(st.none() | st.integers(-len(shape), len(shape) - 1)
                         | st.just(tuple(range(len(shape)))[:2]))
    kept = shape if axis is None else [shape[a] for a in np.atleast_1d(axis)]
    options = {"correction": 1} if name in ("var", "std") and np.prod(kept) > 1 else {}
    same_bytes(*run_both(lambda xp, x: getattr(xp, name)(x, axis=axis, keepdims=keepdims,
                                                         **options), a))


@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "any", "all"])
@EACH
@given(data=st.data(), dtype=st.sampled_from([np.int32, np.int64, np.bool_]))
def test_integer_and_boolean_reductions_match(data, name, dtype):
    if name in ("any", "all"):
        dtype = np.bool_
    elif dtype == np.bool_:
        dtype = np.int32
    a = data.draw(arrays(dtype, hnp.array_shapes(min_dims=1, max_dims=2, max_side=4)))
    axis = data.draw(st.none() | st.just(0))
    same_bytes(*run_both(lambda xp, x: getattr(xp, name)(x, axis=axis), a))


@FEW
@given(data=st.data(), dtype=FLOATS)
def test_matmul_matches_with_batches_and_vectors(data, dtype):
    m, k, n = (data.draw(st.integers(1, 4)) for _ in range(3))
    batch = data.draw(st.sampled_from([(), (2,), (1, 3)]))
    left = data.draw(st.sampled_from([(*batch, m, k), (k,)]))
    right = data.draw(st.sampled_from([(*batch, k, n), (k,)]))
    a, b = data.draw(arrays(dtype, left)), data.draw(arrays(dtype, right))
    same_bytes(*run_both(lambda xp, x, y: xp.matmul(x, y), a, b))
    same_bytes(*run_both(lambda xp, x, y: x @ y, a, b))
    if len(left) >= 2:
        same_bytes(*run_both(lambda xp, x, y: xp.matrix_transpose(x) @ x, a, b))
        same_bytes(*run_both(lambda xp, x, y: x.mT @ x, a, b))


@FEW
@given(data=st.data(), dtype=FLOATS)
def test_shapes_views_and_joins_match(data, dtype):
    a = data.draw(arrays(dtype, (2, 3, 4)))
    b = data.draw(arrays(dtype, (2, 3, 4)))
    axes = data.draw(st.permutations([0, 1, 2]))
    join, stack = data.draw(st.integers(-3, 2)), data.draw(st.integers(-4, 3))
    calls = [
        lambda xp, x, y: xp.reshape(x, (6, 4)),
        lambda xp, x, y: xp.reshape(xp.permute_dims(x, tuple(axes)), (-1,)),
        lambda xp, x, y: xp.permute_dims(x, tuple(axes)) + y[0, 0, 0],
        lambda xp, x, y: xp.expand_dims(x, axis=1),
        lambda xp, x, y: xp.squeeze(x[:1, ...], axis=0),
        lambda xp, x, y: xp.broadcast_to(x[:, :1, ...], (2, 3, 4)),
        lambda xp, x, y: xp.concat([x, y], axis=join),
        lambda xp, x, y: xp.stack([x, y], axis=stack),
        lambda xp, x, y: x[1, ::2, 1:],
        lambda xp, x, y: x[None, ..., -1],
        lambda xp, x, y: x[:, 1, ...] * y[0, 0, ...],
        lambda xp, x, y: xp.where(x > y, x, y),
        lambda xp, x, y: xp.where(x > 0, x, 0.0),
        lambda xp, x, y: xp.clip(x, min=-1.0, max=1.5),
        lambda xp, x, y: xp.astype(x, xp.int32),
        lambda xp, x, y: xp.astype(x > 0, xp.float32),
        lambda xp, x, y: xp.zeros_like(x) + xp.ones_like(y) * xp.full_like(x, 2.5),
        lambda xp, x, y: xp.zeros((2, 3), dtype=xp.float32) + xp.ones(3) + xp.full((3,), 1.5),
        lambda xp, x, y: xp.arange(1, 9, 2) + xp.arange(4),
        lambda xp, x, y: xp.take(x, xp.asarray(np.array([2, 0, 2])), axis=1),
    ]
    for number, call in enumerate(calls):
        expected, got = run_both(call, a, b)
        assert (number, got.dtype, got.shape) == (number, expected.dtype, expected.shape)
        assert (number, got.tobytes()) == (number, np.ascontiguousarray(expected).tobytes())


# -- the NumPy-only part of the subset, against NumPy itself ----------------------------------
def run_numpy(fn, *host):
    """``fn(np, *copies)`` and ``fn(it.xp, *tensors)`` (an eager session): both results."""
    with np.errstate(all="ignore"):
        expected = np.asarray(fn(np, *(a.copy() for a in host)))
    with cupool.EagerSession() as session, session.iteration() as it, \
            np.errstate(all="ignore"):
        xp = it.xp
        result = fn(xp, *(xp.asarray(a) for a in host))
        fetched = it.fetch(result if isinstance(result, cupool.Tensor)
                           else xp.asarray(result, copy=True))
    return expected, fetched.value


@FEW
@given(data=st.data(), dtype=FLOATS)
def test_numpy_functions_of_the_subset_match_numpy(data, dtype):
    a = data.draw(arrays(dtype, (3, 4)))
    b = data.draw(arrays(dtype, (4, 2)))
    idx = data.draw(arrays(np.int64, (5,)).map(lambda v: np.abs(v) % 3))

    def scatter(xp, x, y, i):
        z = x * 1
        xp.add.at(z, i, 1.0)
        z[i] += 2.0
        z[0] = y[:, 0]
        z.T[1:, 0] -= 1
        z[i, 1:] = 0.25
        return z

    calls = [
        lambda xp, x, y, i: xp.dot(x, y),
        lambda xp, x, y, i: xp.einsum("ij,jk->ik", x, y),
        lambda xp, x, y, i: xp.einsum("ij,kj", x, x),
        lambda xp, x, y, i: xp.einsum("ij->j", x),
        lambda xp, x, y, i: xp.swapaxes(x, 0, 1) @ x,
        lambda xp, x, y, i: xp.transpose(x) + x.T,
        lambda xp, x, y, i: xp.concatenate([x, x * 2], axis=1),
        lambda xp, x, y, i: x[i] + xp.take(x, i, axis=0),
        lambda xp, x, y, i: x[i, 1:],
        lambda xp, x, y, i: x.sum(axis=1, keepdims=True) + x.mean() + x.max(axis=0)[0],
        lambda xp, x, y, i: x.reshape(2, 6).T.reshape(12),
        lambda xp, x, y, i: x.astype(np.float16) + xp.power(x, 2).astype(np.float16),
        lambda xp, x, y, i: x ** 2 + x ** 3 + x ** 0.5,
        lambda xp, x, y, i: np.float32(0.5) ** x + 2 ** x,
        scatter,
    ]
    for call in calls:
        same_bytes(*run_numpy(call, a, b, idx))


@pytest.mark.parametrize("name", sorted(NUMPY_NAMES))
@EACH
@given(data=st.data())
def test_numpy_names_of_elementwise_functions_match_numpy(data, name):
    binary = name in ELEMENTWISE_BINARY
    if NUMPY_NAMES[name] == "int":
        dtype = data.draw(INTS)
        host = [data.draw(arrays(dtype, (2, 3)))]
    else:
        dtype = data.draw(FLOATS)
        host = [data.draw(arrays(dtype, (2, 3))) for _ in range(2 if binary else 1)]
    same_bytes(*run_numpy(lambda xp, *xs: getattr(xp, name)(*xs), *host))


@pytest.mark.parametrize("budget", ["100%", "70%"])
def test_array_api_code_runs_unchanged_under_a_planned_session(budget):
    """A function written against the array API (its namespace from its argument) runs on
    array-api-strict and, two steps later, planned under a session: the same bytes."""
    def normalize(x, w):
        xp = x.__array_namespace__()
        centered = x - xp.mean(x, axis=0, keepdims=True)
        scaled = centered / xp.sqrt(xp.var(x, axis=0, keepdims=True) + 1e-5)
        return xp.tanh(scaled @ w) + xp.max(scaled, axis=1, keepdims=True)

    rng = np.random.default_rng(3)
    x0 = rng.standard_normal((64, 8)).astype(np.float32)
    w0 = rng.standard_normal((8, 8)).astype(np.float32)
    expected = _host(normalize(strict.asarray(x0), strict.asarray(w0)))
    with cupool.Session(budget, device="emulated", measure_link=False,
                        measure_overhead=False) as session:
        w = session.register("w", w0)
        for _ in range(3):
            with session.iteration() as it:
                out = it.fetch(normalize(it.xp.asarray(x0), w))
            same_bytes(expected, out.value)
        assert session.reports[-1].mode == "planned"
