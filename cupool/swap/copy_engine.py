"""The copy engine: swap-outs and swap-ins on dedicated D2H and H2D streams.

One stream per direction, made by the device (so they do not synchronise with the
compute stream or with each other except through events), each serving its copies in
the order they were issued, like one DMA engine per direction::

    compute   |op 3|──record(done[3])                 |op 7 ........
    D2H            wait(done[3]) ─ copy b ─ record(out_b)
    H2D                       wait(done[5], out_b) ─ copy b ─ record(in_b)
    compute                                           wait(in_b) ─ |op 7|   (due op of b)

- A swap-out waits for the op it follows (an event on the compute stream), copies the
  device bytes into a staging slot (:mod:`.staging`) and records ``out`` after the copy.
  The range it read may be handed to another buffer only once ``out`` completed: the
  caller makes whatever lands there next wait for it (``waits`` of :meth:`swap_in`, or a
  compute-stream wait before a buffer is produced there).
- A swap-in waits for its trigger op's predecessor, for the copies still reading the
  bytes it lands in, and for the buffer's own swap-out; copies the slot back and records
  ``in``. The slot stays the caller's (it may serve the buffer's next swap-out: that copy
  is ordered after this one through the compute stream's wait for ``in``).
- Nothing runs on the streams but the copies, the waits and the records: the handles
  move on the host, in program order, as the copies are issued (stream order guarantees
  what their states describe): ``to_host`` and then ``host`` (or, for a *held* copy, at
  the residency's end) when a swap-out is issued, ``to_device`` when a swap-in is issued,
  ``device`` when the caller has made the due op wait for it (:meth:`arrived`).
- A copy the device refuses when it is issued (a bad range, a closed device) fails the
  handle with :class:`~cupool.swap.errors.CopyFailedError` at once, which the buffer's
  next use raises. A copy that fails while the stream runs is reported by the next
  ``synchronize()`` (the device protocol's contract; a CUDA copy error is sticky and
  surfaces there too), which the swap engine turns into the iteration's error.
- Pageable slots (staging fallback, when the pinned reservation is full) are copied by
  host work on the same stream (``memmove``, paced like the link when the device paces
  copies): launched on the emulated device, a host callback on a GPU (the one host
  callback left, and only where staging overflows).

Statistics: ``copies.d2h|h2d`` and ``bytes.d2h|h2d`` (issued), ``failed.count``.
"""

from __future__ import annotations

import ctypes
import threading
import time
from typing import NamedTuple

from cupool.devices.errors import DeviceError
from cupool.swap.errors import CopyFailedError
from cupool.swap.handles import DEVICE, TO_DEVICE, TO_HOST
from cupool.swap.staging import PinnedStaging, Slot

D2H = "d2h"
H2D = "h2d"


class IssuedSwapOut(NamedTuple):
    """A swap-out as issued: ``slot``, the host slot that now owns the buffer's host copy,
    and ``copied``, the event recorded on the D2H stream after the copy."""

    slot: Slot
    copied: object


class CopyEngine:
    """Swap copies of one device (see the module docstring). ``staging`` provides the host
    slots; the engine owns its two streams (they live as long as the device)."""

    def __init__(self, device, staging: PinnedStaging) -> None:
        self.device = device
        self.staging = staging
        self.d2h_stream = device.create_stream("swap-d2h")
        self.h2d_stream = device.create_stream("swap-h2d")
        self._lock = threading.Lock()  # guards _stats
        self._stats = {"copies.d2h": 0, "copies.h2d": 0, "bytes.d2h": 0, "bytes.h2d": 0,
                       "failed.count": 0}

    def swap_out(self, handle, ptr: int, nbytes: int, after, slot: Slot | None = None,
                 level: str = "pinned", drop: bool = False, held: bool = False,
                 out=None, waits=()) -> IssuedSwapOut:
        """Copy ``nbytes`` of ``handle``'s device bytes at ``ptr`` to a host slot once
        ``after`` (an event) and every event of ``waits`` completed. Returns the
        :class:`IssuedSwapOut` (the slot now owned by the handle's host copy, the event
        recorded after the copy: ``out``, or a new one). ``slot`` reuses a caller's slot (a
        persistent buffer's boundary copy, or the slot the buffer was swapped in from);
        otherwise one is taken from staging on the plan's host ``level``. With ``drop`` the
        data is clean, ``slot`` already holds it: nothing is copied. With ``held`` the
        residency keeps the device bytes after the copy (the plan copies out early): the
        handle leaves the device when the residency ends
        (:meth:`~cupool.swap.handles.TensorHandle.residency_ended`)."""
        stream = self.d2h_stream
        slot = slot or self.staging.acquire(max(1, nbytes), level)
        out = out or self.device.create_event()
        if after is not None:
            stream.wait_event(after)
        for event in waits:
            stream.wait_event(event)
        handle.move(TO_HOST)
        try:
            self._copy(D2H, stream, handle, slot, 0 if drop else nbytes, ptr)
        except DeviceError as exc:
            self._failed(handle, D2H, nbytes, exc)
            return IssuedSwapOut(slot, out)
        out.record(stream)
        handle.copied_out(held)
        if not drop:
            self._count(D2H, nbytes)
        return IssuedSwapOut(slot, out)

    def swap_in(self, handle, slot: Slot, nbytes: int, ptr: int, waits, landed=None):
        """Copy ``nbytes`` from ``slot`` back to device address ``ptr`` once every event of
        ``waits`` completed; returns the event recorded after the copy (``landed``, or a
        new one). The handle is ``to_device`` until :meth:`arrived`."""
        stream = self.h2d_stream
        landed = landed or self.device.create_event()
        for event in waits:
            stream.wait_event(event)
        handle.move(TO_DEVICE)
        try:
            self._copy(H2D, stream, handle, slot, nbytes, ptr)
        except DeviceError as exc:
            self._failed(handle, H2D, nbytes, exc)
            return landed
        landed.record(stream)
        self._count(H2D, nbytes)
        return landed

    @staticmethod
    def arrived(handle, view, ptr: int) -> None:
        """The work that uses ``handle`` next waits for its swap-in's ``landed`` event
        (the caller enqueued that wait): in program order, its bytes are on the device at
        ``ptr``, where ``view`` looks. A handle whose copy failed stays failed."""
        handle.move(DEVICE, view, ptr)

    def _copy(self, direction, stream, handle, slot, nbytes, ptr) -> None:
        if nbytes == 0:
            return
        if slot.pinned:
            if direction == D2H:
                self.device.copy_d2h_async(slot.ptr, ptr, nbytes, stream)
            else:
                self.device.copy_h2d_async(ptr, slot.ptr, nbytes, stream)
            return
        gbps = getattr(self.device, "bandwidth_gbps", {}).get(direction)
        latency = getattr(self.device, "latency_us", 0.0)

        def pageable_copy() -> None:
            began = time.perf_counter()
            if direction == D2H:
                ctypes.memmove(slot.ptr, ptr, nbytes)
            else:
                ctypes.memmove(ptr, slot.ptr, nbytes)
            paced = latency * 1e-6 + (nbytes / (gbps * 1e9) if gbps else 0.0)
            remaining = began + paced - time.perf_counter()
            if remaining > 0:
                time.sleep(remaining)

        if self.device.kind == "cuda":  # the runtime has no pageable async copy to enqueue
            self.device.host_callback(stream, pageable_copy)
        else:
            self.device.launch(stream, pageable_copy)

    def _failed(self, handle, direction, nbytes, exc) -> None:
        handle.fail(CopyFailedError(handle.buffer.id, direction, nbytes, str(exc)))
        with self._lock:
            self._stats["failed.count"] += 1

    def _count(self, direction, nbytes) -> None:
        with self._lock:
            self._stats[f"copies.{direction}"] += 1
            self._stats[f"bytes.{direction}"] += nbytes

    def stats(self) -> dict[str, int]:
        """A snapshot of the counters (see the module docstring)."""
        with self._lock:
            return dict(self._stats)
