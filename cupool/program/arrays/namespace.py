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
constants, parameters) keys a module-wide cache of the output spec and the body: a call
made again in a later step declares the same callable with the same spec, which the
iteration matches with the recorded op (and the planned step reuses the op's call).

**Errors** are raised when the call is made (:mod:`cupool.program.arrays.errors`), naming the
function, the operands' shapes and the call's source line: a function outside the subset,
operands that do not broadcast, a matmul's inner sizes, a dtype the device cannot hold, a
write into a read-only tensor or a view of one, a tensor of another session, of an ended
iteration or of a closed session.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import numpy as np

from cupool.program.arrays import bodies, rules, shapes
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
from cupool.program.arrays.rules import ELEMENTWISE_BINARY, ELEMENTWISE_UNARY
from cupool.program.arrays.shapes import Refusal
from cupool.program.arrays.views import View, hashable_key, reshape_is_view, stand_in
from cupool.program.errors import ProgramError
from cupool.program.tensor_methods import ArrayMethods
from cupool.program.tensors import Tensor

_PROGRAM_DIR = str(Path(__file__).resolve().parents[1]) + os.sep
_SCALARS = (bool, int, float, complex)
_SCALAR_TYPES = frozenset(_SCALARS)
_OPERAND_TYPES = (Tensor, View, *_SCALARS, np.generic, np.ndarray)
_COMMON = frozenset({Tensor, View, float, int})
_HERE = globals()
_METHODS = vars(sys.modules[ArrayMethods.__module__])
_INPLACE_NAMES = {name: f"{name}_inplace" for name in bodies.INPLACE}
_ENTRIES: dict = {}
_LABELS: dict = {}
_VIEWS: dict = {}
_LIMIT = 8192
_REFUSALS = {"shape": ShapeMismatchError, "dtype": ArrayDtypeError,
             "unsupported": UnsupportedFunctionError, "read-only": ReadOnlyWriteError}

# -- where a call comes from ---------------------------------------------------------------
def _caller():
    """The first frame outside ``cupool/program`` (the program's call)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_PROGRAM_DIR):
        frame = frame.f_back
    return frame


def _where(frame) -> str:
    return "<unknown>" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _label(fname: str, frame) -> str:
    """``fname@file.py:line`` for a call from ``frame`` (cached per function and line)."""
    if frame is None:
        return fname
    code = frame.f_code
    key = (fname, code.co_filename, frame.f_lineno)
    label = _LABELS.get(key)
    if label is None:
        if len(_LABELS) >= _LIMIT:
            _LABELS.clear()
        label = _LABELS[key] = f"{fname}@{os.path.basename(key[1])}:{key[2]}"
    return label


def _shown(value):
    """An operand as an error shows it: a shape, or the ``repr`` of anything else."""
    if isinstance(value, (Tensor, View)):
        return tuple(value.shape)
    if isinstance(value, np.ndarray):
        return f"host array {value.shape}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _error(cls, fname: str, args, detail: str, frame=None, **extra):
    frame = frame if frame is not None else _caller()
    return cls(fname, tuple(_shown(a) for a in args), _where(frame), detail, **extra)


def no_iteration(tensor, function: str):
    """The error for an array operation on ``tensor`` while its session declares no
    iteration (or is closed)."""
    owner = tensor.owner
    if getattr(owner, "closed", False):
        return _error(ArraySessionClosedError, function, (tensor,),
                      f"tensor {tensor.name!r}'s session is closed")
    return _error(ArrayScopeError, function, (tensor,),
                  f"tensor {tensor.name!r}: its session is declaring no iteration (array "
                  f"operations are declared inside 'with session.iteration() as it:')",
                  tensor=tensor.name)


def value_refused(tensor, function: str):
    return _error(ArrayValueError, function, (tensor,),
                  f"tensor {tensor.name!r} has no value while its step is declared (the step "
                  f"runs when its 'with' block ends): fetch it with it.fetch(tensor) and read "
                  f".value after the block")


def missing_method(tensor, name: str):
    return _error(MissingFunctionError, f"ndarray.{name}", (tensor,),
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


class ArrayNamespace:
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
        raise _error(MissingFunctionError, name, (),
                     f"{name!r} is not in cupool's array subset; {IT_OP}")

    # -- the declaring core ---------------------------------------------------------------
    def _check(self, fname: str, args, tensor: Tensor) -> None:
        """The typed error for a ``tensor`` this iteration cannot use."""
        session = self._session
        if tensor.owner is not session:
            if getattr(tensor.owner, "closed", False):
                raise _error(ArraySessionClosedError, fname, args,
                             f"tensor {tensor.name!r}'s session is closed")
            raise _error(ArrayScopeError, fname, args,
                         f"tensor {tensor.name!r} belongs to another session",
                         tensor=tensor.name)
        if tensor.released:
            raise _error(ArrayReleasedError, fname, args,
                         f"tensor {tensor.name!r} was released", tensor=tensor.name)
        raise _error(ArrayScopeError, fname, args,
                     f"tensor {tensor.name!r} is an output of iteration {tensor.iteration}, "
                     f"which has ended (this is iteration {self._number})",
                     tensor=tensor.name)

    def _check_open(self, fname: str, args) -> None:
        if getattr(self._session, "closed", False):
            raise _error(ArraySessionClosedError, fname, args, "the session is closed")
        if getattr(self.iteration, "_state", "open") != "open":
            raise _error(ArrayScopeError, fname, args,
                         f"iteration {self._number} is not being declared (its 'with' block "
                         f"has ended): use the namespace of the iteration being declared")

    def _operands(self, fname: str, args):
        """The distinct tensors ``args`` read (views give their base) and the call's
        signature: per operand ``(k, base shape, dtype, chain)`` or a constant's key."""
        if len(args) == 2:  # the common case first: a tensor and a tensor or a number
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
                    raise _error(ArrayDtypeError, fname, args,
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
            return _error(UnsupportedFunctionError, fname, args,
                          "a host or device array is not a tensor of this step: bring it in "
                          "with xp.asarray(array) (an upload op)")
        return _error(UnsupportedFunctionError, fname, args,
                      f"operand {type(value).__name__} is not a tensor, a view or a scalar")

    def _refused(self, fname: str, args, refusal: Refusal, frame):
        cls = _REFUSALS[refusal.kind]
        detail = refusal.detail + (f"; {IT_OP}" if refusal.kind == "unsupported" else "")
        return _error(cls, fname, args, detail, frame)

    def _entry(self, fname, args, sig, params, rule, frame, key):
        try:
            shape, dtype, impl = rule(args, params)
            dtype = shapes.check_dtype(dtype)
        except Refusal as refusal:
            raise self._refused(fname, args, refusal, frame) from None
        operands = tuple(("c", a) if part[0] == "c" else ("in", part[0], part[3])
                         for a, part in zip(args, sig, strict=True))
        entry = ((tuple(shape), dtype), bodies.body(fname, impl, operands), _label(fname, frame))
        if len(_ENTRIES) >= _LIMIT:
            _ENTRIES.clear()
        _ENTRIES[key] = entry
        return entry

    def _pure(self, fname: str, args: tuple, params, rule):
        """Declare ``fname(*args)`` as an op with one new output (``rule(args, params)``
        gives its shape, dtype and implementation); returns the output tensor. The cache
        key holds the call site too: one lookup gives the output spec, the body and the
        op's name."""
        bases, sig = self._operands(fname, args)
        frame = sys._getframe(1)  # the program's call: the first frame of another module
        while frame is not None and (frame.f_globals is _HERE or frame.f_globals is _METHODS):
            frame = frame.f_back
        if frame is not None and frame.f_code.co_filename.startswith(_PROGRAM_DIR):
            frame = _caller()  # a call from elsewhere in cupool/program
        if frame is not None:
            key = (fname, sig, params, frame.f_code.co_filename, frame.f_lineno)
        else:
            key = (fname, sig, params, "<unknown>", 0)
        entry = _ENTRIES.get(key)
        if entry is None:
            self._check_open(fname, args)
            entry = self._entry(fname, args, sig, params, rule, frame, key)
        try:
            return self.iteration.op(entry[1], *bases, out=entry[0], name=entry[2])
        except ProgramError:  # a closed session or an ended iteration: said as ours
            self._check_open(fname, args)
            raise

    def _update(self, fname: str, target, args: tuple, params, rule) -> None:
        """Declare a write into ``target`` (a tensor, or a view: through it into its base)
        reading ``args``: ``rule(target, args, params)`` checks it and gives the
        implementation ``impl(target view, *values)``."""
        if target.__class__ is View:
            base, chain, read_only = target.base, target.chain, target.read_only
        elif isinstance(target, Tensor):
            base, chain, read_only = target, (), False
        else:
            raise self._foreign(fname, (target, *args), target)
        if base.owner is not self._session or base.released or (
                base.iteration is not None and base.iteration != self._number):
            self._check(fname, (target, *args), base)
        if read_only or (self._read_only and base.key in self._read_only):
            why = ("uploaded from a read-only host array" if base.key in self._read_only
                   else "a broadcast view")
            raise _error(ReadOnlyWriteError, fname, (target, *args),
                         f"{target.name!r} is read-only ({why}): write into a copy "
                         f"(xp.asarray(x, copy=True))")
        bases, sig = self._operands(fname, args)
        frame = sys._getframe(1)  # the program's call: the first frame of another module
        while frame is not None and (frame.f_globals is _HERE or frame.f_globals is _METHODS):
            frame = frame.f_back
        if frame is not None and frame.f_code.co_filename.startswith(_PROGRAM_DIR):
            frame = _caller()
        site = (frame.f_code.co_filename, frame.f_lineno) if frame is not None else ("", 0)
        spec = base.spec
        key = ("update", fname, spec.shape, spec.dtype, chain, sig, params, *site)
        entry = _ENTRIES.get(key)
        if entry is None:
            every = (target, *args)
            self._check_open(fname, every)
            try:
                impl = rule(target, args, params)
            except Refusal as refusal:
                raise self._refused(fname, every, refusal, frame) from None
            operands = tuple(("c", a) if part[0] == "c" else ("in", part[0], part[3])
                             for a, part in zip(args, sig, strict=True))
            entry = (bodies.body(fname, impl, operands, chain), _label(fname, frame))
            if len(_ENTRIES) >= _LIMIT:
                _ENTRIES.clear()
            _ENTRIES[key] = entry
        try:
            self.iteration.op(entry[0], *bases, updates=[base], name=entry[1])
        except ProgramError:  # a closed session or an ended iteration: said as ours
            self._check_open(fname, (target, *args))
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
                raise _error(ShapeMismatchError, fname, (x,), str(exc)) from None
            except TypeError as exc:
                raise _error(UnsupportedFunctionError, fname, (x,), f"{exc}; {IT_OP}") \
                    from None
            if len(_VIEWS) >= _LIMIT:
                _VIEWS.clear()
            _VIEWS[key] = shape
        return View(base, chain, shape, read_only or step[0] == "broadcast")

    # -- operators (from the tensors' dunder methods) ---------------------------------------
    def binary_operator(self, ufunc: str, a, b):
        """``a <op> b``; ``NotImplemented`` for an operand type NumPy would not take either."""
        if (a.__class__ not in _COMMON or b.__class__ not in _COMMON) and not (
                isinstance(a, _OPERAND_TYPES) and isinstance(b, _OPERAND_TYPES)):
            return NotImplemented
        if ufunc == "pow":
            return self._pure("pow", (a, b), None, rules.power_operator_rule)
        if ufunc == "matmul":
            return self.matmul(a, b)
        return self._pure(ufunc, (a, b), ELEMENTWISE_BINARY[ufunc], rules.elementwise_rule)

    def inplace_operator(self, ufunc: str, target, value):
        """``target <op>= value``: an update of ``target`` (its base, for a view)."""
        if not isinstance(value, _OPERAND_TYPES):
            return NotImplemented
        self._update(_INPLACE_NAMES[ufunc], target, (value,), ufunc, rules.inplace_rule)
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
        frame = _caller()
        try:
            dt = shapes.check_dtype(dtype)
        except Refusal as refusal:
            raise self._refused("astype", (x,), refusal, frame) from None
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
            raise _error(UnsupportedFunctionError, "einsum", operands,
                         f"einsum of one or two operands with a subscripts string is in the "
                         f"subset; {IT_OP}")
        return self._pure("einsum", operands, subscripts, rules.einsum_rule)

    # -- reductions -------------------------------------------------------------------------
    def _reduce(self, fname: str, x, axis, keepdims: bool, options: tuple = ()):
        frame = _caller()
        try:
            axes = shapes.normalize_axes(axis, len(rules.shape_of(x)))
        except Refusal as refusal:
            raise self._refused(fname, (x,), refusal, frame) from None
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

    # -- shapes and views -------------------------------------------------------------------
    def reshape(self, x, /, shape, *, copy=None):
        frame = _caller()
        try:
            new = shapes.reshaped(rules.shape_of(x), shape)
        except Refusal as refusal:
            raise self._refused("reshape", (x,), refusal, frame) from None
        if copy:
            return self._pure("reshape", (x,), new, rules.reshape_copy_rule)
        if x.__class__ is View and not reshape_is_view(x.base.spec.shape, x.dtype, x.chain,
                                                       new):
            if copy is False:
                raise _error(ShapeMismatchError, "reshape", (x,),
                             f"reshaping this view to {new} needs a copy (copy=False)", frame)
            return self._pure("reshape", (x,), new, rules.reshape_copy_rule)
        return self._view("reshape", x, ("reshape", new))

    def ravel(self, x):
        return self.reshape(x, (-1,))

    def flatten(self, x):
        return self._pure("flatten", (x,), (x.size,), rules.reshape_copy_rule)

    def expand_dims(self, x, /, axis=0):
        shape = rules.shape_of(x)
        frame = _caller()
        try:
            axis = shapes.normalize_axis(axis, len(shape) + 1)
        except Refusal as refusal:
            raise self._refused("expand_dims", (x,), refusal, frame) from None
        return self._view("expand_dims", x, ("reshape", (*shape[:axis], 1, *shape[axis:])))

    def squeeze(self, x, /, axis=None):
        shape = rules.shape_of(x)
        frame = _caller()
        try:
            axes = shapes.normalize_axes(axis, len(shape))
        except Refusal as refusal:
            raise self._refused("squeeze", (x,), refusal, frame) from None
        if axes is not None and any(shape[a] != 1 for a in axes):
            raise _error(ShapeMismatchError, "squeeze", (x,),
                         f"axis {axis} does not have size 1", frame)
        return self._view("squeeze", x, ("squeeze", axes))

    def transpose(self, x, axes=None):
        if axes is None:
            return self.transpose_view(x, "transpose")
        axes = tuple(axes)
        if sorted(a % max(len(rules.shape_of(x)), 1) for a in axes) != list(
                range(len(rules.shape_of(x)))):
            raise _error(ShapeMismatchError, "transpose", (x,),
                         f"axes {axes} are not a permutation of the {len(rules.shape_of(x))} axes")
        return self._view("transpose", x, ("transpose", axes))

    def transpose_view(self, x, fname: str = "T"):
        return self._view(fname, x, ("T",))

    def permute_dims(self, x, /, axes):
        return self.transpose(x, axes)

    def swapaxes(self, x, axis1: int, axis2: int):
        return self._view("swapaxes", x, ("swapaxes", int(axis1), int(axis2)))

    def matrix_transpose(self, x, /):
        if len(rules.shape_of(x)) < 2:
            raise _error(ShapeMismatchError, "matrix_transpose", (x,),
                         "needs at least 2 dimensions")
        return self._view("matrix_transpose", x, ("swapaxes", -2, -1))

    def broadcast_to(self, x, /, shape):
        return self._view("broadcast_to", x, ("broadcast", tuple(int(n) for n in shape)))

    def concatenate(self, arrays, /, axis=0):
        return self._pure("concatenate", tuple(arrays), ("concatenate", axis), rules.join_rule)

    def concat(self, arrays, /, *, axis=0):
        return self._pure("concat", tuple(arrays), ("concatenate", axis), rules.join_rule)

    def stack(self, arrays, /, *, axis=0):
        return self._pure("stack", tuple(arrays), ("stack", axis), rules.join_rule)

    # -- indexing ---------------------------------------------------------------------------
    def getitem(self, x, key):
        """``x[key]``: a view for a basic key; a gather op for integer-array keys."""
        hkey = hashable_key(key)
        if hkey is not None:
            return self._view("__getitem__", x, ("getitem", hkey))
        template, arrays = self._advanced(key, x)
        return self._pure("__getitem__", (x, *arrays), template, rules.gather_rule)

    def setitem(self, x, key, value) -> None:
        """``x[key] = value``: an update of ``x``'s base."""
        hkey = hashable_key(key)
        if hkey is not None:
            if value.__class__ is View and isinstance(x, (Tensor, View)):
                chain = (*(x.chain if x.__class__ is View else ()), ("getitem", hkey))
                base = x.base if x.__class__ is View else x
                if value.base is base and value.chain == chain:
                    return  # x[k] op= v already wrote through the view x[k]
            self._update("__setitem__", x, (value,), ("basic", hkey), rules.set_rule)
            return
        template, arrays = self._advanced(key, x)
        self._update("__setitem__", x, (*arrays, value), ("indexed", template), rules.set_rule)

    def take(self, x, indices, /, *, axis=None):
        if not isinstance(indices, (Tensor, View)):
            raise _error(UnsupportedFunctionError, "take", (x, indices),
                         "indices must be a tensor (bring host indices in with xp.asarray)")
        return self._pure("take", (x, indices), axis, rules.take_rule)

    def _add_at(self, x, indices, values):
        template, arrays = self._advanced(indices, x, "add.at")
        self._update("add.at", x, (*arrays, values), template, rules.add_at_rule)

    def _advanced(self, key, x, fname: str = "__getitem__"):
        """An integer-array key as a template (``("a", k)`` for the ``k``-th index tensor,
        basic items as in a view's key) and its index tensors."""
        items = key if isinstance(key, tuple) else (key,)
        template, arrays = [], []
        for item in items:
            if isinstance(item, (Tensor, View)):
                if item.dtype.kind == "b":
                    raise _error(UnsupportedFunctionError, fname, (x, item),
                                 "a boolean mask gives a shape that depends on the data: "
                                 "use xp.where(mask, x, y) or an integer index")
                if item.dtype.kind not in "iu":
                    raise _error(ArrayDtypeError, fname, (x, item),
                                 f"an index array must hold integers, not {item.dtype}")
                template.append(("a", len(arrays)))
                arrays.append(item)
                continue
            basic = hashable_key(item)
            if basic is None or len(basic) != 1:
                raise _error(UnsupportedFunctionError, fname, (x, item),
                             f"index {item!r} is outside the subset (ints, slices, None, "
                             f"..., integer tensors); bring host index arrays in with "
                             f"xp.asarray")
            template.append(basic[0])
        return tuple(template), tuple(arrays)

    # -- creation ---------------------------------------------------------------------------
    def asarray(self, obj, /, *, dtype=None, device=None, copy=None):
        """A tensor of ``obj``: a tensor or view of this step as it is (``astype`` for another
        dtype, a copy op with ``copy=True``); host data (a NumPy array, a scalar, a list) an
        upload op of this iteration (``it.input``), read-only where the NumPy array was."""
        if isinstance(obj, (Tensor, View)):
            if dtype is not None and np.dtype(dtype) != obj.dtype:
                return self.astype(obj, dtype)
            return self.copy(obj) if copy else obj
        frame = _caller()
        get = getattr(obj, "get", None)
        host = np.asarray(get() if get is not None and not isinstance(obj, np.ndarray)
                          else obj, dtype=dtype)
        try:
            shapes.check_dtype(host.dtype)
        except Refusal as refusal:
            raise self._refused("asarray", (host,), refusal, frame) from None
        self._check_open("asarray", (host,))
        tensor = self.iteration.input(host, name=_label("asarray", frame))
        if isinstance(obj, np.ndarray) and not obj.flags.writeable:
            self._read_only.add(tensor.key)
        return tensor

    def _create(self, fname: str, shape, dtype, value):
        frame = _caller()
        try:
            shape = rules.as_shape(shape)
            dt = shapes.check_dtype(np.float64 if dtype is None else dtype)
        except Refusal as refusal:
            raise self._refused(fname, (), refusal, frame) from None
        return self._pure(fname, (), (shape, dt, rules.constant_key(value), value), rules.fill_rule)

    def zeros(self, shape, *, dtype=None, device=None):
        return self._create("zeros", shape, dtype, 0)

    def ones(self, shape, *, dtype=None, device=None):
        return self._create("ones", shape, dtype, 1)

    def empty(self, shape, *, dtype=None, device=None):
        """Zeros (an empty array's values are unspecified; zeros are deterministic)."""
        return self._create("empty", shape, dtype, 0)

    def full(self, shape, fill_value, *, dtype=None, device=None):
        return self._create("full", shape, np.asarray(fill_value).dtype if dtype is None
                            else dtype, fill_value)

    def _like(self, fname: str, x, dtype, value):
        if not isinstance(x, (Tensor, View)):
            raise self._foreign(fname, (x,), x)
        self._operands(fname, (x,))  # its scope (it is not read)
        return self._create(fname, tuple(x.shape), x.dtype if dtype is None else dtype,
                            value)

    def zeros_like(self, x, /, *, dtype=None, device=None):
        return self._like("zeros_like", x, dtype, 0)

    def ones_like(self, x, /, *, dtype=None, device=None):
        return self._like("ones_like", x, dtype, 1)

    def empty_like(self, x, /, *, dtype=None, device=None):
        return self._like("empty_like", x, dtype, 0)

    def full_like(self, x, /, fill_value, *, dtype=None, device=None):
        return self._like("full_like", x, dtype, fill_value)

    def arange(self, start, /, stop=None, step=1, *, dtype=None, device=None):
        if stop is None:
            start, stop = 0, start
        frame = _caller()
        for value in (start, stop, step):
            if not isinstance(value, (int, float, np.integer, np.floating)):
                raise _error(UnsupportedFunctionError, "arange", (start, stop, step),
                             "arange takes Python or NumPy scalars", frame)
        if step == 0:
            raise _error(ShapeMismatchError, "arange", (start, stop, step), "step is 0", frame)
        if dtype is None:
            dtype = np.result_type(*(np.asarray(v).dtype for v in (start, stop, step)))
        try:
            dt = shapes.check_dtype(dtype)
        except Refusal as refusal:
            raise self._refused("arange", (start, stop, step), refusal, frame) from None
        length = max(0, math.ceil((stop - start) / step))
        params = ((length,), dt, ("arange", *map(rules.constant_key, (start, stop, step))))
        return self._pure("arange", (), (*params, (start, stop, step)), rules.arange_rule)

    # -- dtypes (host-side, no ops) ---------------------------------------------------------
    def result_type(self, *arrays_and_dtypes):
        return np.result_type(*(a.dtype if isinstance(a, (Tensor, View)) else a
                                for a in arrays_and_dtypes))

    def can_cast(self, from_, to, /):
        return np.can_cast(from_.dtype if isinstance(from_, (Tensor, View)) else from_, to)

    def isdtype(self, dtype, kind):
        return np.isdtype(dtype, kind)

    def finfo(self, type_):
        return np.finfo(type_.dtype if isinstance(type_, (Tensor, View)) else type_)

    def iinfo(self, type_):
        return np.iinfo(type_.dtype if isinstance(type_, (Tensor, View)) else type_)


def _function(name: str, table: dict):
    def function(self, *args):
        if len(args) != (2 if table is ELEMENTWISE_BINARY else 1):
            raise _error(UnsupportedFunctionError, name, args,
                         f"{name} takes {2 if table is ELEMENTWISE_BINARY else 1} operands "
                         f"here (no out=, where=, dtype=); {IT_OP}")
        return self._pure(name, args, table[name], rules.elementwise_rule)

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
