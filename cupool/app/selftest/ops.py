"""Measured op durations of a real model step against the durations its trace estimates.

The capture (:func:`cupool.capture.capture_model`) gives every aten op of a step a
duration from a roofline model of a device preset. Here the same step runs for real
under :class:`OpTimer`, a ``TorchDispatchMode`` that times every op the capture keeps
(views and metadata queries are left out the same way): on a GPU with a pair of CUDA
events around the op (the GPU's time from the op's first launch to its last kernel's
end), on the CPU with the wall clock. The two op sequences are aligned by name
(``difflib``'s longest matching blocks: a CUDA kernel can have another aten name than
its CPU stand-in, and those are left unmatched), and the report gives the totals of
both, and for the matched ops the median and spread of measured / estimated.

Needs PyTorch (the ``capture`` extra); on ``"cuda"`` a CUDA build of it.
"""

from __future__ import annotations

import difflib
import statistics
import time
from dataclasses import dataclass

from cupool.errors import InputError

TOP_OPS = 8
"""How many ops with the largest absolute difference the report lists."""


@dataclass(frozen=True)
class TimedOp:
    """One op of the real step: its aten name and measured duration (µs)."""

    name: str
    duration_us: float


def _timer_class():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from cupool.capture.tracer import _is_view_op

    class OpTimer(TorchDispatchMode):
        """Times every op the capture keeps; ``ops()`` after the step (synchronises)."""

        def __init__(self, on_gpu: bool) -> None:
            super().__init__()
            self.on_gpu = on_gpu
            self._records: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if _is_view_op(func):
                return func(*args, **kwargs)
            if self.on_gpu:
                begin = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                begin.record()
                out = func(*args, **kwargs)
                end.record()
                self._records.append((str(func), begin, end))
            else:
                started = time.perf_counter()
                out = func(*args, **kwargs)
                self._records.append((str(func), (time.perf_counter() - started) * 1e6, None))
            return out

        def ops(self) -> list[TimedOp]:
            if self.on_gpu:
                torch.cuda.synchronize()
                return [TimedOp(name, begin.elapsed_time(end) * 1000.0)
                        for name, begin, end in self._records]
            return [TimedOp(name, us) for name, us, _ in self._records]

    return OpTimer


def time_step(model: str, mode: str, batch: int, *, device: str, small: bool = False,
              warmup: int = 2, seed: int = 0) -> list[TimedOp]:
    """Run ``warmup`` untimed steps of the capture's workload on ``device`` (``"cuda"`` or
    ``"cpu"``), then one timed step; its ops in order."""
    import torch

    from cupool.capture import CaptureOptions
    from cupool.capture.tracer import Workload

    if device not in ("cuda", "cpu"):
        raise InputError(f"device (={device!r}) must be 'cuda' or 'cpu'")
    torch.manual_seed(seed)
    with torch.device(device):
        workload = Workload(model, CaptureOptions(mode=mode, batch=batch, small=small))
        for _ in range(warmup):
            workload.run()
        if device == "cuda":
            torch.cuda.synchronize()
        timer = _timer_class()(on_gpu=device == "cuda")
        with timer:
            workload.run()
    return timer.ops()


def compare_op_times(estimated, measured: list[TimedOp]) -> dict:
    """``estimated``: the trace's ops (``name``, ``duration_us``); ``measured``: the real
    step's. Totals, and measured / estimated over the ops matched by name."""
    names_estimated = [op.name for op in estimated]
    names_measured = [op.name for op in measured]
    matcher = difflib.SequenceMatcher(a=names_estimated, b=names_measured, autojunk=False)
    pairs = [(estimated[block.a + k], measured[block.b + k])
             for block in matcher.get_matching_blocks() for k in range(block.size)]
    ratios = [m.duration_us / e.duration_us for e, m in pairs if e.duration_us > 0]
    total_estimated = sum(op.duration_us or 0.0 for op in estimated)
    total_measured = sum(op.duration_us for op in measured)
    worst = sorted(pairs, key=lambda p: abs(p[1].duration_us - (p[0].duration_us or 0.0)),
                   reverse=True)[:TOP_OPS]
    deciles = statistics.quantiles(ratios, n=10) if len(ratios) >= 2 else [float("nan")] * 9
    working = [(e.duration_us, m.duration_us) for e, m in pairs if e.duration_us > 0]
    return {
        "estimated_ops": len(estimated), "measured_ops": len(measured),
        "matched_ops": len(pairs),
        "estimated_total_us": total_estimated, "measured_total_us": total_measured,
        "total_ratio": total_measured / total_estimated if total_estimated else None,
        "median_ratio": statistics.median(ratios) if ratios else None,
        "p10_ratio": deciles[0], "p90_ratio": deciles[-1],
        "calibration": roofline_calibration(working),
        "largest_differences": [
            {"name": m.name, "estimated_us": e.duration_us, "measured_us": m.duration_us}
            for e, m in worst],
    }


def roofline_calibration(pairs) -> dict | None:
    """The roofline parameters that best explain the measurement: over the matched ops
    that do work, ``(estimated µs, measured µs)`` pairs, the least-squares line
    ``measured = launch_overhead_us + estimated / efficiency`` (estimates made with
    efficiency 1 and no launch overhead, as the capture's default). ``efficiency`` is
    clamped to ``(0, 1]`` and ``launch_overhead_us`` to ``>= 0`` (the ranges
    :class:`~cupool.capture.roofline.RooflineModel` accepts); ``None`` with fewer than two
    distinct estimates."""
    from cupool.app.selftest.link import least_squares

    if len({estimated for estimated, _ in pairs}) < 2:
        return None
    line = least_squares([e for e, _ in pairs], [m for _, m in pairs])
    efficiency = min(1.0, 1.0 / line.slope) if line.slope > 0 else None
    return {"ops": len(pairs), "slope": line.slope, "intercept_us": line.intercept,
            "efficiency": efficiency, "launch_overhead_us": max(0.0, line.intercept)}


def measure_model(model: str, mode: str, batch: int, *, device: str,
                  small: bool = False) -> dict:
    """Capture ``model`` (estimated durations) and time the same step on ``device``."""
    from cupool.capture import CaptureOptions, capture_model

    trace = capture_model(model, CaptureOptions(mode=mode, batch=batch, small=small))
    measured = time_step(model, mode, batch, device=device, small=small)
    return {"model": model, "mode": mode, "batch": batch, "small": small, "device": device,
            "estimates": trace.source.split("durations are ")[-1],
            **compare_op_times(trace.ops, measured)}
