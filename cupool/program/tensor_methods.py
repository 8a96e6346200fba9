"""The array surface of a tensor handle: Python's operators, the array attributes and
methods, ``__array_namespace__``, each forwarded to the array namespace of the iteration
being declared (``it.xp``, :mod:`cupool.program.arrays`), which declares it as one op.

:class:`ArrayMethods` is mixed into :class:`~cupool.program.tensors.Tensor` and into the
namespace's views (:class:`~cupool.program.arrays.views.View`); it holds no state and
imports nothing of the namespace: a tensor finds its namespace through its session's open
iteration (``session._open_iteration.xp``). ``x + y``, ``x @ w``, ``x.T``, ``x[1:]``,
``x.sum(axis=0)``, ``w -= lr * g`` (an in-place update of ``w``) are the namespace's
``add``, ``matmul``, a transposed view, a sliced view, ``sum`` and an update op. NumPy
defers to these operators (``__array_ufunc__ = None``), so ``np.float32(2) * x`` is
``x.__rmul__``. A tensor's value does not exist while its step is declared: ``float(x)``,
``bool(x)``, ``np.asarray(x)`` raise :class:`~cupool.program.arrays.errors.ArrayValueError`
(fetch values with ``it.fetch``). Tensors keep identity hashing (``hash(x)``), so they
still key dictionaries; ``==`` is elementwise, as NumPy's.
"""

from __future__ import annotations

from sys import _getframe


def _namespace(tensor, function: str):
    """The array namespace of the iteration ``tensor``'s session is declaring."""
    it = getattr(tensor.owner, "_open_iteration", None)
    if it is not None:
        xp = getattr(it, "_xp", None)  # made by the first it.xp
        if xp is not None:
            return xp
    else:
        from cupool.program.arrays.namespace import no_iteration

        raise no_iteration(tensor, function)
    return it.xp


def _refuse_value(tensor, function: str):
    from cupool.program.arrays.namespace import value_refused

    raise value_refused(tensor, function)


class ArrayMethods:
    """Operators, attributes and methods of an array (module docstring)."""

    __slots__ = ()
    __array_ufunc__ = None  # NumPy defers its operators to ours
    __hash__ = object.__hash__

    # -- attributes ------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def device(self) -> str:
        """The session's device (arrays of one step share it)."""
        return getattr(getattr(self.owner, "device", None), "kind", "eager")

    @property
    def T(self):
        try:
            xp = self.owner._open_iteration._xp
        except AttributeError:
            xp = _namespace(self, "T")
        return xp.transpose_view(self, "T")

    @property
    def mT(self):
        return _namespace(self, "mT").matrix_transpose(self)

    def __array_namespace__(self, api_version=None):
        return _namespace(self, "__array_namespace__")

    # -- indexing --------------------------------------------------------------------------
    def __getitem__(self, key):
        return _namespace(self, "__getitem__").getitem(self, key)

    def __setitem__(self, key, value) -> None:
        _namespace(self, "__setitem__").setitem(self, key, value)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        xp = _namespace(self, "__iter__")
        return iter([xp.getitem(self, i) for i in range(self.shape[0])])

    # -- operators -------------------------------------------------------------------------
    def __neg__(self):
        return _namespace(self, "negative").negative(self)

    def __pos__(self):
        return _namespace(self, "positive").positive(self)

    def __abs__(self):
        return _namespace(self, "abs").abs(self)

    def __invert__(self):
        return _namespace(self, "invert").invert(self)

    # -- methods (NumPy's ndarray methods of the subset) -----------------------------------
    def astype(self, dtype, copy: bool = True):
        return _namespace(self, "astype").astype(self, dtype, copy=copy)

    def reshape(self, *shape, copy=None):
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = shape[0]
        return _namespace(self, "reshape").reshape(self, shape, copy=copy)

    def transpose(self, *axes):
        if len(axes) == 1 and (axes[0] is None or not isinstance(axes[0], int)):
            axes = axes[0]
        return _namespace(self, "transpose").transpose(self, axes or None)

    def swapaxes(self, axis1: int, axis2: int):
        return _namespace(self, "swapaxes").swapaxes(self, axis1, axis2)

    def squeeze(self, axis=None):
        return _namespace(self, "squeeze").squeeze(self, axis)

    def ravel(self):
        return _namespace(self, "ravel").ravel(self)

    def flatten(self):
        return _namespace(self, "flatten").flatten(self)

    def copy(self):
        return _namespace(self, "copy").copy(self)

    def take(self, indices, axis=None):
        return _namespace(self, "take").take(self, indices, axis=axis)

    def dot(self, other):
        return _namespace(self, "dot").dot(self, other)

    def clip(self, min=None, max=None):
        return _namespace(self, "clip").clip(self, min, max)

    def sum(self, axis=None, dtype=None, keepdims=False):
        return _namespace(self, "sum").sum(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def prod(self, axis=None, dtype=None, keepdims=False):
        return _namespace(self, "prod").prod(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def mean(self, axis=None, keepdims=False):
        return _namespace(self, "mean").mean(self, axis=axis, keepdims=keepdims)

    def var(self, axis=None, ddof=0, keepdims=False):
        return _namespace(self, "var").var(self, axis=axis, ddof=ddof, keepdims=keepdims)

    def std(self, axis=None, ddof=0, keepdims=False):
        return _namespace(self, "std").std(self, axis=axis, ddof=ddof, keepdims=keepdims)

    def max(self, axis=None, keepdims=False):
        return _namespace(self, "max").max(self, axis=axis, keepdims=keepdims)

    def min(self, axis=None, keepdims=False):
        return _namespace(self, "min").min(self, axis=axis, keepdims=keepdims)

    def argmax(self, axis=None, keepdims=False):
        return _namespace(self, "argmax").argmax(self, axis=axis, keepdims=keepdims)

    def argmin(self, axis=None, keepdims=False):
        return _namespace(self, "argmin").argmin(self, axis=axis, keepdims=keepdims)

    def any(self, axis=None, keepdims=False):
        return _namespace(self, "any").any(self, axis=axis, keepdims=keepdims)

    def all(self, axis=None, keepdims=False):
        return _namespace(self, "all").all(self, axis=axis, keepdims=keepdims)

    # -- values: not while the step is declared ---------------------------------------------
    def __bool__(self):
        _refuse_value(self, "bool")

    def __float__(self):
        _refuse_value(self, "float")

    def __int__(self):
        _refuse_value(self, "int")

    def __complex__(self):
        _refuse_value(self, "complex")

    def __array__(self, dtype=None, copy=None):
        _refuse_value(self, "numpy.asarray")

    def item(self, *args):
        _refuse_value(self, "item")

    def tolist(self):
        _refuse_value(self, "tolist")

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        from cupool.program.arrays.namespace import missing_method

        raise missing_method(self, name)


def _binary(ufunc: str):
    # Each passes the program's frame (the caller of the operator) for the op's name.
    def forward(self, other):
        try:  # the namespace the iteration being declared made (the common case)
            xp = self.owner._open_iteration._xp
        except AttributeError:
            xp = _namespace(self, ufunc)
        return xp.binary_operator(ufunc, self, other, _getframe(1))

    def reflected(self, other):
        try:
            xp = self.owner._open_iteration._xp
        except AttributeError:
            xp = _namespace(self, ufunc)
        return xp.binary_operator(ufunc, other, self, _getframe(1))

    def inplace(self, other):
        try:
            xp = self.owner._open_iteration._xp
        except AttributeError:
            xp = _namespace(self, ufunc)
        return xp.inplace_operator(ufunc, self, other, _getframe(1))

    return forward, reflected, inplace


_OPERATORS = {"add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide",
              "floordiv": "floor_divide", "mod": "remainder", "pow": "pow",
              "matmul": "matmul", "and": "bitwise_and", "or": "bitwise_or",
              "xor": "bitwise_xor"}
_COMPARISONS = {"lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal",
                "eq": "equal", "ne": "not_equal"}

for _name, _ufunc in _OPERATORS.items():
    _forward, _reflected, _inplace = _binary(_ufunc)
    for _dunder, _method in ((f"__{_name}__", _forward), (f"__r{_name}__", _reflected),
                             (f"__i{_name}__", _inplace)):
        _method.__name__ = _method.__qualname__ = _dunder
        setattr(ArrayMethods, _dunder, _method)
for _name, _ufunc in _COMPARISONS.items():
    _forward = _binary(_ufunc)[0]
    _forward.__name__ = _forward.__qualname__ = f"__{_name}__"
    setattr(ArrayMethods, f"__{_name}__", _forward)
del _name, _ufunc, _forward, _reflected, _inplace, _dunder, _method

__all__ = ["ArrayMethods"]
