"""The array namespace of one iteration: NumPy-style functions over the session's tensors,
each call one declared op.

``it.xp`` (an :class:`ArrayNamespace`) and the tensors' operators (``x @ w + b``,
``w -= lr * g``) declare ops through ``it.op``: the op's inputs are the tensors the call
reads (a view's base), its output is a new tensor whose shape and dtype NumPy's rules give
without computing anything (:mod:`cupool.program.arrays.shapes`), its body is the same NumPy
or CuPy call the program without cupool makes (:mod:`cupool.program.arrays.bodies`), and an
in-place form (``+=``, ``x[i] = v``, ``xp.add.at``) is an update of the tensor it writes.
Views (transposes, basic slices, reshapes that NumPy does without copying, ``broadcast_to``)
are no ops at all (:mod:`cupool.program.arrays.views`).

**Names.** Each op is named ``function@file.py:line`` after the namespace function and the
line of the program that called it (the first frame outside ``cupool/program``), so the
recorded trace, a plan and a picture read like the program.

**Cost.** The call's signature (function, operands' positions, shapes, dtypes, view chains,
constants, parameters) and its site (the calling code object and instruction) key a
module-wide cache of the output spec, the body and the op's name: a call made again in a
later step declares the same callable with the same spec, which the iteration matches with
the recorded op (and the planned step reuses the op's call). The common calls (tensors,
views, Python numbers; :mod:`cupool.program.arrays.operands`) read their signature without
checking the tensors' scope, which the iteration checks anyway: what it refuses is said as
the namespace's typed error (:meth:`ArrayNamespace._refusal`). The operators pass the
program's frame; other calls find it by walking out of the namespace's modules.

**Errors** are raised when the call is made (:mod:`cupool.program.arrays.errors`), naming the
function, the operands' shapes and the call's source line: a function outside the subset,
operands that do not broadcast, a matmul's inner sizes, a dtype the device cannot hold, a
write into a read-only tensor or a view of one, a tensor of another session, of an ended
iteration or of a closed session.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from cupool.program.arrays import bodies, rules, shapes, sites
from cupool.program.arrays.errors import (
    IT_OP,
    ArrayDtypeError,
    ArrayReleasedError,
    ArrayScopeError,
    ArraySessionClosedError,
    ArrayValueError,
    MissingFunctionError,
    ReadOnlyWriteError,
    ShapeMismatchError,
    UnsupportedFunctionError,
)
from cupool.program.arrays.operands import quick_signature
from cupool.program.arrays.rules import ELEMENTWISE_BINARY, ELEMENTWISE_UNARY
from cupool.program.arrays.shapes import Refusal
from cupool.program.arrays.structure import StructureFunctions
from cupool.program.arrays.views import View, stand_in
from cupool.program.errors import ProgramError
from cupool.program.tensor_methods import ArrayMethods
from cupool.program.tensors import Tensor

_SCALARS = (bool, int, float, complex)
_SCALAR_TYPES = frozenset(_SCALARS)
_OPERAND_TYPES = (Tensor, View, *_SCALARS, np.generic, np.ndarray)
_COMMON = frozenset({Tensor, View, float, int})
_HERE = globals()
_METHODS = vars(sys.modules[ArrayMethods.__module__])
_STRUCTURE = vars(sys.modules[StructureFunctions.__module__])
_INPLACE_NAMES = {name: f"{name}_inplace" for name in bodies.INPLACE}
_OPERATOR_CALLS = {**{name: (ufunc, rules.elementwise_rule)
                      for name, ufunc in ELEMENTWISE_BINARY.items()},
                   "pow": (None, rules.power_operator_rule),
                   "matmul": ("matmul", rules.linear_rule)}
"""A binary operator's namespace function -> (its params, its rule)."""
_ENTRIES: dict = {}
_LABELS: dict = {}
_VIEWS: dict = {}
sites.LIMIT = 8192
_REFUSALS = {"shape": ShapeMismatchError, "dtype": ArrayDtypeError,
             "unsupported": UnsupportedFunctionError, "read-only": ReadOnlyWriteError}

def _program_frame(frame):
    """The program's call, from ``frame`` (the namespace's caller): the first frame, going
    out, of a module other than the namespace's own."""
    while frame is not None and (frame.f_globals is _HERE or frame.f_globals is
                                 _METHODS or frame.f_globals is _STRUCTURE):
        frame = frame.f_back
    return frame


def no_iteration(tensor, function: str):
    """The error for an array operation on ``tensor`` while its session declares no
    iteration (or is closed)."""
    owner = tensor.owner
    if getattr(owner, "closed", False):
        return sites.error(ArraySessionClosedError, function, (tensor,),
                      f"tensor {tensor.name!r}'s session is closed")
    return sites.error(ArrayScopeError, function, (tensor,),
                  f"tensor {tensor.name!r}: its session is declaring no iteration (array "
                  f"operations are declared inside 'with session.iteration() as it:')",
                  tensor=tensor.name)


def value_refused(tensor, function: str):
    return sites.error(ArrayValueError, function, (tensor,),
                  f"tensor {tensor.name!r} has no value while its step is declared (the step "
                  f"runs when its 'with' block ends): fetch it with it.fetch(tensor) and read "
                  f".value after the block")


def missing_method(tensor, name: str):
    return sites.error(MissingFunctionError, f"ndarray.{name}", (tensor,),
                  f"the tensor has no method or attribute {name!r} in cupool's array subset; "
                  f"{IT_OP}")


class _Ufunc:
    """``xp.add``: callable, with ``.at`` (a scatter-add, an update of its target)."""

    __slots__ = ("name", "namespace")

    def __init__(self, namespace, name: str) -> None:
        self.namespace, self.name = namespace, name

    def __call__(self, a, b):
        return self.namespace._pure(self.name, (a, b), self.name, rules.elementwise_rule)

    def at(self, x, indices, values=None):
        return self.namespace._add_at(x, indices, values)

    def __repr__(self) -> str:
        return f"<cupool array function {self.name!r}>"


class _UfuncAttribute:
    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, namespace, owner=None):
        return self if namespace is None else _Ufunc(namespace, self.name)


class ArrayNamespace(StructureFunctions):
    """NumPy-style functions over iteration ``iteration``'s tensors (module docstring)."""

    __array_api_version__ = "2023.12"
    bool = np.bool_
    int8, int16, int32, int64 = np.int8, np.int16, np.int32, np.int64
    uint8, uint16, uint32, uint64 = np.uint8, np.uint16, np.uint32, np.uint64
    float16, float32, float64 = np.float16, np.float32, np.float64
    complex64, complex128 = np.complex64, np.complex128
    pi, e, inf, nan, newaxis = np.pi, np.e, np.inf, np.nan, None
    add = _UfuncAttribute("add")

    def __init__(self, iteration) -> None:
        self.iteration = iteration
        self._session = iteration.session
        self._number = iteration.number
        self._read_only: set = set()

    def __repr__(self) -> str:
        return f"<cupool array namespace of iteration {self._number}>"

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise sites.error(MissingFunctionError, name, (),
                     f"{name!r} is not in cupool's array subset; {IT_OP}")

    # -- the declaring core ---------------------------------------------------------------
    def _check(self, fname: str, args, tensor: Tensor) -> None:
        """The typed error for a ``tensor`` this iteration cannot use."""
        session = self._session
        if tensor.owner is not session:
            if getattr(tensor.owner, "closed", False):
                raise sites.error(ArraySessionClosedError, fname, args,
                             f"tensor {tensor.name!r}'s session is closed")
            raise sites.error(ArrayScopeError, fname, args,
                         f"tensor {tensor.name!r} belongs to another session",
                         tensor=tensor.name)
        if tensor.released:
            raise sites.error(ArrayReleasedError, fname, args,
                         f"tensor {tensor.name!r} was released", tensor=tensor.name)
        raise sites.error(ArrayScopeError, fname, args,
                     f"tensor {tensor.name!r} is an output of iteration {tensor.iteration}, "
                     f"which has ended (this is iteration {self._number})",
                     tensor=tensor.name)

    def _check_open(self, fname: str, args) -> None:
        if getattr(self._session, "closed", False):
            raise sites.error(ArraySessionClosedError, fname, args, "the session is closed")
        if getattr(self.iteration, "_state", "open") != "open":
            raise sites.error(ArrayScopeError, fname, args,
                         f"iteration {self._number} is not being declared (its 'with' block "
                         f"has ended): use the namespace of the iteration being declared")

    def _operands(self, fname: str, args):
        """The distinct tensors ``args`` read (views give their base) and the call's
        signature: per operand ``(k, base shape, dtype, chain)`` or a constant's key."""
        if len(args) == 1:
            a = args[0]
            if a.__class__ is Tensor and a.owner is self._session and not a.released and (
                    a.iteration is None or a.iteration == self._number):
                spec = a.spec
                return [a], ((0, spec.shape, spec.dtype, ()),)
        elif len(args) == 2:  # the common case first: a tensor and a tensor or a number
            a, b = args
            if a.__class__ is Tensor and a.owner is self._session and not a.released and (
                    a.iteration is None or a.iteration == self._number):
                sa = a.spec
                cb = b.__class__
                if cb is Tensor and b is not a and b.owner is self._session and not \
                        b.released and (b.iteration is None or b.iteration == self._number):
                    sb = b.spec
                    return [a, b], ((0, sa.shape, sa.dtype, ()), (1, sb.shape, sb.dtype, ()))
                if cb is float:
                    return [a], ((0, sa.shape, sa.dtype, ()),
                                 ("c", float, b, math.copysign(1.0, b)))
        bases, sig = [], []
        session, number = self._session, self._number
        for a in args:
            cls = a.__class__
            if cls is Tensor:
                t, chain = a, ()
            elif cls is View:
                t, chain = a.base, a.chain
            elif cls in _SCALAR_TYPES:
                sig.append(rules.constant_key(a))
                continue
            elif isinstance(a, Tensor):
                t, chain = a, ()
            elif isinstance(a, np.generic):
                if a.dtype.kind not in shapes.SUPPORTED_KINDS:
                    raise sites.error(ArrayDtypeError, fname, args,
                                 f"scalar {a!r} of dtype {a.dtype} cannot be held by the "
                                 f"device")
                sig.append(rules.constant_key(a))
                continue
            else:
                raise self._foreign(fname, args, a)
            if t.owner is not session or t.released or (t.iteration is not None
                                                        and t.iteration != number):
                self._check(fname, args, t)
            if not bases:
                k = 0
                bases.append(t)
            elif bases[0] is t:
                k = 0
            else:
                for k, known in enumerate(bases):  # noqa: B007  (k is used after the loop)
                    if known is t:
                        break
                else:
                    k = len(bases)
                    bases.append(t)
            spec = t.spec
            sig.append((k, spec.shape, spec.dtype, chain))
        return bases, tuple(sig)

    def _foreign(self, fname: str, args, value):
        if isinstance(value, np.ndarray) or hasattr(value, "__cuda_array_interface__"):
            return sites.error(UnsupportedFunctionError, fname, args,
                          "a host or device array is not a tensor of this step: bring it in "
                          "with xp.asarray(array) (an upload op)")
        return sites.error(UnsupportedFunctionError, fname, args,
                      f"operand {type(value).__name__} is not a tensor, a view or a scalar")

    def _refused(self, fname: str, args, refusal: Refusal, frame=None):
        cls = _REFUSALS[refusal.kind]
        detail = refusal.detail + (f"; {IT_OP}" if refusal.kind == "unsupported" else "")
        return sites.error(cls, fname, args, detail, frame)

    def _entry(self, fname, args, sig, params, rule, frame, key):
        try:
            shape, dtype, impl = rule(args, params)
            dtype = shapes.check_dtype(dtype)
        except Refusal as refusal:
            raise self._refused(fname, args, refusal, frame) from None
        operands = tuple(("c", a) if part[0] == "c" else ("in", part[0], part[3])
                         for a, part in zip(args, sig, strict=True))
        entry = ((tuple(shape), dtype), bodies.body(fname, impl, operands),
                 sites.label(fname, frame), None if frame is None else frame.f_code)
        if len(_ENTRIES) >= sites.LIMIT:
            _ENTRIES.clear()
        _ENTRIES[key] = entry
        return entry

    def _refusal(self, fname: str, args: tuple, target=None) -> None:
        """Raise the namespace's typed error for what the iteration refused in a call that
        took the quick path (a tensor of another iteration, a released one, a closed
        session): the full checks that path leaves out. Returns where they find nothing."""
        every = args if target is None else (target, *args)
        if target is not None:
            base = target.base if target.__class__ is View else target
            if base.owner is not self._session or base.released or (
                    base.iteration is not None and base.iteration != self._number):
                self._check(fname, every, base)
        self._operands(fname, args)
        self._check_open(fname, every)

    def _pure(self, fname: str, args: tuple, params, rule, frame=None):
        """Declare ``fname(*args)`` as an op with one new output (``rule(args, params)``
        gives its shape, dtype and implementation); returns the output tensor. ``frame`` is
        the program's call where the caller knows it (the operators), else found here. The
        cache key holds the call site (its code object and instruction): one lookup gives
        the output spec, the body and the op's name."""
        quick = quick_signature(args, self._session)
        bases, sig = quick if quick is not None else self._operands(fname, args)
        if frame is None:
            frame = _program_frame(sys._getframe(1))
        if frame is not None:
            key = (fname, sig, params, id(frame.f_code), frame.f_lasti)
        else:
            key = (fname, sig, params, None, 0)
        entry = _ENTRIES.get(key)
        if entry is None:
            if sites.inside(frame):  # a call from elsewhere in cupool/program: the
                frame = sites.outside(frame)  # program's call is further out
                key = (*key[:-2], *sites.site(frame))
                entry = _ENTRIES.get(key)
            if entry is None:
                if quick is not None:
                    self._operands(fname, args)  # the checks the quick signature leaves out
                self._check_open(fname, args)
                entry = self._entry(fname, args, sig, params, rule, frame, key)
        op = self.iteration.op
        try:  # the common numbers of inputs without a starred call (it costs more)
            if len(bases) == 1:
                return op(entry[1], bases[0], out=entry[0], name=entry[2])
            if len(bases) == 2:
                return op(entry[1], bases[0], bases[1], out=entry[0], name=entry[2])
            return op(entry[1], *bases, out=entry[0], name=entry[2])
        except ProgramError:  # said as ours
            self._refusal(fname, args)
            raise

    def _update(self, fname: str, target, args: tuple, params, rule, frame=None) -> None:
        """Declare a write into ``target`` (a tensor, or a view: through it into its base)
        reading ``args``: ``rule(target, args, params)`` checks it and gives the
        implementation ``impl(target view, *values)``."""
        if target.__class__ is View:
            base, chain, read_only = target.base, target.chain, target.read_only
        elif isinstance(target, Tensor):
            base, chain, read_only = target, (), False
        else:
            raise self._foreign(fname, (target, *args), target)
        if base.owner is not self._session or base.__class__ is not Tensor or read_only \
                or self._read_only:  # the checks the quick path leaves to the iteration
            if base.owner is not self._session or base.released or (
                    base.iteration is not None and base.iteration != self._number):
                self._check(fname, (target, *args), base)
            if read_only or (self._read_only and base.key in self._read_only):
                why = ("uploaded from a read-only host array" if base.key in self._read_only
                       else "a broadcast view")
                raise sites.error(ReadOnlyWriteError, fname, (target, *args),
                                  f"{target.name!r} is read-only ({why}): write into a copy "
                                  f"(xp.asarray(x, copy=True))")
        quick = quick_signature(args, self._session)
        bases, sig = quick if quick is not None else self._operands(fname, args)
        if frame is None:
            frame = _program_frame(sys._getframe(1))
        spec = base.spec
        if frame is not None:
            key = ("update", fname, spec.shape, spec.dtype, chain, sig, params,
                   id(frame.f_code), frame.f_lasti)
        else:
            key = ("update", fname, spec.shape, spec.dtype, chain, sig, params, None, 0)
        entry = _ENTRIES.get(key)
        if entry is None and sites.inside(frame):  # a call from elsewhere in cupool/program:
            frame = sites.outside(frame)  # the program's call is further out
            key = (*key[:-2], *sites.site(frame))
            entry = _ENTRIES.get(key)
        if entry is None:
            every = (target, *args)
            if base.released or (base.iteration is not None
                                 and base.iteration != self._number):
                self._check(fname, every, base)
            if quick is not None:
                self._operands(fname, args)
            self._check_open(fname, every)
            try:
                impl = rule(target, args, params)
            except Refusal as refusal:
                raise self._refused(fname, every, refusal, frame) from None
            operands = tuple(("c", a) if part[0] == "c" else ("in", part[0], part[3])
                             for a, part in zip(args, sig, strict=True))
            entry = (bodies.body(fname, impl, operands, chain), sites.label(fname, frame),
                     None if frame is None else frame.f_code)
            if len(_ENTRIES) >= sites.LIMIT:
                _ENTRIES.clear()
            _ENTRIES[key] = entry
        op = self.iteration.op
        try:
            if len(bases) == 1:
                op(entry[0], bases[0], updates=[base], name=entry[1])
            else:
                op(entry[0], *bases, updates=[base], name=entry[1])
        except ProgramError:  # said as ours
            self._refusal(fname, args, target)
            raise

    def _view(self, fname: str, x, step: tuple):
        """``x`` seen through one more view ``step`` (no op)."""
        if x.__class__ is View:
            base, chain, read_only = x.base, (*x.chain, step), x.read_only
        elif isinstance(x, Tensor):
            base, chain, read_only = x, (step,), False
        else:
            raise self._foreign(fname, (x,), x)
        spec = base.spec
        if base.owner is not self._session or base.released or (
                base.iteration is not None and base.iteration != self._number):
            self._check(fname, (x,), base)
        key = (spec.shape, spec.dtype, chain)
        shape = _VIEWS.get(key)
        if shape is None:
            try:
                shape = stand_in(spec.shape, spec.dtype, chain).shape
            except (IndexError, ValueError) as exc:
                raise sites.error(ShapeMismatchError, fname, (x,), str(exc)) from None
            except TypeError as exc:
                raise sites.error(UnsupportedFunctionError, fname, (x,), f"{exc}; {IT_OP}") \
                    from None
            if len(_VIEWS) >= sites.LIMIT:
                _VIEWS.clear()
            _VIEWS[key] = shape
        return View(base, chain, shape, read_only or step[0] == "broadcast")

    # -- operators (from the tensors' dunder methods) ---------------------------------------
    def binary_operator(self, ufunc: str, a, b, frame=None):
        """``a <op> b``; ``NotImplemented`` for an operand type NumPy would not take either.
        ``frame``: the program's frame that made the call (the tensors' operators give
        it)."""
        if (a.__class__ not in _COMMON or b.__class__ not in _COMMON) and not (
                isinstance(a, _OPERAND_TYPES) and isinstance(b, _OPERAND_TYPES)):
            return NotImplemented
        params, rule = _OPERATOR_CALLS[ufunc]
        return self._pure(ufunc, (a, b), params, rule, frame)

    def inplace_operator(self, ufunc: str, target, value, frame=None):
        """``target <op>= value``: an update of ``target`` (its base, for a view)."""
        if not isinstance(value, _OPERAND_TYPES):
            return NotImplemented
        self._update(_INPLACE_NAMES[ufunc], target, (value,), ufunc, rules.inplace_rule,
                     frame)
        return target

    # -- elementwise ------------------------------------------------------------------------
    def _elementwise(self, fname: str, *args):
        table = ELEMENTWISE_BINARY if len(args) == 2 else ELEMENTWISE_UNARY
        return self._pure(fname, args, table[fname], rules.elementwise_rule)

    def where(self, condition, x1, x2):
        return self._pure("where", (condition, x1, x2), None, rules.where_rule)

    def clip(self, x, min=None, max=None):  # NumPy's names
        return self._pure("clip", (x, min, max), None, rules.clip_rule)

    def round(self, x, decimals: int = 0):
        return self._pure("round", (x,), int(decimals), rules.round_rule)

    def astype(self, x, dtype, /, *, copy: bool = True, device=None):
        try:
            dt = shapes.check_dtype(dtype)
        except Refusal as refusal:
            raise self._refused("astype", (x,), refusal) from None
        if dt == x.dtype and not copy:
            return x
        return self._pure("astype", (x,), dt, rules.cast_rule)

    def copy(self, x):
        return self._pure("copy", (x,), None, rules.cast_rule)

    # -- linear algebra ---------------------------------------------------------------------
    def matmul(self, x1, x2, /):
        return self._pure("matmul", (x1, x2), "matmul", rules.linear_rule)

    def dot(self, a, b):
        return self._pure("dot", (a, b), "dot", rules.linear_rule)

    def einsum(self, subscripts: str, *operands):
        if not 1 <= len(operands) <= 2 or not isinstance(subscripts, str):
            raise sites.error(UnsupportedFunctionError, "einsum", operands,
                         f"einsum of one or two operands with a subscripts string is in the "
                         f"subset; {IT_OP}")
        return self._pure("einsum", operands, subscripts, rules.einsum_rule)

    # -- reductions -------------------------------------------------------------------------
    def _reduce(self, fname: str, x, axis, keepdims: bool, options: tuple = ()):
        try:
            axes = shapes.normalize_axes(axis, len(rules.shape_of(x)))
        except Refusal as refusal:
            raise self._refused(fname, (x,), refusal) from None
        return self._pure(fname, (x,), (axes, bool(keepdims), options),
                          rules.REDUCE_RULES[fname])

    def sum(self, x, /, *, axis=None, dtype=None, keepdims=False):
        return self._reduce("sum", x, axis, keepdims, rules.dtype_option(dtype))

    def prod(self, x, /, *, axis=None, dtype=None, keepdims=False):
        return self._reduce("prod", x, axis, keepdims, rules.dtype_option(dtype))

    def mean(self, x, /, *, axis=None, keepdims=False):
        return self._reduce("mean", x, axis, keepdims)

    def var(self, x, /, *, axis=None, correction=None, ddof=0, keepdims=False):
        return self._reduce("var", x, axis, keepdims,
                            (("ddof", correction if correction is not None else ddof),))

    def std(self, x, /, *, axis=None, correction=None, ddof=0, keepdims=False):
        return self._reduce("std", x, axis, keepdims,
                            (("ddof", correction if correction is not None else ddof),))

    def max(self, x, /, *, axis=None, keepdims=False):
        return self._reduce("max", x, axis, keepdims)

    def min(self, x, /, *, axis=None, keepdims=False):
        return self._reduce("min", x, axis, keepdims)

    def argmax(self, x, /, *, axis=None, keepdims=False):
        return self._reduce("argmax", x, None if axis is None else axis, keepdims)

    def argmin(self, x, /, *, axis=None, keepdims=False):
        return self._reduce("argmin", x, None if axis is None else axis, keepdims)

    def any(self, x, /, *, axis=None, keepdims=False):
        return self._reduce("any", x, axis, keepdims)

    def all(self, x, /, *, axis=None, keepdims=False):
        return self._reduce("all", x, axis, keepdims)

def _function(name: str, table: dict):
    operands = 2 if table is ELEMENTWISE_BINARY else 1
    params = table[name]
    rule = rules.elementwise_rule

    def function(self, *args, **options):
        if options or len(args) != operands:
            raise sites.error(UnsupportedFunctionError, name, args,
                              f"{name} takes {operands} operands here (no out=, where=, "
                              f"dtype=: got {sorted(options) or 'none'}); {IT_OP}")
        return self._pure(name, args, params, rule, sys._getframe(1))

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"NumPy's ``{table[name]}`` (elementwise, broadcast, one op)."
    return function


for _name in (*ELEMENTWISE_BINARY, *ELEMENTWISE_UNARY):
    if _name != "add" and not hasattr(ArrayNamespace, _name):
        setattr(ArrayNamespace, _name, _function(
            _name, ELEMENTWISE_BINARY if _name in ELEMENTWISE_BINARY else ELEMENTWISE_UNARY))
del _name


__all__ = ["ArrayNamespace",
           "missing_method", "no_iteration", "value_refused"]
