"""One iteration of a user's program as the session collects it: declared ops over tensors,
and the trace the planners read from it.

An iteration's ops are *declared* (callable, input tensors, tensors it updates in place,
output specs) and collected into a :class:`Program` before any of them runs; the session
then runs the program (passively while recording, from the plan afterwards). Collecting
first is what lets the session check a program before touching the device: a budget
below one op's working set, a program that differs from the recorded one.

The trace of a program (:meth:`Program.to_trace`) has one buffer per tensor the program
touches, sizes rounded up to the pool's 512-byte unit (so a plan's offsets are the pool's
and its arena is what the device holds)::

    persistent tensor   kind persistent, lifetime [0, n), uses: the ops that read or update it
    output k of op i    kind temporary, lifetime [i, last use + 1), uses: i and its readers
    fetched tensors     used by a last op, ``fetch``, that copies them to the host

and a recompute recipe ``(op i, its inputs)`` for an output that can be produced again by
re-running its op: the op is declared ``recompute=True`` (the default: deterministic),
has exactly that one output, updates nothing in place, and neither the output nor any
input is updated in place by a later op of its lifetime (re-running it then would give
other bytes). Buffers without a recipe are only ever swapped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from operator import is_

from cupool.allocator.arena import ALLOCATION_UNIT
from cupool.core.vocabulary import PERSISTENT, TEMPORARY, Buffer, Op, Recompute, Trace
from cupool.program.errors import BudgetTooSmallError
from cupool.program.tensors import Spec

OP = "op"
INPUT = "input"
FETCH = "fetch"
KINDS = (OP, INPUT, FETCH)


def rounded(nbytes: int) -> int:
    """``nbytes`` rounded up to the pool's allocation unit (at least one unit)."""
    return -(-max(1, nbytes) // ALLOCATION_UNIT) * ALLOCATION_UNIT


def whole_units(budget_bytes: int) -> int:
    """``budget_bytes`` rounded down to the pool's allocation unit (left as it is below one
    unit): every tensor takes whole units, so the bytes above the last whole unit hold
    nothing, and the pool, which reserves whole units, then never holds more than the
    budget (a plan whose arena is the whole budget is reserved as it is)."""
    return budget_bytes - budget_bytes % ALLOCATION_UNIT if budget_bytes >= ALLOCATION_UNIT \
        else budget_bytes


@dataclass(frozen=True)
class DeclaredOp:
    """Op ``index`` as declared: ``fn(*inputs, *updates, *outputs)`` writes its outputs
    (and may modify its updates in place). ``kind`` is ``"op"`` (a user's callable),
    ``"input"`` (host data uploaded into its one output) or ``"fetch"`` (the last op:
    copies the fetched tensors to the host). Tensors are given by key
    (:mod:`cupool.program.tensors`)."""

    index: int
    name: str
    kind: str
    fn: Callable
    inputs: tuple
    updates: tuple
    outputs: tuple[Spec, ...]
    recompute: bool = True
    raw_out: object = field(default=None, compare=False, repr=False)

    output_keys: tuple = field(init=False, compare=False, repr=False)
    output_names: tuple = field(init=False, compare=False, repr=False)
    touched: tuple = field(init=False, compare=False, repr=False)
    signature: tuple = field(init=False, compare=False, repr=False)
    writable: frozenset = field(init=False, compare=False, repr=False)
    written_keys: tuple = field(init=False, compare=False, repr=False)
    read_only: tuple = field(init=False, compare=False, repr=False)
    fast: tuple = field(init=False, compare=False, repr=False)
    """``raw_out``: the ``out=`` tuple it was declared with (a later iteration declaring an
    equal one is compared with it instead of parsed again). Derived once, at construction:
    ``output_keys``, the keys of its outputs; ``output_names``, their tensors' names;
    ``touched``, every tensor key the op reads or writes, each once, in declaration order;
    ``signature``, what must match between iterations of the same program;
    ``writable``, the keys it may write (updates and outputs); ``written_keys``, those
    in argument order (``updates`` then ``output_keys``); ``read_only``, per input,
    whether the op must not write it (not also among ``writable``); ``fast``, what
    declaring the op again compares and makes, in one tuple (``fn``, ``raw_out``,
    ``name``, ``kind``, ``recompute``, ``inputs``, ``updates``, ``outputs``, and the key,
    spec and tensor name of its first output, ``None`` where it has none)."""

    def __post_init__(self) -> None:
        outputs = tuple(("t", self.index, k) for k in range(len(self.outputs)))
        object.__setattr__(self, "output_keys", outputs)
        object.__setattr__(self, "output_names", tuple(
            spec.name or (self.name if len(self.outputs) == 1 else f"{self.name}.{k}")
            for k, spec in enumerate(self.outputs)))
        written = (*self.updates, *outputs)
        writable = frozenset(written)
        object.__setattr__(self, "writable", writable)
        object.__setattr__(self, "written_keys", written)
        object.__setattr__(self, "read_only", tuple(k not in writable for k in self.inputs))
        object.__setattr__(self, "touched",
                           tuple(dict.fromkeys((*self.inputs, *self.updates, *outputs))))
        first = (outputs[0], self.outputs[0], self.output_names[0]) if outputs else \
            (None, None, None)
        object.__setattr__(self, "fast", (self.fn, self.raw_out, self.name, self.kind,
                                          self.recompute, self.inputs, self.updates,
                                          self.outputs, *first))
        object.__setattr__(self, "signature", (
            self.name, self.kind, self.inputs, self.updates,
            tuple((s.shape, s.dtype) for s in self.outputs), self.recompute))


@dataclass(frozen=True)
class Change:
    """Where a program first differs from the recorded one: op ``op_index`` (``op``), the
    ``tensor`` involved (``None`` when the difference is not about one tensor), how."""

    op_index: int
    op: str
    tensor: str | None
    detail: str


@dataclass(frozen=True)
class Program:
    """The ops of one iteration (the fetch op last, when anything is fetched), the specs of
    every tensor they touch (``specs``: key → :class:`Spec`) and their names.
    ``buffer_ids`` (key → trace buffer id) is derived (persistent tensors first, each group
    in key order) unless given: a program made from a recorded trace
    (:mod:`cupool.program.synthetic`) keeps that trace's own ids."""

    ops: tuple[DeclaredOp, ...]
    specs: dict
    names: dict
    buffer_ids: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.buffer_ids:
            return
        persistent = sorted(k for k in self.specs if k[0] == "p")
        temporary = sorted(k for k in self.specs if k[0] == "t")
        self.buffer_ids.update({k: i for i, k in enumerate([*persistent, *temporary])})

    @property
    def num_ops(self) -> int:
        return len(self.ops)

    @property
    def persistent_keys(self) -> tuple:
        return tuple(k for k in self.buffer_ids if k[0] == "p")

    def key_of(self, buffer_id: int) -> tuple:
        return self._keys[buffer_id]

    @property
    def _keys(self) -> dict:
        cache = self.__dict__.get("_keys_cache")
        if cache is None:
            cache = {b: k for k, b in self.buffer_ids.items()}
            object.__setattr__(self, "_keys_cache", cache)
        return cache

    def size(self, key: tuple) -> int:
        """The tensor's buffer size: its bytes rounded up to the pool's unit."""
        return rounded(self.specs[key].nbytes)

    def working_set(self, op: DeclaredOp) -> int:
        """Bytes op ``op`` needs resident at once."""
        return sum(self.size(k) for k in op.touched)

    def check_budget(self, budget_bytes: int) -> None:
        """:class:`BudgetTooSmallError` for the first op whose working set exceeds
        ``budget_bytes``."""
        for op in self.ops:
            needed = self.working_set(op)
            if needed > budget_bytes:
                raise BudgetTooSmallError(op.name, op.index, needed, budget_bytes)

    def peak_bytes(self) -> int:
        """The program's peak live bytes (what it needs resident with no swapping)."""
        return self.to_trace().lower_bound_bytes()

    # -- the trace ----------------------------------------------------------------------
    def uses(self) -> dict:
        """``{key: sorted op indices that touch it}``."""
        uses = {k: set() for k in self.specs}
        for op in self.ops:
            for k in op.touched:
                uses[k].add(op.index)
        return {k: tuple(sorted(v)) for k, v in uses.items()}

    def recomputable(self, uses: dict) -> dict:
        """``{output key: Recompute}`` for the outputs that may be recomputed (module
        docstring); recipe inputs are the producer's inputs in declaration order."""
        updated_at = {}
        for op in self.ops:
            for k in op.updates:
                updated_at.setdefault(k, []).append(op.index)
        recipes = {}
        for op in self.ops:
            if op.kind == FETCH or not op.recompute or op.updates or len(op.outputs) != 1:
                continue
            out = op.output_keys[0]
            end = uses[out][-1] + 1
            watched = (out, *op.inputs)
            if any(op.index < j < end for k in watched for j in updated_at.get(k, ())):
                continue
            inputs = tuple(self.buffer_ids[k] for k in dict.fromkeys(op.inputs))
            recipes[out] = Recompute(op.index, inputs)
        return recipes

    def to_trace(self, durations_us=None, name: str = "program") -> Trace:
        """The program as a :class:`~cupool.core.vocabulary.Trace` (module docstring), op
        durations from ``durations_us`` (µs per op; ``None``: unknown)."""
        n = self.num_ops
        uses = self.uses()
        recipes = self.recomputable(uses)
        buffers = []
        for key, b in self.buffer_ids.items():
            used = uses[key]
            if key[0] == "p":
                buffers.append(Buffer(b, self.size(key), 0, n, used, PERSISTENT,
                                      self.names[key]))
                continue
            start = key[1]
            buffers.append(Buffer(b, self.size(key), start, max(used[-1], start) + 1, used,
                                  TEMPORARY, self.names[key], recipes.get(key)))
        ops = tuple(Op(op.name, None if durations_us is None else float(durations_us[i]),
                       phase=op.kind) for i, op in enumerate(self.ops))
        return Trace(name, ops, tuple(buffers), source="cupool.program")

    # -- comparing iterations --------------------------------------------------------------
    def first_change(self, other: Program) -> Change | None:
        """Where ``other`` (a later iteration) first differs from this program, or
        ``None`` when it is the same program (same ops, tensors, shapes and dtypes). Ops
        declared again are this program's own objects: only the persistent tensors' specs
        are compared then."""
        same_ops = len(self.ops) == len(other.ops) and all(map(is_, self.ops, other.ops))
        for mine, theirs in zip(() if same_ops else self.ops, other.ops, strict=False):
            if mine.signature == theirs.signature:
                continue
            return _op_change(self, mine, other, theirs)
        if len(self.ops) != len(other.ops):
            i = min(len(self.ops), len(other.ops))
            longer = other if len(other.ops) > len(self.ops) else self
            return Change(i, longer.ops[i].name, None,
                          f"the program has {len(other.ops)} ops, the recorded one "
                          f"{len(self.ops)}")
        keys = self._persistent_specs if same_ops else other.specs  # (the same keys then)
        for key in keys:
            if key[0] != "p":
                continue
            spec, mine = other.specs[key], self.specs[key]
            if (spec.shape, spec.dtype) != (mine.shape, mine.dtype):
                return Change(0, other.ops[0].name, other.names[key],
                              "a persistent tensor changed its shape or dtype")
        return None

    @property
    def _persistent_specs(self) -> tuple:
        """The keys of the persistent tensors in ``specs`` (found once)."""
        cache = self.__dict__.get("_persistent_cache")
        if cache is None:
            cache = tuple(k for k in self.specs if k[0] == "p")
            object.__setattr__(self, "_persistent_cache", cache)
        return cache


def _op_change(recorded: Program, mine: DeclaredOp, new: Program, theirs: DeclaredOp) -> Change:
    i = theirs.index
    if (mine.name, mine.kind) != (theirs.name, theirs.kind):
        return Change(i, theirs.name, None, f"the recorded program runs op {mine.name!r} "
                                            f"({mine.kind}) here")
    for what in ("inputs", "updates"):
        old, now = getattr(mine, what), getattr(theirs, what)
        if old != now:
            diff = next((k for k in now if k not in old), None) or next(
                (k for k in old if k not in now), None)
            names = new.names if diff in new.names else recorded.names
            label = names.get(diff) if diff is not None else None
            return Change(i, theirs.name, label, f"its {what} differ from the recorded "
                                                 f"program's")
    for k, (old, now) in enumerate(zip(mine.outputs, theirs.outputs, strict=False)):
        if (old.shape, old.dtype) != (now.shape, now.dtype):
            return Change(i, theirs.name, new.names[("t", i, k)],
                          f"output {k} is {now.shape} {now.dtype}, recorded as "
                          f"{old.shape} {old.dtype}")
    if len(mine.outputs) != len(theirs.outputs):
        return Change(i, theirs.name, None, f"it has {len(theirs.outputs)} outputs, recorded "
                                            f"with {len(mine.outputs)}")
    return Change(i, theirs.name, None, "its recompute flag differs from the recorded one")


__all__ = ["FETCH", "INPUT", "KINDS", "OP", "Change", "DeclaredOp", "Program", "rounded",
           "whole_units"]
