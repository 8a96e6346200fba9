"""Record one iteration of a PyTorch workload as a cupool trace, without real memory.

How it works: the workload runs under ``FakeTensorMode`` (tensors have shapes, dtypes and
storages but no data) with a :class:`StorageRecorder` (a ``TorchDispatchMode``) on top of
it. For every aten op the recorder sees:

- the op becomes one entry of the trace's ``ops`` (view and metadata ops, which neither
  allocate nor touch device data, are dropped: see ``_is_view_op``);
- every untyped storage among the op's tensor inputs and outputs gets a *use* at that op,
  and a *write* when it is an output or an argument the op's schema marks as written
  (in-place and ``out=`` ops: an optimizer's update writes the persistent state; weights
  of an inference step are never written, so they are read-only);
  a storage seen for the first time as an output is *allocated* at that op (its ``start``;
  size = ``untyped_storage().nbytes()``);
- a ``weakref.finalize`` on the storage fires when PyTorch really frees it (storage
  Python objects are preserved while the C++ storage lives), and the buffer's ``end`` is
  the number of ops recorded by then (freed right after the last recorded op, half-open);
- ``flops`` come from :data:`torch.utils.flop_counter.flop_registry` (the formulas
  ``FlopCounterMode`` uses; CPU attention kernels count as their CUDA counterparts), the
  duration from :class:`~cupool.capture.roofline.RooflineModel`.

Storages named in ``persistent`` (parameters, buffers, optimizer state and the step's
inputs, which exist before the step) become ``"persistent"`` buffers spanning
``[0, len(ops))``. Storages still alive when the step ends are freed at ``len(ops)``. The
cyclic garbage collector is paused while recording so that free points depend on reference
counts only (the capture is deterministic).

The same recorder works on real tensors (leave ``fake`` off), which is how the tests check
the capture against torch's own accounting.
"""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from cupool.capture.options import CaptureOptions
from cupool.capture.roofline import RooflineModel
from cupool.core.collector import collector_paused
from cupool.core.vocabulary import PERSISTENT, TEMPORARY, Buffer, Op, Trace
from cupool.errors import InputError

_ZERO_TRAFFIC = frozenset({"empty", "empty_like", "empty_strided", "new_empty",
                           "new_empty_strided", "_local_scalar_dense", "lift_fresh",
                           "resize_", "set_"})
"""Ops that allocate or inspect without reading or writing tensor data."""
_aten = torch.ops.aten
_FLOP_ALIASES = {
    # CPU kernels standing in for the CUDA ones, counted with the CUDA ones' formulas
    _aten._scaled_dot_product_flash_attention_for_cpu:
        _aten._scaled_dot_product_flash_attention,
    _aten._scaled_dot_product_flash_attention_for_cpu_backward:
        _aten._scaled_dot_product_flash_attention_backward,
}
"""Ops whose FLOPs ``torch.utils.flop_counter`` has no formula for, and the op whose
formula they share (same arguments up front: query, key, value; grad_out first in backward)."""
_CONV_OPS = frozenset({"convolution", "convolution_backward", "_convolution",
                       "conv2d", "conv1d", "conv3d"})


@dataclass
class _StorageRecord:
    """What the recorder knows about one storage while recording (mutable, internal)."""

    number: int
    size: int
    start: int
    name: str
    kind: str = TEMPORARY
    end: int | None = None
    uses: list[int] = field(default_factory=list)
    writes: list[int] = field(default_factory=list)
    finalizer: weakref.finalize | None = None


def _written(record: _StorageRecord, index: int) -> None:
    if not record.writes or record.writes[-1] != index:
        record.writes.append(index)


def _mutated(func, args, kwargs) -> list[torch.Tensor]:
    """The tensor arguments the op's schema marks as written (``Tensor(a!)``: in-place ops
    such as an optimizer's ``add_``, ``out=`` variants)."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return []
    out = []
    for position, argument in enumerate(schema.arguments):
        info = argument.alias_info
        if info is None or not info.is_write:
            continue
        value = args[position] if position < len(args) else kwargs.get(argument.name)
        out.extend(_tensors(value))
    return out


def _tensors(tree) -> list[torch.Tensor]:
    leaves, _ = tree_flatten(tree)
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def _is_view_op(func) -> bool:
    """Ops left out of the trace: views, metadata queries (``prim.device``), profiler marks and
    ``_local_scalar_dense`` (``.item()`` on a host-side scalar such as AdamW's step count)."""
    if func.namespace in ("prim", "profiler") or bool(getattr(func, "is_view", False)):
        return True
    return func.__name__.split(".")[0] in ("detach", "_unsafe_view", "alias", "lift_fresh",
                                           "_local_scalar_dense")


class StorageRecorder(TorchDispatchMode):
    """A dispatch mode recording ops, storages, uses and free points (see the module doc).

    Use :func:`record` rather than this class directly; it sets up persistent storages,
    pauses the garbage collector and builds the :class:`Trace`.
    """

    def __init__(self, cost_model: RooflineModel, lifted_from_start: bool = False) -> None:
        super().__init__()
        self.cost_model = cost_model
        self.lifted_from_start = lifted_from_start
        self.phase = "fw"
        self.ops: list[Op] = []
        self.records: list[_StorageRecord] = []
        self._live: dict[int, _StorageRecord] = {}
        self._active = False

    # -- storages ----------------------------------------------------------------------
    def _key(self, storage: torch.UntypedStorage) -> int:
        return storage._cdata

    def _on_free(self, key: int, record: _StorageRecord) -> None:
        # Called by weakref.finalize from inside PyTorch's deallocation: never raise here.
        if record.end is None:
            record.end = len(self.ops)
        if self._live.get(key) is record:
            del self._live[key]

    def track(self, tensor: torch.Tensor, name: str, kind: str, start: int) -> _StorageRecord:
        """The record of ``tensor``'s storage, creating it (with ``name``, ``kind``,
        ``start``) on first sight."""
        storage = tensor.untyped_storage()
        key = self._key(storage)
        record = self._live.get(key)
        if record is None:
            record = _StorageRecord(len(self.records), storage.nbytes(), start, name, kind)
            record.finalizer = weakref.finalize(storage, self._on_free, key, record)
            self.records.append(record)
            self._live[key] = record
        else:
            record.size = max(record.size, storage.nbytes())
        return record

    def release(self) -> None:
        """Stop listening for frees; storages still alive end at ``len(ops)``."""
        for record in self.records:
            if record.finalizer is not None:
                record.finalizer.detach()
                record.finalizer = None
            if record.end is None:
                record.end = len(self.ops)
        self._live.clear()

    # -- ops ---------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if _is_view_op(func):
            if func.__name__.startswith("lift_fresh") and not self.lifted_from_start:
                # A tensor made from Python data inside the step (``torch.tensor(1.0)``,
                # as AdamW does for its step increment) is born here, before the next op.
                for tensor in _tensors(out):
                    self.track(tensor, "lifted", TEMPORARY, len(self.ops))
            return out
        index = len(self.ops)
        name = str(func)
        inputs = _tensors((args, kwargs))
        outputs = _tensors(out)
        mutated = {id(t) for t in _mutated(func, args, kwargs)}
        for tensor in inputs:
            # A storage first seen as an input existed before recording (and is not
            # persistent): it is live from op 0.
            record = self.track(tensor, f"external:{name}:in", TEMPORARY, 0)
            if not record.uses or record.uses[-1] != index:
                record.uses.append(index)
            if id(tensor) in mutated:
                _written(record, index)
        for position, tensor in enumerate(outputs):
            record = self.track(tensor, f"{name}:out{position}", TEMPORARY, index)
            if not record.uses or record.uses[-1] != index:
                record.uses.append(index)
            _written(record, index)
        self.ops.append(self._op(func, name, args, kwargs, out, inputs, outputs))
        return out

    def _op(self, func, name, args, kwargs, out, inputs, outputs) -> Op:
        flops = 0
        packet = func._overloadpacket
        counter = flop_registry.get(_FLOP_ALIASES.get(packet, packet))
        if counter is not None:
            flops = int(counter(*args, **kwargs, out_val=out))
        short = func.__name__.split(".")[0]
        if short in _ZERO_TRAFFIC:
            bytes_moved = 0
        else:
            read = {(t.untyped_storage()._cdata, t.storage_offset(), tuple(t.shape),
                     t.stride()): t.nbytes for t in inputs}
            bytes_moved = sum(read.values()) + sum(t.nbytes for t in outputs)
        dtype = next((t.dtype for t in (*inputs, *outputs) if t.is_floating_point()),
                     torch.float32)
        duration = self.cost_model.duration_us(flops, bytes_moved, str(dtype),
                                               conv=short in _CONV_OPS)
        return Op(name, round(duration, 3), flops, self.phase)


class Marker:
    """What a recorded step gets to annotate the trace: ``mark(phase)`` labels the following
    ops (``"fw"``, ``"bw"``, ``"opt"``...); ``mark.label(tensor, name)`` renames the buffer
    of ``tensor``'s storage (e.g. ``grad:<parameter>``)."""

    def __init__(self, recorder: StorageRecorder) -> None:
        self._recorder = recorder

    def __call__(self, phase: str) -> None:
        self._recorder.phase = phase

    def label(self, tensor: torch.Tensor, name: str) -> None:
        record = self._recorder._live.get(self._recorder._key(tensor.untyped_storage()))
        if record is not None and record.kind != PERSISTENT:
            record.name = name


def record(step: Callable[[Marker], None],
           persistent: Mapping[str, torch.Tensor], *, name: str, source: str = "",
           cost_model: RooflineModel | None = None, lifted_from_start: bool = False) -> Trace:
    """Run ``step(mark)`` once under a :class:`StorageRecorder` and return its trace.

    ``step`` receives a :class:`Marker` and calls ``mark(phase)`` to label the following
    ops. ``persistent`` names the tensors that live across iterations (parameters, buffers,
    optimizer state, inputs staged before the step; several names may share one storage,
    the first one names the buffer). Run inside ``FakeTensorMode`` for a capture without
    memory, or outside it on real tensors. Buffers of zero bytes are left out.

    A storage first seen as an op's input is taken to exist from op 0, except (under
    ``FakeTensorMode``) one made from Python data inside the step, which is born where it is
    made; ``lifted_from_start=True`` takes those from op 0 as well, as the capture that made
    the bundled traces did (AdamW's 4-byte step increment then counts in the whole step's
    lower bound: +4 bytes, see ``bench/capture.py --bundled``).
    """
    cost_model = cost_model or RooflineModel()
    recorder = StorageRecorder(cost_model, lifted_from_start)
    for tensor_name, tensor in persistent.items():
        recorder.track(tensor, tensor_name, PERSISTENT, 0)
    with collector_paused():
        try:
            with recorder:
                step(Marker(recorder))
                gc.collect()
        finally:
            recorder.release()
    return _trace(recorder, name, source, cost_model)


def _trace(recorder: StorageRecorder, name: str, source: str,
           cost_model: RooflineModel) -> Trace:
    """The trace of a finished recording. A temporary buffer's allocation counts as a use
    (so a storage that existed before the step, first seen as an input, is used at op 0);
    a buffer never touched gets its start as its one use."""
    num_ops = len(recorder.ops)
    if num_ops == 0:
        raise InputError(f"the step of {name!r} ran no aten op: nothing to record")
    buffers = []
    for record in recorder.records:
        if record.size == 0:
            continue
        uses = record.uses
        if record.kind == PERSISTENT:
            start, end = 0, num_ops
        else:
            start = record.start
            if start >= num_ops:  # allocated after the last recorded op: never used
                continue
            if not uses or uses[0] != start:
                uses = [start, *uses]
            end = max(record.end if record.end is not None else num_ops, uses[-1] + 1)
        uses = tuple(uses or (start,))
        writes = tuple(w for w in record.writes if w in set(uses))
        buffers.append(Buffer(len(buffers), record.size, start, end, uses, record.kind,
                              record.name, writes=writes))
    return Trace(name, tuple(recorder.ops), tuple(buffers), source,
                 cost_model.preset.device())


@contextlib.contextmanager
def fake_mode():
    """A fresh ``FakeTensorMode`` (tensors without data); everything built inside it and
    every op run inside it allocates no memory."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        yield mode


class Workload:
    """One model ready to step: the module, its inputs, its optimizer (training only).

    ``options`` give the mode, batch, size, ``amp``, optimizer and ``module_tracker``
    (its other fields are the recorder's). Building it runs the unrecorded warm-up training
    step (so the optimizer's state exists). :meth:`run` is the recorded step: forward (and
    the loss) under bfloat16 autocast when ``amp``, ``loss.backward()``,
    ``optimizer.step()``, ``optimizer.zero_grad()`` (``mode="train"``), or one forward pass
    under ``torch.no_grad()`` in ``eval()`` mode (``mode="infer"``). The inputs are staged
    before the step and persist across it, like a batch already on the device; the loss is
    held until the step ends.

    ``module_tracker`` runs the step under ``torch.utils.module_tracker.ModuleTracker`` (the
    module-boundary tracking of ``FlopCounterMode``; ``MemTracker``'s ``ModTracker`` works
    the same way). Its backward hooks hold the gradients of a module's inputs until all of
    them are computed, so they live a little longer than in a bare step: the bundled traces
    were captured with it, and it is on by default so that a re-capture reproduces them.
    """

    def __init__(self, model: str, options: CaptureOptions) -> None:
        from cupool.capture.models import OPTIMIZERS, model_spec

        self.spec = model_spec(model)
        mode, batch, small = options.mode, options.batch, options.small
        optimizer = options.optimizer or self.spec.optimizer
        self.mode, self.batch, self.small, self.amp = mode, batch, small, options.amp
        self.optimizer_name = optimizer
        self.module_tracker = options.module_tracker
        self.net = self.spec.build(small)
        self.inputs = self.spec.inputs(batch, small, mode == "train")
        self.optimizer = None
        if mode == "train":
            self.net.train()
            self.optimizer = OPTIMIZERS[optimizer](self.net.parameters())
            self._train(None)
        else:
            self.net.eval()

    def persistent(self) -> dict[str, torch.Tensor]:
        """Tensors living across the step, by name: ``param:``, ``buffer:``, ``input:``,
        ``opt_state:<parameter>.<key>``."""
        tensors: dict[str, torch.Tensor] = {}
        for name, tensor in self.net.named_parameters():
            tensors[f"param:{name}"] = tensor
        for name, tensor in self.net.named_buffers():
            tensors[f"buffer:{name}"] = tensor
        for name, tensor in self.inputs.items():
            tensors[f"input:{name}"] = tensor
        if self.optimizer is not None:
            names = {id(p): n for n, p in self.net.named_parameters()}
            for param, state in self.optimizer.state.items():
                for key, value in state.items():
                    if isinstance(value, torch.Tensor):
                        tensors[f"opt_state:{names.get(id(param), '?')}.{key}"] = value
        return tensors

    def run(self, mark: Marker | None = None) -> None:
        """One step (see the class doc); ``mark`` labels phases and gradients."""
        tracker = contextlib.nullcontext()
        if self.module_tracker:
            from torch.utils.module_tracker import ModuleTracker

            tracker = ModuleTracker()
        with tracker:
            if self.mode == "train":
                self._train(mark)
            else:
                if mark is not None:
                    mark("fw")
                with torch.no_grad(), _autocast(self.amp):
                    output = self.spec.infer(self.net, self.inputs)
                del output

    def _train(self, mark: Marker | None) -> None:
        if mark is not None:
            mark("fw")
        with _autocast(self.amp):
            loss = self.spec.loss(self.net, self.inputs)
        if mark is not None:
            mark("bw")
        loss.backward()
        if mark is not None:
            mark("opt")
        self.optimizer.step()
        if mark is not None:
            for name, param in self.net.named_parameters():
                if param.grad is not None:
                    mark.label(param.grad, f"grad:{name}")
        self.optimizer.zero_grad(set_to_none=True)
        del loss


def capture_model(model: str, options: CaptureOptions | None = None) -> Trace:
    """Capture one iteration of a model from :data:`cupool.capture.models.MODELS`, as
    ``options`` (default :class:`CaptureOptions` ``()``: one full-size training step at
    batch 1 under ``FakeTensorMode``) say.

    ``mode="train"``: one warm-up step (unrecorded, so the optimizer's state exists), then
    the recorded step: forward and loss (phase ``"fw"``), backward (``"bw"``), the
    optimizer's step and ``zero_grad()`` (``"opt"``). ``mode="infer"``: one forward pass
    (``"fw"``). Persistent buffers: parameters, module buffers, the inputs and the optimizer
    state. An unknown model raises :class:`~cupool.errors.InputError` listing the known ones.
    """
    if options is None:
        options = CaptureOptions()
    mode, batch, small, amp = options.mode, options.batch, options.small, options.amp
    cost_model = options.cost_model or RooflineModel()
    torch.manual_seed(options.seed)
    context = fake_mode() if options.fake else contextlib.nullcontext()
    with context:
        workload = Workload(model, options)
        size = "small" if small else "full"
        how = "FakeTensorMode capture" if options.fake else "real-tensor run"
        what = ("one full training step" if mode == "train"
                else "one inference forward pass under torch.no_grad(), model.eval()")
        extra = f", optimizer={workload.optimizer_name}" if mode == "train" else ""
        source = (f"torch {torch.__version__} {how} of {what} (model={workload.spec.name} "
                  f"[{size}], batch={batch}, amp={amp}{extra}); "
                  f"durations are {cost_model.describe()}")
        return record(workload.run, workload.persistent(), name=f"{model}_{mode}_b{batch}",
                      source=source, cost_model=cost_model,
                      lifted_from_start=options.lifted_from_start)


def _autocast(amp: bool):
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp)
