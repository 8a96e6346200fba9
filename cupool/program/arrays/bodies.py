"""The bodies of the namespace's ops: what each op runs when the step runs.

An op body follows the contract of ``it.op`` (``fn(*inputs, *updates, *outputs)``): it
writes its output (``out=`` where the array library has it) or modifies its update in
place. Each body is made of an *implementation* (``impl(*values, out)`` for an op that
makes an output, ``impl(target, *values)`` for one that writes into ``target``) and the
*operands*: ``("in", k, chain)`` — the op's ``k``-th input array seen through a view chain
(:mod:`cupool.program.arrays.views`) — or ``("c", value)``, a constant. Implementations
take the array module from their arrays (NumPy on the emulated device, CuPy on a GPU) and
compute what the program without cupool computes, with the same NumPy calls: a ufunc with
``out=`` gives the bits of the ufunc without it; where an ``out=`` could change the result
(``mean``, ``var``: their float16 paths) or where there is none, the result is assigned
(a scratch array of the output's size, the library's, outside the budget).

Bodies are cached by the namespace per call signature, so the same call in every step
declares the same callable (the recorded op is shared and its call made once).
"""

from __future__ import annotations

import operator

import numpy as np

from cupool.program.arrays.views import applier
from cupool.program.tensors import array_module

INPLACE = {"add": operator.iadd, "subtract": operator.isub, "multiply": operator.imul,
           "divide": operator.itruediv, "floor_divide": operator.ifloordiv,
           "remainder": operator.imod, "pow": operator.ipow, "matmul": operator.imatmul,
           "bitwise_and": operator.iand, "bitwise_or": operator.ior,
           "bitwise_xor": operator.ixor}
"""The in-place operators (``x += y`` is ``operator.iadd(x, y)``: NumPy's own path, its
``x **= 2`` fast case included)."""


def _mod(array):
    return np if array.__class__ is np.ndarray else array_module(array)


# -- implementations ----------------------------------------------------------------------
def ufunc(name: str):
    """``name(*values, out=out)`` (a ufunc of NumPy and CuPy: ``add``, ``exp``...). The
    implementation carries NumPy's ufunc (``numpy_ufunc``), which :func:`body` calls
    directly on NumPy arrays."""
    np_fn = getattr(np, name)

    def impl(*arrays):
        out = arrays[-1]
        if out.__class__ is np.ndarray:
            np_fn(*arrays[:-1], out=out)
        else:
            getattr(array_module(out), name)(*arrays[:-1], out=out)

    impl.__name__ = name
    impl.numpy_ufunc = np_fn
    return impl


def power_operator(a, b, out) -> None:
    """``a ** b`` as Python's operator computes it (NumPy's ``ndarray.__pow__`` takes fast
    paths for some exponents that ``np.power`` does not)."""
    out[...] = a ** b


def reduction(name: str, axis, keepdims: bool, **options):
    """``name(x, axis=axis, keepdims=keepdims, out=out, **options)`` (``sum``, ``max``,
    ``argmax``...)."""
    def impl(x, out):
        getattr(_mod(out), name)(x, axis=axis, out=out, keepdims=keepdims, **options)

    impl.__name__ = name
    return impl


def assigned_reduction(name: str, axis, keepdims: bool, **options):
    """``out[...] = name(x, axis=axis, keepdims=keepdims, **options)`` (``mean``, ``var``,
    ``std``: their results with ``out=`` can differ in the last bit)."""
    def impl(x, out):
        out[...] = getattr(_mod(out), name)(x, axis=axis, keepdims=keepdims, **options)

    impl.__name__ = name
    return impl


def linear(name: str):
    """``matmul``/``dot`` with ``out=``."""
    def impl(a, b, out):
        getattr(_mod(out), name)(a, b, out=out)

    impl.__name__ = name
    return impl


def einsum(subscripts: str):
    def impl(a, b, out):
        xp = _mod(out)
        if xp is np:
            np.einsum(subscripts, a, b, out=out)
        else:
            out[...] = xp.einsum(subscripts, a, b)

    return impl


def take(axis):
    def impl(x, indices, out):
        _mod(out).take(x, indices, axis=axis, out=out)

    return impl


def gather(key_template: tuple):
    """``out[...] = x[key]``: ``key_template`` holds the basic items of the key and ``k`` for
    the ``k``-th index array (given after ``x``)."""
    def impl(x, *rest):
        out = rest[-1]
        out[...] = x[_key(key_template, rest)]

    return impl


def _key(template: tuple, arrays) -> tuple:
    return tuple(arrays[item[1]] if isinstance(item, tuple) and item[0] == "a"
                 else slice(*item[1:]) if isinstance(item, tuple) else item
                 for item in template)


def joined(name: str, axis):
    """``concatenate``/``stack`` of the values with ``out=``."""
    def impl(*arrays):
        out = arrays[-1]
        getattr(_mod(out), name)(list(arrays[:-1]), axis=axis, out=out)

    return impl


def where(cond, a, b, out) -> None:
    xp = _mod(out)
    xp.copyto(out, b, casting="unsafe")
    xp.copyto(out, a, casting="unsafe", where=cond)


def cast(x, out) -> None:
    """``x.astype(out.dtype)``, a copy, or ``broadcast_to``'s copy (NumPy's casts)."""
    _mod(out).copyto(out, x, casting="unsafe")


def reshaped_copy(x, out) -> None:
    """``x.reshape(out.shape)`` where it copies: ``out`` seen in ``x``'s shape (C order)."""
    _mod(out).copyto(out.reshape(x.shape), x, casting="unsafe")


def fill(value):
    def impl(out):
        _mod(out).copyto(out, value, casting="unsafe")

    return impl


def arange(start, stop, step):
    def impl(out):
        out[...] = _mod(out).arange(start, stop, step, dtype=out.dtype)

    return impl


def clip(x, low, high, out) -> None:
    _mod(out).clip(x, low, high, out=out)


def rounded(decimals: int):
    def impl(x, out):
        _mod(out).round(x, decimals, out=out)

    return impl


# -- implementations that write into a target ----------------------------------------------
def inplace(name: str):
    """``target <op>= value`` (Python's in-place operator on the target view)."""
    function = INPLACE[name]

    def impl(target, value):
        function(target, value)

    impl.__name__ = f"i{name}"
    impl.operator = function
    return impl


def set_basic(key: tuple):
    def impl(target, value):
        target[key] = value

    return impl


def set_indexed(key_template: tuple):
    def impl(target, *rest):
        target[_key(key_template, rest[:-1])] = rest[-1]

    return impl


def add_at(key_template: tuple):
    """``np.add.at(target, key, value)`` (CuPy: ``cupyx.scatter_add``)."""
    def impl(target, *rest):
        key = _key(key_template, rest[:-1])
        if len(key) == 1:
            key = key[0]
        if target.__class__ is np.ndarray or array_module(target) is np:
            np.add.at(target, key, rest[-1])
        else:
            import cupyx

            cupyx.scatter_add(target, key, rest[-1])

    return impl


# -- bodies ----------------------------------------------------------------------------------
_T_CHAIN = (("T",),)


def _resolver(operand):
    """The function giving an operand's value from the op's arrays."""
    if operand[0] == "c":
        value = operand[1]
        return lambda arrays: value
    k, chain = operand[1], operand[2]
    if not chain:
        return operator.itemgetter(k)
    if chain == _T_CHAIN:  # x.T: the common view, one call
        return lambda arrays: arrays[k].T
    apply = applier(chain)
    return lambda arrays: apply(arrays[k])


def body(name: str, impl, operands: tuple, target_chain: tuple | None = None):
    """The op's callable: ``impl`` over ``operands`` (module docstring), writing its output
    (the last array), or with ``target_chain`` not ``None`` writing through that chain into
    its update (the last array)."""
    plain = all(o[0] == "in" and o[1] == i and not o[2] for i, o in enumerate(operands))
    if target_chain is None:
        if plain:  # the implementation itself (shared by every such op)
            return impl
        else:
            resolvers = tuple(_resolver(o) for o in operands)
            np_fn = getattr(impl, "numpy_ufunc", None)
            if len(resolvers) == 1:
                (first,) = resolvers

                def call(*arrays):
                    impl(first(arrays), arrays[-1])
            elif len(resolvers) == 2 and np_fn is not None:
                first, second = resolvers

                def call(*arrays):  # a ufunc: NumPy's called here on NumPy arrays
                    out = arrays[-1]
                    if out.__class__ is np.ndarray:
                        np_fn(first(arrays), second(arrays), out=out)
                    else:
                        impl(first(arrays), second(arrays), out)
            elif len(resolvers) == 2:
                first, second = resolvers

                def call(*arrays):
                    impl(first(arrays), second(arrays), arrays[-1])
            else:
                def call(*arrays):
                    impl(*[r(arrays) for r in resolvers], arrays[-1])
    else:
        resolvers = tuple(_resolver(o) for o in operands)
        apply = applier(target_chain) if target_chain else None
        function = getattr(impl, "operator", None)
        if apply is None and len(resolvers) == 1 and function is not None:
            (first,) = resolvers

            def call(*arrays):  # target <op>= value: Python's operator, called here
                function(arrays[-1], first(arrays))
        else:
            def call(*arrays):
                target = arrays[-1] if apply is None else apply(arrays[-1])
                impl(target, *[r(arrays) for r in resolvers])

    call.__name__ = call.__qualname__ = name
    return call


__all__ = ["INPLACE", "add_at", "arange", "assigned_reduction", "body", "cast", "clip",
           "einsum", "fill", "gather", "inplace", "joined", "linear", "power_operator",
           "reduction", "reshaped_copy", "rounded", "set_basic", "set_indexed", "take",
           "ufunc", "where"]
