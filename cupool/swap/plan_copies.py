"""The copies a swapping plan issues at an op boundary, with what each must wait for.

The swap engine (:mod:`.engine`) calls these as it enqueues op ``i``; they go through the
:class:`~cupool.swap.copy_engine.CopyEngine` on its D2H and H2D streams and keep, in the
running :class:`~cupool.swap.iteration.IterationState`, what later work must wait for:

- a swap-in triggered at ``i`` waits for ``done[i - 1]``, for the copies out still reading
  the bytes it lands in (each once: the H2D stream's later work is behind it) and for the
  buffer's own latest swap-out; its ``landed`` event is what the due op waits for;
- a buffer produced or recomputed at ``i`` waits on the compute stream (timed) for the
  copies out still reading its bytes;
- a swap-out after ``i`` waits for ``done[i]`` and, into the slot its buffer was swapped in
  from, for that copy in; a drop (clean data) copies nothing and reads no byte.

Each copy's event, and ``done[i]``, the event recorded on the compute stream after an op a
copy waits for, is made once and recorded again in every iteration (a stream's wait holds
the mark it was given).
"""

from __future__ import annotations

from cupool.swap.errors import EngineError
from cupool.swap.iteration import IterationState, PendingCopy, split_overlapping


def resident_ptr(schedule, state: IterationState, b: int, op: int) -> int:
    """Where buffer ``b``'s residency holding op ``op`` was served this iteration."""
    start = schedule.holding(b, op)
    if start is None or (b, start) not in state.ptrs:
        raise EngineError(f"buffer {b} is used at op {op} but has no residency there")
    return state.ptrs[(b, start)]


class PlanCopies:
    """The plan's copies on ``device`` through ``copy_engine``; ``sizes`` (scaled bytes
    per buffer), ``handles`` and ``boundary_slots`` (persistent buffers' host copies) are
    the engine's; ``timing`` (a :class:`~cupool.swap.timing.StepTiming`) times the compute
    stream's waits."""

    def __init__(self, device, copy_engine, sizes: dict, handles: dict, boundary_slots: dict,
                 timing) -> None:
        self.device, self.copy_engine, self.timing = device, copy_engine, timing
        self.sizes, self.handles, self.boundary_slots = sizes, handles, boundary_slots
        self._events: dict = {}  # (buffer, op, direction) or (op, "done") -> its event

    def _event(self, key):
        event = self._events.get(key)
        if event is None:
            event = self._events[key] = self.device.create_event()
        return event

    def record_done(self, state: IterationState, op: int, compute) -> None:
        """``done[op]``, recorded on the ``compute`` stream after op ``op``'s work."""
        event = state.done[op] = self._event((op, "done"))
        event.record(compute)

    def swap_ins(self, schedule, state: IterationState, op: int) -> None:
        """The swap-ins ``schedule`` triggers at ``op``."""
        sizes = self.sizes
        for action in schedule.swap_ins[op]:
            b = action.buffer_id
            ptr = state.ptrs[(b, op)]
            split = split_overlapping(state.h2d_pending, ((ptr, ptr + sizes[b]),))
            state.h2d_pending = split.rest
            waits = [copy.copied for copy in split.overlapping]
            own = state.last_out.get(b)
            if own is not None and own not in waits:  # often the copy out of these bytes
                waits.append(own)
            if op > 0:
                waits.append(state.done[op - 1])
            slot = self.boundary_slots.get(b) or state.host_slots[b]
            landed = self.copy_engine.swap_in(self.handles[b], slot, sizes[b], ptr, waits,
                                              landed=self._event((b, op, "in")))
            state.landed_at[(b, op)] = state.last_in[b] = landed

    def wait_for_readers(self, state: IterationState, op: int, written) -> None:
        """The compute stream waits for the swap-outs still reading the bytes ``written``
        buffers take at ``op``."""
        ptrs, sizes = state.ptrs, self.sizes
        split = split_overlapping(state.pending, [(ptrs[(b, op)], ptrs[(b, op)] + sizes[b])
                                                  for b in written])
        for copy in split.overlapping:
            self.timing.wait(state, op, copy.copied, None)
        state.pending = split.rest

    def swap_outs(self, schedule, state: IterationState, op: int) -> None:
        """The swap-outs ``schedule`` issues after ``op``."""
        sizes, boundary_slots = self.sizes, self.boundary_slots
        for b in schedule.swap_outs[op]:
            ptr = resident_ptr(schedule, state, b, op)
            drop = (b, op) in schedule.drops  # clean: the host copy is still valid
            slot = boundary_slots.get(b) or state.host_slots.get(b)
            # a slot the buffer was swapped in from is written only after that copy read it
            waits = (state.last_in[b],) if slot is not None and not drop \
                and b in state.last_in else ()
            issued = self.copy_engine.swap_out(
                self.handles[b], ptr, sizes[b], state.done[op], slot,
                schedule.out_levels[(b, op)], drop=drop, held=(b, op) in schedule.held,
                out=self._event((b, op, "out")), waits=waits)
            if b not in boundary_slots:
                state.host_slots[b] = issued.slot
            if not drop:  # a drop reads no device byte
                copy = PendingCopy(ptr, ptr + sizes[b], issued.copied)
                state.pending.append(copy)
                state.h2d_pending.append(copy)
            state.last_out[b] = issued.copied


__all__ = ["PlanCopies", "resident_ptr"]
