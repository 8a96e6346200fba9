"""The namespace's functions of shape, views, indexing and creation (a part of
:class:`~cupool.program.arrays.namespace.ArrayNamespace`, which provides ``_pure``,
``_update``, ``_view``, ``_operands``, ``_check_open``, ``_refused`` and ``_foreign``).

Views (``reshape`` where NumPy does not copy, ``transpose``, ``swapaxes``, ``expand_dims``,
``squeeze``, ``broadcast_to``, basic keys) are no ops; an integer-array key is a gather op,
item assignment and ``add.at`` updates; creation functions are ops without inputs, and
``asarray`` of host data an upload op (``it.input``).
"""

from __future__ import annotations

import math

import numpy as np

from cupool.program.arrays import rules, shapes
from cupool.program.arrays.errors import (
    ArrayDtypeError,
    ShapeMismatchError,
    UnsupportedFunctionError,
)
from cupool.program.arrays.shapes import Refusal
from cupool.program.arrays.sites import caller, error, label
from cupool.program.arrays.views import View, hashable_key, reshape_is_view
from cupool.program.tensors import Tensor

T_STEP = ("T",)
"""The view step of ``x.T`` (one object: the namespace makes ``x.T`` of a tensor at once)."""
T_CHAIN = (T_STEP,)
"""The chain of ``x.T`` of a tensor (one object, shared by every such view)."""


class StructureFunctions:
    """Shapes, views, joins, indexing, creation and dtype queries (module docstring)."""

    # -- shapes and views -------------------------------------------------------------------
    def reshape(self, x, /, shape, *, copy=None):
        try:
            new = shapes.reshaped(rules.shape_of(x), shape)
        except Refusal as refusal:
            raise self._refused("reshape", (x,), refusal) from None
        if copy:
            return self._pure("reshape", (x,), new, rules.reshape_copy_rule)
        if x.__class__ is View and not reshape_is_view(x.base.spec.shape, x.dtype, x.chain,
                                                       new):
            if copy is False:
                raise error(ShapeMismatchError, "reshape", (x,),
                             f"reshaping this view to {new} needs a copy (copy=False)")
            return self._pure("reshape", (x,), new, rules.reshape_copy_rule)
        return self._view("reshape", x, ("reshape", new))

    def ravel(self, x):
        return self.reshape(x, (-1,))

    def flatten(self, x):
        return self._pure("flatten", (x,), (x.size,), rules.reshape_copy_rule)

    def expand_dims(self, x, /, axis=0):
        shape = rules.shape_of(x)
        try:
            axis = shapes.normalize_axis(axis, len(shape) + 1)
        except Refusal as refusal:
            raise self._refused("expand_dims", (x,), refusal) from None
        return self._view("expand_dims", x, ("reshape", (*shape[:axis], 1, *shape[axis:])))

    def squeeze(self, x, /, axis=None):
        shape = rules.shape_of(x)
        try:
            axes = shapes.normalize_axes(axis, len(shape))
        except Refusal as refusal:
            raise self._refused("squeeze", (x,), refusal) from None
        if axes is not None and any(shape[a] != 1 for a in axes):
            raise error(ShapeMismatchError, "squeeze", (x,),
                         f"axis {axis} does not have size 1")
        return self._view("squeeze", x, ("squeeze", axes))

    def transpose(self, x, axes=None):
        if axes is None:
            return self.transpose_view(x, "transpose")
        axes = tuple(axes)
        if sorted(a % max(len(rules.shape_of(x)), 1) for a in axes) != list(
                range(len(rules.shape_of(x)))):
            raise error(ShapeMismatchError, "transpose", (x,),
                         f"axes {axes} are not a permutation of the {len(rules.shape_of(x))} axes")
        return self._view("transpose", x, ("transpose", axes))

    def transpose_view(self, x, fname: str = "T"):
        if x.__class__ is Tensor and x.owner is self._session and not x.released and (
                x.iteration is None or x.iteration == self._number):
            return View(x, T_CHAIN, x.spec.shape[::-1], False)  # x.T: the common view
        return self._view(fname, x, T_STEP)

    def permute_dims(self, x, /, axes):
        return self.transpose(x, axes)

    def swapaxes(self, x, axis1: int, axis2: int):
        return self._view("swapaxes", x, ("swapaxes", int(axis1), int(axis2)))

    def matrix_transpose(self, x, /):
        if len(rules.shape_of(x)) < 2:
            raise error(ShapeMismatchError, "matrix_transpose", (x,),
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
            raise error(UnsupportedFunctionError, "take", (x, indices),
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
                    raise error(UnsupportedFunctionError, fname, (x, item),
                                 "a boolean mask gives a shape that depends on the data: "
                                 "use xp.where(mask, x, y) or an integer index")
                if item.dtype.kind not in "iu":
                    raise error(ArrayDtypeError, fname, (x, item),
                                 f"an index array must hold integers, not {item.dtype}")
                template.append(("a", len(arrays)))
                arrays.append(item)
                continue
            basic = hashable_key(item)
            if basic is None or len(basic) != 1:
                raise error(UnsupportedFunctionError, fname, (x, item),
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
        frame = caller()
        get = getattr(obj, "get", None)
        host = np.asarray(get() if get is not None and not isinstance(obj, np.ndarray)
                          else obj, dtype=dtype)
        try:
            shapes.check_dtype(host.dtype)
        except Refusal as refusal:
            raise self._refused("asarray", (host,), refusal, frame) from None
        self._check_open("asarray", (host,))
        tensor = self.iteration.input(host, name=label("asarray", frame))
        if isinstance(obj, np.ndarray) and not obj.flags.writeable:
            self._read_only.add(tensor.key)
        return tensor

    def _create(self, fname: str, shape, dtype, value):
        try:
            shape = rules.as_shape(shape)
            dt = shapes.check_dtype(np.float64 if dtype is None else dtype)
        except Refusal as refusal:
            raise self._refused(fname, (), refusal) from None
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
        for value in (start, stop, step):
            if not isinstance(value, (int, float, np.integer, np.floating)):
                raise error(UnsupportedFunctionError, "arange", (start, stop, step),
                             "arange takes Python or NumPy scalars")
        if step == 0:
            raise error(ShapeMismatchError, "arange", (start, stop, step), "step is 0")
        if dtype is None:
            dtype = np.result_type(*(np.asarray(v).dtype for v in (start, stop, step)))
        try:
            dt = shapes.check_dtype(dtype)
        except Refusal as refusal:
            raise self._refused("arange", (start, stop, step), refusal) from None
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


__all__ = ["T_CHAIN", "T_STEP", "StructureFunctions"]
