"""Views: a tensor seen through transposes, basic slices and reshapes, never copied and never
a buffer of its own.

A :class:`View` holds its *base* (a :class:`~cupool.program.tensors.Tensor`, whose bytes
the plan owns and may move) and a *chain* of view steps. It is not a tensor of the program:
an op given a view declares its base as the input (or as the update, when it writes through
the view), and its body applies the chain to the base's array when it runs — the same
``a.T``, ``a[1:, ::2]``, ``a.reshape(...)`` NumPy applies, so the op sees the same strides
as the program without cupool. The planner therefore sees every read and write of the
base's bytes, and a view never aliases memory the plan may move behind its back: while no
op runs there is no array at all, only the recipe.

Steps (each hashable, so op bodies are cached per chain): ``("T",)``, ``("transpose",
axes)``, ``("swapaxes", i, j)``, ``("getitem", key)`` (basic keys: ints, slices as
``("s", start, stop, step)``, ``None``, ``Ellipsis``), ``("reshape", shape)`` (only where
NumPy's reshape is a view: decided on a strided stand-in, otherwise the namespace copies, as
NumPy does), ``("squeeze", axes)``, ``("broadcast", shape)`` (read-only, as NumPy's
``broadcast_to``).

A view's shape, and whether a reshape of it stays a view, are found on a *stand-in*: a
NumPy array made with ``as_strided`` over one element, with the base's shape and C strides,
the chain applied; no byte of it is ever read.
"""

from __future__ import annotations

import numpy as np

from cupool.program.tensor_methods import ArrayMethods

_STAND_INS: dict = {}
_APPLIERS: dict = {}
_LIMIT = 4096


def hashable_key(key) -> tuple:
    """A basic index ``key`` as a hashable tuple (slices as ``("s", start, stop, step)``),
    or ``None`` when it holds anything else (an array, a list, a bool...)."""
    items = key if isinstance(key, tuple) else (key,)
    out = []
    for item in items:
        if item is None or item is Ellipsis:
            out.append(item)
        elif isinstance(item, slice):
            parts = (item.start, item.stop, item.step)
            if not all(p is None or (isinstance(p, (int, np.integer))
                                     and not isinstance(p, bool)) for p in parts):
                return None
            out.append(("s", *(None if p is None else int(p) for p in parts)))
        elif isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)):
            out.append(int(item))
        else:
            return None
    return tuple(out)


def real_key(hkey: tuple) -> tuple:
    """The index :func:`hashable_key` made ``hkey`` from."""
    return tuple(slice(*item[1:]) if isinstance(item, tuple) else item for item in hkey)


def _step(array, step: tuple):
    kind = step[0]
    if kind == "T":
        return array.T
    if kind == "transpose":
        return array.transpose(step[1])
    if kind == "swapaxes":
        return array.swapaxes(step[1], step[2])
    if kind == "getitem":
        return array[real_key(step[1])]
    if kind == "reshape":
        return array.reshape(step[1])
    if kind == "squeeze":
        return array.squeeze(step[1])
    if kind == "broadcast":
        return _module(array).broadcast_to(array, step[1])
    raise ValueError(f"unknown view step {step!r}")


def _module(array):
    if isinstance(array, np.ndarray):
        return np
    import sys

    return sys.modules[type(array).__module__.split(".")[0]]


def applier(chain: tuple):
    """A function applying ``chain`` to an array (made once per chain)."""
    found = _APPLIERS.get(chain)
    if found is not None:
        return found
    if len(chain) == 1:
        step = chain[0]
        kind = step[0]
        if kind == "T":
            def apply(array):
                return array.T
        elif kind == "getitem":
            key = real_key(step[1])

            def apply(array):
                return array[key]
        elif kind == "reshape":
            shape = step[1]

            def apply(array):
                return array.reshape(shape)
        else:
            def apply(array):
                return _step(array, step)
    else:
        steps = [applier((step,)) for step in chain]

        def apply(array):
            for one in steps:
                array = one(array)
            return array
    if len(_APPLIERS) >= _LIMIT:
        _APPLIERS.clear()
    _APPLIERS[chain] = apply
    return apply


def stand_in(shape: tuple, dtype: np.dtype, chain: tuple) -> np.ndarray:
    """The strided stand-in of a base of ``shape`` and ``dtype`` seen through ``chain``
    (module docstring; never read). Raises what NumPy raises for a bad step."""
    key = (shape, dtype, chain)
    found = _STAND_INS.get(key)
    if found is not None:
        return found
    if chain:
        array = _step(stand_in(shape, dtype, chain[:-1]), chain[-1])
    else:
        strides, step = [], dtype.itemsize
        for n in reversed(shape):
            strides.append(step)
            step *= max(n, 1)
        array = np.lib.stride_tricks.as_strided(np.empty(1, dtype), shape,
                                                tuple(reversed(strides)), writeable=False)
    if len(_STAND_INS) >= _LIMIT:
        _STAND_INS.clear()
    _STAND_INS[key] = array
    return array


def reshape_is_view(shape: tuple, dtype: np.dtype, chain: tuple, new: tuple) -> bool:
    """Whether NumPy reshapes the view to ``new`` without copying."""
    array = stand_in(shape, dtype, chain)
    try:
        array.reshape(new, copy=False)
    except ValueError:
        return False
    except TypeError:  # NumPy < 2.1: no copy=; a C-contiguous view always reshapes
        return array.flags.c_contiguous
    return True


class View(ArrayMethods):
    """``base`` seen through ``chain`` (module docstring): ``shape`` and ``dtype`` as NumPy
    would give them; ``read_only`` when writes through it are refused (its base is read-only,
    or a step broadcasts)."""

    __slots__ = ("base", "chain", "dtype", "owner", "read_only", "shape")

    def __init__(self, base, chain: tuple, shape: tuple, read_only: bool) -> None:
        self.base, self.chain, self.shape, self.read_only = base, chain, shape, read_only
        self.dtype, self.owner = base.spec.dtype, base.owner  # a tensor's never change

    @property
    def name(self) -> str:
        return f"{self.base.name}{describe(self.chain)}"

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __repr__(self) -> str:
        return f"<cupool view {self.name!r} {self.shape} {self.dtype}>"


def describe(chain: tuple) -> str:
    """``chain`` as the Python that makes it (``.T[1:3]``)."""
    parts = []
    for step in chain:
        kind = step[0]
        if kind == "T":
            parts.append(".T")
        elif kind == "getitem":
            items = [f"{'' if i[1] is None else i[1]}:{'' if i[2] is None else i[2]}"
                     f"{'' if i[3] is None else ':' + str(i[3])}" if isinstance(i, tuple)
                     else "..." if i is Ellipsis else repr(i) for i in step[1]]
            parts.append(f"[{', '.join(items)}]")
        else:
            parts.append(f".{kind}{step[1:]}")
    return "".join(parts)


__all__ = ["View", "applier", "describe", "hashable_key", "real_key", "reshape_is_view",
           "stand_in"]
