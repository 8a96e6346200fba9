"""Moving a tensor's bytes between the host and device arrays, on either backend, and timing
an op on the device.

On the emulated device a device array is a NumPy view of host-backed memory, so a transfer
is a ``numpy.copyto``; on a GPU it is a CuPy array, and the transfer is ``set``/``get`` on
the current stream (the caller makes the stream it wants current). These are the
session's own copies — parameters uploaded, values fetched, the passive iteration's
synchronous swaps — not the plan's swaps, which go through the swap engine's copy streams.
"""

from __future__ import annotations

import time

import numpy as np


def upload(view, host: np.ndarray) -> None:
    """Copy host array ``host`` into device array ``view`` (same shape and dtype)."""
    if isinstance(view, np.ndarray):
        np.copyto(view, host)
    else:
        view.set(np.require(host, requirements="C"))


def download(host: np.ndarray, view) -> None:
    """Copy device array ``view`` into host array ``host`` (same shape and dtype)."""
    if isinstance(view, np.ndarray):
        np.copyto(host, view)
    else:
        view.get(out=host)


def host_copy(view) -> np.ndarray:
    """A new host array holding device array ``view``'s values."""
    if isinstance(view, np.ndarray):
        return np.array(view, copy=True)
    return view.get()


class OpClock:
    """Times ops: wall time on the emulated device; CUDA events around the op on the GPU's
    current stream (read after the stream synchronized, by :meth:`elapsed_us`)."""

    def __init__(self, device) -> None:
        self.gpu = device.kind == "cuda"
        self._cuda = device.cupy.cuda if self.gpu else None
        self._began = None

    def start(self) -> None:
        if self.gpu:
            self._began = self._cuda.Event()
            self._began.record()
        else:
            self._began = time.perf_counter()

    def stop(self):
        """A mark for :meth:`elapsed_us` (an event recorded now, or the wall time)."""
        if self.gpu:
            ended = self._cuda.Event()
            ended.record()
            return self._began, ended
        return self._began, time.perf_counter()

    def elapsed_us(self, mark) -> float:
        """µs between the two ends of ``mark`` (waits for the end event on a GPU)."""
        began, ended = mark
        if self.gpu:
            ended.synchronize()
            return float(self._cuda.get_elapsed_time(began, ended)) * 1e3
        return (ended - began) * 1e6


__all__ = ["OpClock", "download", "host_copy", "upload"]
