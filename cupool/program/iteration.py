"""Declaring one iteration: ``with session.iteration() as it:`` and its ``it.op``,
``it.input`` and ``it.fetch``.

Nothing runs while the block declares: each call checks its arguments (the tensors must
be this session's, alive, of this iteration or persistent) and appends a
:class:`~cupool.program.program.DeclaredOp`; the block's end hands the collected
:class:`~cupool.program.program.Program` to the session, which runs it. A block that raises
runs nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import is_

from cupool.program.errors import ProgramError, SpecError, TensorScopeError
from cupool.program.program import FETCH, INPUT, OP, DeclaredOp, Program
from cupool.program.tensors import Fetch, Spec, Tensor, make_spec, to_host
from cupool.program.transfer import upload

try:  # declaring the recorded op again, compiled (built by pip; Python gives the same)
    from cupool.program._declare import MISSED as AGAIN_MISSED
    from cupool.program._declare import again, bind
except ImportError:  # pragma: no cover - no C compiler where it was installed
    again = AGAIN_MISSED = None
else:
    bind(Tensor)  # the class of the tensors it makes (by storing their slots, if it can)


class Iteration:
    """One iteration being declared (module docstring); ``number`` counts the session's
    iterations from 0."""

    __slots__ = ("_fetches", "_names", "_ops", "_recorded", "_recorded_program", "_specs",
                 "_state", "_valid", "_xp", "number", "session")

    def __init__(self, session, number: int) -> None:
        self.session = session
        self.number = number
        self._ops: list[DeclaredOp] = []
        self._specs: dict = {}
        self._names: dict = {}
        self._fetches: dict = {}  # key -> Fetch
        self._valid: dict = {}  # key -> the tensor found valid for it in this iteration
        self._state = "new"  # new -> open -> closed
        # _xp: unset (an AttributeError, which the tensors' operators rely on) until it.xp
        self._recorded_program = getattr(session, "recorded_program", None)
        self._recorded = self._recorded_program.ops if self._recorded_program is not None \
            else ()

    @property
    def xp(self):
        """This iteration's array namespace (:mod:`cupool.program.arrays`): NumPy-style
        functions and the tensors' operators, each call one op of this iteration."""
        try:
            return self._xp
        except AttributeError:  # the first it.xp makes it
            from cupool.program.arrays.namespace import ArrayNamespace

            xp = self._xp = ArrayNamespace(self)
            return xp

    # -- declaring --------------------------------------------------------------------
    def op(self, fn: Callable, *inputs: Tensor, out=None, outputs=None, updates=(),
           name: str | None = None, recompute: bool = True):
        """Declare ``fn(*inputs, *updates, *outputs)``. ``out`` is one output spec (a
        :class:`~cupool.program.tensors.Spec`, a ``(shape, dtype[, name])`` tuple or a
        tensor to copy the layout of) and the call returns its tensor; ``outputs`` a list
        of them (returns a tuple of tensors); neither: the op only updates (returns
        ``None``). ``updates`` are tensors the op modifies in place; ``recompute=False``
        marks an op that must never be re-run (not deterministic)."""
        if outputs is None and again is not None:  # the recorded op again, compiled
            made = again(self, fn, inputs, out, updates, name, recompute)
            if made is not AGAIN_MISSED:
                return made
        elif outputs is None:  # the recorded op again, checked by a compare
            index = len(self._ops)
            if index < len(self._recorded):
                recorded = self._recorded[index]
                raw = recorded.raw_out
                if recorded.fn is fn and (
                        (raw is out or raw == out) if raw is not None
                        else not recorded.outputs if out is None
                        else out.__class__ is Tensor and same_layout(out, recorded)):
                    made = self._again(recorded, name, inputs, tuple(updates), recompute)
                    if made is not _MISSED:
                        return made
        label = name or getattr(fn, "__name__", type(fn).__name__)
        if not callable(fn):
            raise SpecError(label, f"fn (={fn!r}) must be callable")
        if out is not None and outputs is not None:
            raise SpecError(label, "give out= (one output) or outputs= (a list), not both")
        specs = [] if out is None and outputs is None else (
            [out] if out is not None else list(outputs))
        if isinstance(outputs, (Spec, Tensor)):
            raise SpecError(label, "outputs= takes a list of specs; use out= for one")
        declared = self._declare(label, OP, fn, inputs, tuple(updates),
                                 [make_spec(label, s) for s in specs], recompute,
                                 out if out is not None and type(out) is tuple else None)
        if out is not None:
            return declared[0]
        return tuple(declared) if outputs is not None else None

    def input(self, data, name: str | None = None) -> Tensor:
        """Declare host data (a NumPy array, or a CuPy array on a GPU) as a tensor of this
        iteration: an op of its own uploads a copy of it (taken now). Where the recorded
        program has the same input op here, that op is declared again with this data
        (its uploader holds the data of the iteration being declared), so that a
        planned step makes its call once."""
        index = len(self._ops)
        label = name or f"input{index}"
        host = to_host(data)
        if index < len(self._recorded) and self._state == "open" and not self.session.closed:
            recorded = self._recorded[index]
            upload, spec = recorded.fn, recorded.outputs[0] if recorded.outputs else None
            if recorded.kind == INPUT and recorded.name == label and type(upload) is Upload \
                    and spec.shape == host.shape and spec.dtype == host.dtype:
                upload.host = host
                key, tensor_name = recorded.output_keys[0], recorded.output_names[0]
                self._specs[key], self._names[key] = spec, tensor_name
                self._ops.append(recorded)
                made = self._valid[key] = Tensor(self.session, key, spec, tensor_name,
                                                 self.number)
                return made
        spec = Spec(tuple(host.shape), host.dtype, label)
        return self._declare(label, INPUT, Upload(label, host), (), (), [spec], True)[0]

    def fetch(self, tensor: Tensor) -> Fetch:
        """Ask for ``tensor``'s value at the end of the iteration; the returned
        :class:`~cupool.program.tensors.Fetch` holds it once the block has ended."""
        self._check_open("fetch")
        self._check(tensor, f"fetch({getattr(tensor, 'name', tensor)!r})")
        fetch = self._fetches.get(tensor.key)
        if fetch is None:
            fetch = self._fetches[tensor.key] = Fetch(tensor)
            self._note(tensor)
        return fetch

    def _again(self, recorded: DeclaredOp, name, inputs, updates, recompute):
        """The output tensor of ``recorded`` (op ``recorded.index`` of the recorded program;
        ``None`` for an op without outputs) declared again with the same callable and
        output spec: the recorded op itself when its name, tensors and recompute flag are
        the same and every tensor is valid here; ``_MISSED`` otherwise (the general path
        then checks and builds the op)."""
        session = self.session
        if name:
            if name != recorded.name:
                return _MISSED
        else:  # named by its callable (the caller checked it is the recorded one)
            label = getattr(recorded.fn, "__name__", None)
            if (label or type(recorded.fn).__name__) != recorded.name:
                return _MISSED
        if recorded.kind != OP or recorded.recompute is not bool(recompute) or \
                len(inputs) != len(recorded.inputs) or \
                len(updates) != len(recorded.updates) or session._closed or \
                self._state != "open":
            return _MISSED
        valid = self._valid
        known = valid.get
        for tensor, key in zip(inputs, recorded.inputs, strict=True):
            if known(key) is not tensor and not self._valid_first(tensor, key):
                return _MISSED
        if updates:
            for tensor, key in zip(updates, recorded.updates, strict=True):
                if known(key) is not tensor and not self._valid_first(tensor, key):
                    return _MISSED
        self._ops.append(recorded)
        if not recorded.outputs:
            return None
        key = recorded.output_keys[0]
        spec = self._specs[key] = recorded.outputs[0]
        tensor_name = self._names[key] = recorded.output_names[0]
        made = valid[key] = Tensor(session, key, spec, tensor_name, self.number)
        return made

    def _valid_first(self, tensor, key) -> bool:
        """Whether ``tensor``, given for ``key`` and not yet checked in this iteration, is
        that tensor of this session, alive, and of this iteration or persistent (it is then
        noted as checked)."""
        if tensor.__class__ is not Tensor or tensor.key != key or tensor.owner is not \
                self.session or tensor.released or (not tensor.persistent
                                                    and tensor.iteration != self.number):
            return False
        self._valid[key] = tensor
        if tensor.persistent and key not in self._specs:
            self._specs[key], self._names[key] = tensor.spec, tensor.name
        return True

    def _declare(self, label, kind, fn, inputs, updates, specs, recompute,
                 raw_out=None) -> list[Tensor]:
        session, number = self.session, self.number
        if session.closed or self._state != "open":
            self._check_open(f"op {label!r}")
        index = len(self._ops)
        for tensor in (*inputs, *updates):
            if tensor.__class__ is not Tensor or tensor.owner is not session \
                    or tensor.released or (not tensor.persistent
                                           and tensor.iteration != number):
                self._check(tensor, f"op {index} {label!r}")  # raises, or a Tensor subclass
            if tensor.persistent:
                self._specs[tensor.key], self._names[tensor.key] = tensor.spec, tensor.name
        specs, recompute = tuple(specs), bool(recompute)
        input_keys = tuple([t.key for t in inputs])
        update_keys = tuple([t.key for t in updates])
        op = self._recorded[index] if index < len(self._recorded) else None
        if op is None or op.fn is not fn or op.name != label or op.kind != kind \
                or op.inputs != input_keys or op.updates != update_keys \
                or op.outputs != specs or op.recompute is not recompute:
            op = DeclaredOp(index, label, kind, fn, input_keys, update_keys, specs, recompute,
                            raw_out)
        # else: the recorded program's op, equal in every field: shared, not rebuilt
        tensors = []
        for k, key in enumerate(op.output_keys):
            spec = specs[k]
            tensor_name = spec.name or (label if len(specs) == 1 else f"{label}.{k}")
            self._specs[key], self._names[key] = spec, tensor_name
            tensors.append(Tensor(session, key, spec, tensor_name, number))
            self._valid[key] = tensors[-1]
        self._ops.append(op)
        return tensors

    def forget(self, key) -> None:
        """Tensor ``key`` is no longer valid (a persistent tensor released while the
        iteration is declared): its next use is checked in full."""
        self._valid.pop(key, None)

    def _note(self, tensor: Tensor) -> None:
        if tensor.persistent:
            self._specs[tensor.key], self._names[tensor.key] = tensor.spec, tensor.name

    def _check(self, tensor, operation: str) -> None:
        self.session.check_tensor(tensor, operation)
        if not tensor.persistent and (tensor.iteration != self.number
                                      or self._state != "open"):
            raise TensorScopeError(tensor.name, operation,
                                   f"is an output of iteration {tensor.iteration}, which "
                                   f"has ended")

    def _check_open(self, operation: str) -> None:
        self.session._check_open(operation)
        if self._state != "open":
            raise ProgramError(f"{operation}: declared outside its iteration's 'with' block")

    # -- the block --------------------------------------------------------------------
    def program(self) -> Program:
        """The declared ops, the fetch op last when anything is fetched. Where every op is
        the recorded program's own (declared again), so is the program's numbering of its
        tensors."""
        ops, recorded = list(self._ops), self._recorded
        if self._fetches:
            fetched = tuple(self._fetches)
            last = recorded[-1] if len(recorded) == len(ops) + 1 else None
            ops.append(last if last is not None and last.kind == FETCH and
                       last.inputs == fetched else
                       DeclaredOp(len(ops), "fetch", FETCH, _no_op, fetched, (), (), False))
        ops = tuple(ops)
        program = self._recorded_program
        if program is not None and len(ops) == len(recorded) and \
                len(self._specs) == len(program.specs) and all(map(is_, ops, recorded)):
            return Program(ops, dict(self._specs), dict(self._names), dict(program.buffer_ids))
        return Program(ops, dict(self._specs), dict(self._names))

    def deliver(self, fetched: dict) -> None:
        """Hand the fetched values (key → host array) to their :class:`Fetch` objects."""
        for key, fetch in self._fetches.items():
            fetch._set(fetched[key])

    def __enter__(self) -> Iteration:
        if self._state != "new":
            raise ProgramError(f"iteration {self.number}: entered twice")
        self._state = "open"
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._state = "closed"
        if exc_type is not None or not self._ops:
            self.session._close_iteration(self, None)
            if exc_type is None:
                raise ProgramError(f"iteration {self.number} declared no ops")
            return
        self.session._close_iteration(self, self.program())


_MISSED = object()  # what Iteration._again returns where the recorded op does not match


def same_layout(out: Tensor, recorded: DeclaredOp) -> bool:
    """Whether ``out=`` given as a tensor (its layout copied) makes the recorded op's one
    output spec: the same shape and dtype, and no name of its own."""
    if len(recorded.outputs) != 1:
        return False
    made, spec = recorded.outputs[0], out.spec
    return made.name == "" and spec.shape == made.shape and spec.dtype == made.dtype


class Upload:
    """The callable of an input op: ``upload(out)`` copies ``host`` (the input's data in
    the iteration being declared or run) into the op's output ``out``."""

    __slots__ = ("__name__", "host")

    def __init__(self, name: str, host) -> None:
        self.__name__, self.host = name, host

    def __call__(self, out) -> None:
        upload(out, self.host)


def _no_op(*arrays) -> None:
    """The fetch op's callable (the runners copy the fetched tensors themselves)."""


__all__ = ["Iteration"]
