"""Stream-ordered work of an op, on either backend: integrity checks, callables and
op durations, enqueued on the compute stream so they run in the stream's order.

The swap engine (:mod:`.engine`) enqueues everything an iteration does before waiting for
any of it, so every piece of work must be *stream work*, not something done now. The
two backends differ in what may run where, and :class:`StreamWork` hides that:

==================  ========================================  ==============================
                    ``emulated``                              ``cuda``
==================  ========================================  ==============================
:meth:`run` ``fn``  launched on the stream (``fn``          ``fn()`` now, with the stream
                    runs when the stream reaches it)          current in CuPy, so the
                                                              kernels it launches are
                                                              ordered on the stream
:meth:`fill`        NumPy twin (:func:`~cupool.kernels.       ``cupool_pattern_fill``
                    reference.fill`) launched on the stream   (:func:`~cupool.kernels.
                                                              fill_pattern`)
:meth:`verify`      NumPy twin (``count_mismatches``) in a    ``cupool_pattern_verify``
                    launch, summed on the host                through the kernels' loader,
                                                              summed into one device
                                                              counter per iteration
:meth:`spin`        (the engine sleeps on its own clock)      ``cupool_spin_ns``
==================  ========================================  ==============================

Nothing here is a host callback (Python on the stream's timeline, which on a GPU stalls
the stream until the enqueuing thread lets go of the interpreter): what the emulated
backend runs in host functions is the stream's own work, *launched*
(:meth:`~cupool.devices.protocol.Device.launch`), as a kernel would be on a GPU.

**Batches.** On the emulated device each launch is a hand-off to the stream's thread, and
an op is several pieces of work, so between :meth:`begin_batch` and :meth:`end_batch`
they are collected and launched as *one* function that runs them in order (the first
exception is re-raised after the rest ran), when the stream must see them: at
:meth:`flush`, which the caller calls before it records an event or enqueues a wait on
the stream, and at :meth:`end_batch`. A batch may span many ops: :meth:`commit` marks what
was collected so far as complete, and ``end_batch(complete=False)`` (an interrupted op)
launches only that and drops the rest. On a GPU nothing is collected (kernels go on the
stream at once), so :meth:`flush` has nothing to do.

**Timed waits.** :meth:`timed_wait` enqueues a wait for an event between two timing
events recorded on the stream, on both backends; the caller reads how long the stream
stood still from them once the stream has been synchronised (:class:`TimedWait`).

Counts: :meth:`results` returns the iteration's :class:`CheckCounts` once the
stream has been synchronised; :meth:`begin_iteration` resets them. Mismatches are counted,
never raised: a lost byte is a number in the report.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from cupool.devices.errors import DeviceError
from cupool.devices.memory import host_view
from cupool.kernels import reference

_BLOCK = 256  # threads per block (a multiple of 32, as the verify reduction needs)
_MAX_BLOCKS = 4096


class TimedWait(NamedTuple):
    """A wait :meth:`StreamWork.timed_wait` enqueued: the stream reached ``began``, then
    waited for the event, then reached ``ended`` (timing events; read them after the
    stream has been synchronised)."""

    began: object
    ended: object

    def seconds(self) -> float:
        """How long the stream stood still for the event."""
        return self.ended.seconds_since(self.began)


class CheckCounts(NamedTuple):
    """An iteration's checks: ``bytes_checked`` bytes compared with their pattern, of
    which ``corrupt_bytes`` differed."""

    bytes_checked: int
    corrupt_bytes: int


def _grid(nbytes: int) -> int:
    words = (nbytes - 1) // 8 + 1
    return max(1, min(_MAX_BLOCKS, -(-words // _BLOCK)))


class StreamWork:
    """Work on ``stream`` of ``device`` (kind ``"emulated"`` or ``"cuda"``), patterns seeded
    with ``seed`` (see the module docstring). ``_lock`` guards the host-side counts (the
    emulated checks add to them from the stream's thread)."""

    def __init__(self, device, stream, seed: int) -> None:
        kind = getattr(device, "kind", None)
        if kind not in ("emulated", "cuda"):
            raise DeviceError(f"StreamWork: device {device!r} has kind {kind!r}; expected "
                              f"'emulated' or 'cuda'")
        self.device, self.stream, self.seed = device, stream, seed
        self.gpu = kind == "cuda"
        self._lock = threading.Lock()
        self._checked = 0
        self._corrupt = 0
        self._counter = None  # cuda: uint64[2] device array [mismatches, first mismatch]
        self._batch: list | None = None  # work collected for one launch
        self._committed = 0  # how much of _batch belongs to complete ops (commit())

    def begin_iteration(self) -> None:
        """Reset the counts (call with nothing of the previous iteration still queued)."""
        with self._lock:
            self._checked = self._corrupt = 0
        self._batch = None  # a batch an exception left open is dropped, never enqueued
        if self.gpu:
            cupy = self.device.cupy
            with self._on_gpu():
                self._counter = cupy.array([0, reference.MASK64], dtype=cupy.uint64)

    def begin_batch(self) -> None:
        """Collect the following work into one launch (module
        docstring)."""
        self._batch = []
        self._committed = 0

    def commit(self) -> None:
        """Mark the work collected so far as complete (``end_batch(complete=False)`` keeps
        it)."""
        if self._batch is not None:
            self._committed = len(self._batch)

    def flush(self) -> None:
        """Enqueue the collected work now, as one launch; keep collecting."""
        batch = self._batch
        if batch:
            self._batch = []
            self._committed = 0
            self._enqueue(batch)

    def end_batch(self, complete: bool = True) -> None:
        """Enqueue the collected work as one launch and stop collecting;
        ``complete=False`` enqueues only what was committed and drops the rest."""
        batch, self._batch = self._batch, None
        if batch and not complete:
            batch = batch[:self._committed]
        if batch:
            self._enqueue(batch)

    def _enqueue(self, batch: list) -> None:
        def batch_of_work() -> None:
            first = None
            for fn in batch:
                try:
                    fn()
                except Exception as exc:
                    first = first or exc
            if first is not None:
                raise first

        self.device.launch(self.stream, batch_of_work)

    def _collect(self, fn: Callable[[], object]) -> None:
        """Emulated: launch ``fn()`` on the stream, in the batch when one is open."""
        if self._batch is not None:
            self._batch.append(fn)
        else:
            self.device.launch(self.stream, fn)

    def run(self, fn: Callable[[], object]) -> None:
        """Run ``fn()`` in stream order: launched on the emulated device's stream (the
        device's own work there: an op's callable over emulated memory); on a GPU, now,
        with the stream current (``fn`` launches its kernels on it)."""
        if not self.gpu:
            self._collect(fn)
            return
        with self._on_gpu():
            fn()

    def run_all(self, calls) -> None:
        """:meth:`run` for each of ``calls`` in order: on the emulated device added to
        the batch at once, on a GPU called with the stream current once for all."""
        if not self.gpu:
            if self._batch is not None:
                self._batch.extend(calls)
            else:
                for fn in calls:
                    self.device.launch(self.stream, fn)
            return
        with self._on_gpu():
            for fn in calls:
                fn()

    def mark(self, event) -> None:
        """Record timing ``event`` at this point of the stream's work: on a GPU at once;
        on the emulated device inside the batch (the launched work stamps it as it runs),
        so that a mark costs no hand-off of its own."""
        if self.gpu or self._batch is None:
            event.record(self.stream)
            return
        self._batch.append(event.record_in_work())

    def timed_wait(self, event, began, ended) -> TimedWait:
        """Make later work wait for ``event``, between ``began`` and ``ended`` (timing
        events, recorded now on the stream; reusable once the stream was synchronised).
        Returns the :class:`TimedWait` to read after the stream finished. On the emulated
        device the three run back to back inside the batch's launched work, as a GPU runs
        them back to back on the stream: no thread hand-off between the marks lands in
        the measured wait."""
        stream = self.stream
        if self.gpu or self._batch is None:
            self.flush()
            began.record(stream)
            stream.wait_event(event)
            ended.record(stream)
        else:
            stamp_began, wait, stamp_ended = (began.record_in_work(), event.wait_in_work(),
                                              ended.record_in_work())

            def timed_wait() -> None:
                stamp_began()
                wait()
                stamp_ended()

            self._batch.append(timed_wait)
        return TimedWait(began, ended)

    def fill(self, ptr: int, nbytes: int, buffer_id: int, iteration: int) -> None:
        """Enqueue: device bytes ``[ptr, ptr + nbytes)`` get the pattern of ``(seed,
        buffer_id, iteration)``."""
        if nbytes == 0:
            return
        seed = self.seed
        if self.gpu:
            from cupool.kernels import fill_pattern

            fill_pattern(self.device, ptr, nbytes, seed=seed, buffer_id=buffer_id,
                         iteration=iteration, stream=self.stream)
            return

        def fill() -> None:
            reference.fill(host_view(ptr, nbytes), seed, buffer_id, iteration)

        self._collect(fill)

    def verify(self, ptr: int, nbytes: int, buffer_id: int, iteration: int) -> None:
        """Enqueue: count the bytes of ``[ptr, ptr + nbytes)`` that differ from the pattern
        of ``(seed, buffer_id, iteration)`` into the iteration's counts."""
        if nbytes == 0:
            return
        with self._lock:
            self._checked += nbytes
        seed = self.seed
        if self.gpu:
            u64 = np.uint64
            counter = self._counter.data.ptr
            self._launch("cupool_pattern_verify", _grid(nbytes),
                         (u64(ptr), u64(nbytes), u64(0), u64(seed), u64(buffer_id),
                          u64(iteration), u64(counter), u64(counter + 8)))
            return

        def verify() -> None:
            wrong = reference.count_mismatches(host_view(ptr, nbytes), seed, buffer_id,
                                               iteration)
            if wrong:
                with self._lock:
                    self._corrupt += wrong

        self._collect(verify)

    def spin(self, seconds: float) -> None:
        """Enqueue a wait of ``seconds`` on a GPU (``cupool_spin_ns``; the cuda backend only:
        the engine keeps its own clock on the emulated device)."""
        from cupool.kernels import spin

        spin(self.device, max(0, int(seconds * 1e9)), stream=self.stream)

    def results(self) -> CheckCounts:
        """The iteration's :class:`CheckCounts`; synchronise the stream first (on a GPU
        this reads the device counter)."""
        with self._lock:
            checked, corrupt = self._checked, self._corrupt
        if self.gpu and self._counter is not None:
            with self._on_gpu():
                corrupt += int(self._counter.get()[0])
        return CheckCounts(checked, corrupt)

    # -- GPU helpers ------------------------------------------------------------------
    def _on_gpu(self):
        """A context: this GPU current, the stream current, CuPy's default pool as the
        allocator (scratch arrays never come from an installed planned pool)."""
        import contextlib

        cupy = self.device.cupy
        stack = contextlib.ExitStack()
        stack.enter_context(cupy.cuda.Device(self.device.device_id))
        stack.enter_context(self.stream.cupy_stream)
        stack.enter_context(cupy.cuda.using_allocator(cupy.get_default_memory_pool().malloc))
        return stack

    def _launch(self, function: str, grid: int, args: tuple) -> None:
        from cupool.kernels.loader import get_function

        kernel = get_function(self.device, function)
        cupy = self.device.cupy
        try:
            with self._on_gpu():
                kernel((grid,), (_BLOCK,), args)
        except (cupy.cuda.driver.CUDADriverError, cupy.cuda.runtime.CUDARuntimeError) as exc:
            raise DeviceError(f"launching {function} on {self.device.name!r}: {exc}") from exc
