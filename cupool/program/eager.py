"""The session's API with no memory management: every op runs as it is declared, on plain
arrays of the array library.

:class:`EagerSession` takes the same program (``register``, ``iteration``, ``it.op``,
``it.input``, ``it.fetch``, ``read``) and runs it the way the program would run without
cupool: outputs are ``xp.empty`` arrays, each op's callable is called at once, nothing is
swapped or recomputed. It is the reference the tests and the benchmarks compare a session
with (parameters bitwise identical after N steps, iteration times), and a way to debug an
op body with ordinary arrays.
"""

from __future__ import annotations

import numpy as np

from cupool.program.errors import ProgramError, SpecError
from cupool.program.tensors import Fetch, Spec, Tensor, make_spec, to_host


class _EagerTensor(Tensor):
    __slots__ = ("array",)


class EagerSession:
    """Runs programs written for :class:`~cupool.program.session.Session` eagerly on
    ``xp`` (``numpy`` by default; ``cupy`` for a GPU)."""

    def __init__(self, xp=None) -> None:
        self.xp = xp or np
        self._count = 0
        self._open_iteration = None  # the iteration being declared (its array namespace)
        self.closed = False

    def register(self, name: str, value) -> Tensor:
        array = self.xp.array(to_host(value) if self.xp is np else value, copy=True)
        tensor = _EagerTensor(self, ("p", name), Spec(tuple(array.shape), array.dtype, name),
                              name, None)
        tensor.array = array
        return tensor

    def read(self, tensor: Tensor) -> np.ndarray:
        return to_host(tensor.array)

    def release(self, tensor: Tensor) -> None:
        tensor.released = True
        tensor.array = None

    def iteration(self) -> _EagerIteration:
        self._count += 1
        return _EagerIteration(self, self._count - 1)

    def close(self) -> None:
        """Nothing to return (the arrays are the library's)."""
        self.closed = True

    def __enter__(self) -> EagerSession:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class _EagerIteration:
    def __init__(self, session: EagerSession, number: int) -> None:
        self.session, self.number = session, number
        self._fetches: list[Fetch] = []
        self._ops = 0

    def op(self, fn, *inputs, out=None, outputs=None, updates=(), name=None, recompute=True):
        label = name or getattr(fn, "__name__", type(fn).__name__)
        if out is not None and outputs is not None:
            raise SpecError(label, "give out= (one output) or outputs= (a list), not both")
        specs = [] if out is None and outputs is None else (
            [out] if out is not None else list(outputs))
        made = []
        for k, value in enumerate(specs):
            spec = make_spec(label, value)
            tensor = _EagerTensor(self.session, ("t", self._ops, k), spec, label, self.number)
            tensor.array = self.session.xp.empty(spec.shape, spec.dtype)
            made.append(tensor)
        for tensor in (*inputs, *updates):
            if tensor.released:
                raise ProgramError(f"op {label!r}: tensor {tensor.name!r} was released")
        fn(*(t.array for t in inputs), *(t.array for t in updates), *(t.array for t in made))
        self._ops += 1
        if out is not None:
            return made[0]
        return tuple(made) if outputs is not None else None

    def input(self, data, name=None) -> Tensor:
        label = name or f"input{self._ops}"
        array = self.session.xp.array(to_host(data) if self.session.xp is np else data,
                                      copy=True)
        tensor = _EagerTensor(self.session, ("t", self._ops, 0),
                              Spec(tuple(array.shape), array.dtype, label), label, self.number)
        tensor.array = array
        self._ops += 1
        return tensor

    def fetch(self, tensor: Tensor) -> Fetch:
        fetch = Fetch(tensor)
        self._fetches.append(fetch)
        return fetch

    @property
    def xp(self):
        """The array namespace (:mod:`cupool.program.arrays`), its ops run at once."""
        xp = self.__dict__.get("_xp")
        if xp is None:
            from cupool.program.arrays.namespace import ArrayNamespace

            xp = self._xp = ArrayNamespace(self)
        return xp

    def __enter__(self) -> _EagerIteration:
        self.session._open_iteration = self
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.session._open_iteration = None
        if exc_type is None:
            for fetch in self._fetches:  # values as at the end of the iteration
                fetch._set(to_host(fetch.tensor.array))


__all__ = ["EagerSession"]
