"""What the swap engine's iterations took on the compute stream, read from timing events
once the streams finished: nothing of it is measured by Python on a stream's timeline.

- A timed wait (a swap-in's due op, a copy still reading bytes an op writes) is a wait
  for the copy's event between two timing events; its length is a stall over the noise
  threshold, and a late prefetch where a swap-in was due
  (:meth:`IterationState.measured_wait <cupool.swap.iteration.IterationState.measured_wait>`).
- In the iterations that time their ops (an engine's first three, then every
  ``every``-th), a mark stamps the iteration's start and each op's end, and two timing
  events the recomputes before an op: an op's time runs from the previous mark to its
  own, less the waits and the recomputes before it (the simulator counts those apart). On
  a GPU a mark is a timing event; on the emulated device, whose stream work runs on a
  host thread, it is that work writing ``time.perf_counter()`` into its slot (a stamp:
  what an event's record does there, without the event's flag that nobody waits for).
  The other iterations record events only where the plan has a copy or a recompute.

Every event is made once and recorded again in later iterations: a stream's wait holds
the mark it was given, and the marks are read only after the iteration's synchronize.
"""

from __future__ import annotations

import time

from cupool.swap.iteration import IterationState, MeasuredWait


def _stamper(stamps: list, k: int):
    """Stream work that writes the time it runs at into ``stamps[k]``."""
    clock = time.perf_counter

    def stamp() -> None:
        stamps[k] = clock()

    return stamp


class StepTiming:
    """The timing events of one engine's iterations on ``device`` (module docstring), whose
    compute-stream work goes through ``work`` (a
    :class:`~cupool.swap.checks.StreamWork`); ``num_ops`` ops an iteration; ``every``
    (int >= 1): after the first three, every ``every``-th iteration times its ops;
    ``gpu``: the device is a GPU (the emulated one starts an iteration at its gate's
    release and keeps an op clock of the waits' ends)."""

    def __init__(self, device, work, num_ops: int, every: int, gpu: bool) -> None:
        self.device, self.work, self.num_ops = device, work, num_ops
        self.every, self.gpu = max(1, every), gpu
        self._runs = 0  # iterations begun
        self._op_marks: list = []  # GPU: events of the start (0) and op i's end (i + 1)
        self._stamps: list = []  # emulated: the times of the same marks
        self.stampers: list = []  # emulated: the work that stamps mark k
        self._wait_pairs: list = []  # the k-th timed wait's two events
        self._recompute_pairs: dict = {}  # op -> the two events around its recomputes

    def begin(self) -> bool:
        """A new iteration begins: whether it times its ops (and, if so, its start is
        marked once the caller opened the stream's batch: :meth:`mark_start`)."""
        runs = self._runs
        self._runs += 1
        timing = runs < 3 or runs % self.every == 0
        if timing and not self._op_marks and not self._stamps:
            if self.gpu:
                self._op_marks = [self.device.create_event(timing=True)
                                  for _ in range(self.num_ops + 1)]
            else:
                self._stamps = [0.0] * (self.num_ops + 1)
                self.stampers = [_stamper(self._stamps, k) for k in range(self.num_ops + 1)]
        return timing

    def mark_start(self) -> None:
        """The iteration's start, in an iteration that times its ops."""
        self._mark(0)

    def mark_op(self, op: int) -> None:
        """Op ``op``'s end, in an iteration that times its ops."""
        self._mark(op + 1)

    def _mark(self, k: int) -> None:
        if self.gpu:
            self.work.mark(self._op_marks[k])
        else:
            self.work.run(self.stampers[k])

    def wait(self, state: IterationState, op: int, event, late_buffer) -> None:
        """The compute stream waits for ``event`` before op ``op``, timed (for a swap-in's
        due op, ``late_buffer`` is its buffer)."""
        k = len(state.waits)
        pairs = self._wait_pairs
        if k == len(pairs):
            make = self.device.create_event
            pairs.append((make(timing=True), make(timing=True)))
        wait = self.work.timed_wait(event, *pairs[k])
        state.waits.append(MeasuredWait(op, wait, late_buffer))
        if not self.gpu:
            state.unclocked.append(wait)

    def recomputes(self, state: IterationState, op: int) -> tuple:
        """The two timing events around the recomputes before op ``op``, in an iteration
        that times its ops (the caller marks them)."""
        pair = self._recompute_pairs.get(op)
        if pair is None:
            make = self.device.create_event
            pair = self._recompute_pairs[op] = (make(timing=True), make(timing=True))
        state.recomputes[op] = pair
        return pair

    def read(self, state: IterationState) -> None:
        """After the final synchronize: the waits' lengths (stalls, late prefetches) and,
        in an iteration timing its ops, each op's time into ``state.op_wall_s``."""
        waited = {}
        for measured in state.waits:
            seconds = measured.wait.seconds()
            state.measured_wait(measured.late_buffer, seconds)
            waited[measured.op] = waited.get(measured.op, 0.0) + seconds
        if not state.op_wall_s:
            return
        for op, (began, ended) in state.recomputes.items():
            waited[op] = waited.get(op, 0.0) + ended.seconds_since(began)
        op_wall_s = state.op_wall_s
        if self.gpu:
            marks = self._op_marks
            spans = [marks[i + 1].seconds_since(marks[i]) for i in range(len(op_wall_s))]
        else:
            stamps = self._stamps
            spans = [stamps[i + 1] - stamps[i] for i in range(len(op_wall_s))]
            if spans:  # from the gate's release, as the op clock counts
                spans[0] = stamps[1] - state.started - state.setup_s
        get = waited.get
        for i, spent in enumerate(spans):
            spent -= get(i, 0.0)
            op_wall_s[i] = spent if spent > 0.0 else 0.0


__all__ = ["StepTiming"]
