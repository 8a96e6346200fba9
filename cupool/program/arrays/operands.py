"""The operands of a namespace call, read quickly: the signature that keys the namespace's
cache of op entries, for the calls a step makes most (tensors, views of them, Python and
NumPy numbers), without the checks of the tensors' scope that the iteration makes anyway.

A signature holds, per operand, ``(k, base shape, base dtype, view chain)`` for the ``k``-th
distinct tensor read (a view gives its base), or a constant's key
(:func:`~cupool.program.arrays.rules.constant_key`); the bases are the op's inputs, in
order. :meth:`~cupool.program.arrays.namespace.ArrayNamespace._operands` gives the same for
every call, with the checks.
"""

from __future__ import annotations

import math

import numpy as np

from cupool.program.arrays.shapes import SUPPORTED_KINDS
from cupool.program.arrays.views import View
from cupool.program.tensors import Tensor

_copysign = math.copysign


def _numpy_scalar(value):
    """The key of a NumPy scalar of a dtype a device holds (as ``rules.constant_key``), or
    ``None`` for anything else."""
    if isinstance(value, np.generic) and value.dtype.kind in SUPPORTED_KINDS:
        return ("c", value.__class__, value.tobytes())
    return None


def quick_signature(args: tuple, session):
    """``(bases, signature)`` as :meth:`ArrayNamespace._operands` gives them, for the common
    calls: every operand a tensor of ``session`` (or a view of one), a Python float or int
    or a NumPy scalar, at most two distinct bases; ``None`` for any other call. The
    tensors' scope (their iteration, released or not) is not checked here: the iteration
    checks each tensor an op is given, and the namespace says its refusal as its own typed
    error (``ArrayNamespace._refusal``)."""
    if len(args) == 2:  # the common cases first, without a loop
        a, b = args
        ca, cb = a.__class__, b.__class__
        if ca is Tensor:
            ta, chain_a = a, ()
        elif ca is View:
            ta, chain_a = a.base, a.chain
        else:
            ta = None
        if cb is Tensor:
            tb, chain_b = b, ()
        elif cb is View:
            tb, chain_b = b.base, b.chain
        else:
            tb = None
        if ta is not None:
            if ta.owner is not session or ta.__class__ is not Tensor:
                return None
            sa = ta.spec
            if tb is not None:
                if tb.owner is not session or tb.__class__ is not Tensor:
                    return None
                if tb is ta:
                    return [ta], ((0, sa.shape, sa.dtype, chain_a),
                                  (0, sa.shape, sa.dtype, chain_b))
                sb = tb.spec
                return [ta, tb], ((0, sa.shape, sa.dtype, chain_a),
                                  (1, sb.shape, sb.dtype, chain_b))
            if cb is float:
                return [ta], ((0, sa.shape, sa.dtype, chain_a),
                              ("c", float, b, _copysign(1.0, b)))
            if cb is int:
                return [ta], ((0, sa.shape, sa.dtype, chain_a), ("c", int, b))
            part = _numpy_scalar(b)
            if part is None:
                return None
            return [ta], ((0, sa.shape, sa.dtype, chain_a), part)
        if tb is not None and tb.owner is session and tb.__class__ is Tensor:
            sb = tb.spec
            if ca is float:
                return [tb], (("c", float, a, _copysign(1.0, a)),
                              (0, sb.shape, sb.dtype, chain_b))
            if ca is int:
                return [tb], (("c", int, a), (0, sb.shape, sb.dtype, chain_b))
            part = _numpy_scalar(a)
            if part is not None:
                return [tb], (part, (0, sb.shape, sb.dtype, chain_b))
        return None
    if len(args) == 1:
        a = args[0]
        ca = a.__class__
        if ca is Tensor:
            t, chain = a, ()
        elif ca is View:
            t, chain = a.base, a.chain
        else:
            return None
        if t.owner is not session or t.__class__ is not Tensor:
            return None
        spec = t.spec
        return [t], ((0, spec.shape, spec.dtype, chain),)
    bases: list = []
    sig = []
    for a in args:
        cls = a.__class__
        if cls is Tensor:
            t, chain = a, ()
        elif cls is View:
            t, chain = a.base, a.chain
            if t.__class__ is not Tensor:
                return None
        elif cls is float:
            sig.append(("c", float, a, _copysign(1.0, a)))
            continue
        elif cls is int:
            sig.append(("c", int, a))
            continue
        else:
            part = _numpy_scalar(a)
            if part is None:
                return None
            sig.append(part)
            continue
        if t.owner is not session:
            return None
        if not bases:
            k = 0
            bases.append(t)
        elif bases[0] is t:
            k = 0
        elif len(bases) == 1:
            k = 1
            bases.append(t)
        elif bases[1] is t:
            k = 1
        else:
            return None
        spec = t.spec
        sig.append((k, spec.shape, spec.dtype, chain))
    return bases, tuple(sig)


__all__ = ["quick_signature"]
