"""Measured host<->device copy speed, against the cost model's link presets.

The cost model says a copy of ``n`` bytes in one direction takes
``latency_us + n / (gbps * 1000)`` µs on one copy engine (FIFO). This module measures
exactly that on a device, through the device protocol only: for each size it enqueues
``copies`` copies back to back on one stream between pinned host memory and device memory,
waits for the stream, and takes the wall time per copy. Back-to-back copies on one stream
queue on the engine the way the runtime's copies do, so the per-copy time is the engine's
service time plus whatever the host adds to issue one copy. A least-squares line through
``(n, µs per copy)`` over all sizes gives both parameters of the model::

    µs per copy
      |                                   x      slope     = 1 / (gbps * 1000)
      |                       x                  intercept = latency_us
      |           x
      |  x x
      +---------------------------------- n bytes

Each size is timed ``repeats`` times and the median kept, so one descheduled moment of
the host does not bend the line. ``scale`` divides every size actually copied (an emulated
device paced at ``preset / scale`` GB/s then reports the preset's figures): the fitted
bandwidth is multiplied back by it.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

from cupool.devices.protocol import Device
from cupool.errors import InputError
from cupool.sim.cost import DEFAULT_LATENCY_US, LINK_PRESETS

DEFAULT_SIZES = (4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20)
"""Copy sizes in bytes (before ``scale``): small ones pin the intercept, large the slope."""
CALIBRATION_TOLERANCE = 0.10
"""A preset is called off when the measurement differs from it by more than this fraction."""


@dataclass(frozen=True)
class LineFit:
    """``us = latency_us + nbytes / (gbps * 1000)``, fitted by least squares; ``residual_us``
    is the largest distance of a sample from the line."""

    gbps: float
    latency_us: float
    residual_us: float


@dataclass(frozen=True)
class DirectionMeasurement:
    """One direction (``"h2d"`` or ``"d2h"``): the samples (bytes per copy, median µs per
    copy), the fitted line, and the bandwidth of the largest copy alone (``n / t``)."""

    direction: str
    sizes: tuple[int, ...]
    us_per_copy: tuple[float, ...]
    fit: LineFit
    largest_copy_gbps: float


@dataclass(frozen=True)
class Line:
    """``y = intercept + slope * x``."""

    slope: float
    intercept: float


def least_squares(xs, ys) -> Line:
    """The least-squares line through ``(x, y)``; at least two distinct ``x``."""
    xs, ys = list(xs), list(ys)
    if len(xs) != len(ys) or len(set(xs)) < 2:
        raise InputError(f"a line needs >= 2 distinct x with one y each (x={xs!r}, y={ys!r})")
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    return Line(slope, mean_y - slope * mean_x)


def fit_line(sizes, us_per_copy) -> LineFit:
    """The least-squares line through ``(size, µs)``; at least two distinct sizes.

    A non-positive slope (time not growing with size: noise on a tiny range) cannot be a
    bandwidth and raises :class:`InputError` with the numbers."""
    sizes, times = list(sizes), list(us_per_copy)
    if len(sizes) != len(times) or len(set(sizes)) < 2:
        raise InputError(f"fit_line needs >= 2 distinct sizes with one time each "
                         f"(sizes={sizes!r}, times={times!r})")
    line = least_squares(sizes, times)
    slope, intercept = line.slope, line.intercept
    if slope <= 0:
        raise InputError(f"copy time does not grow with size (slope {slope:.3g} µs/B over "
                         f"sizes {sizes}): no bandwidth can be fitted")
    residual = max(abs(t - (intercept + slope * n)) for n, t in zip(sizes, times, strict=True))
    return LineFit(gbps=1.0 / (slope * 1000.0), latency_us=intercept, residual_us=residual)


def _time_copies(device: Device, direction: str, device_ptr: int, host_ptr: int,
                 nbytes: int, copies: int, stream) -> float:
    """Wall µs per copy of ``copies`` back-to-back copies of ``nbytes`` on ``stream``."""
    copy = device.copy_h2d_async if direction == "h2d" else device.copy_d2h_async
    started = time.perf_counter()
    for _ in range(copies):
        if direction == "h2d":
            copy(device_ptr, host_ptr, nbytes, stream)
        else:
            copy(host_ptr, device_ptr, nbytes, stream)
    stream.synchronize()
    return (time.perf_counter() - started) * 1e6 / copies


def measure_link(device: Device, *, sizes=DEFAULT_SIZES, scale: int = 1, repeats: int = 5,
                 bytes_per_size: int = 1 << 30,
                 max_copies: int = 64) -> dict[str, DirectionMeasurement]:
    """Measure both directions on ``device`` (module docstring): ``{"h2d": ..., "d2h": ...}``.

    Per size, ``copies = clamp(bytes_per_size / size, 4, max_copies)`` copies make one
    sample (before ``scale``); one untimed sample warms the path first."""
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise InputError(f"scale (={scale!r}) must be an int >= 1")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise InputError(f"repeats (={repeats!r}) must be an int >= 1")
    actual = sorted({max(1, size // scale) for size in sizes})
    if len(actual) < 2:
        raise InputError(f"sizes (={list(sizes)!r}) at scale {scale} give fewer than two "
                         f"distinct copy sizes")
    largest = actual[-1]
    device_memory = device.reserve(largest)
    host_memory = device.alloc_pinned(largest)
    stream = device.create_stream("selftest-link")
    try:
        device.pinned_array(host_memory)[:] = 0x5A
        results = {}
        for direction in ("h2d", "d2h"):
            medians = []
            for nbytes in actual:
                copies = max(4, min(max_copies, bytes_per_size // scale // nbytes))
                _time_copies(device, direction, device_memory.ptr, host_memory.ptr, nbytes,
                             1, stream)
                samples = [_time_copies(device, direction, device_memory.ptr, host_memory.ptr,
                                        nbytes, copies, stream) for _ in range(repeats)]
                medians.append(statistics.median(samples))
            trace_sizes = tuple(n * scale for n in actual)
            fit = fit_line(trace_sizes, medians)
            results[direction] = DirectionMeasurement(
                direction=direction, sizes=trace_sizes, us_per_copy=tuple(medians), fit=fit,
                largest_copy_gbps=trace_sizes[-1] / (medians[-1] * 1000.0))
        return results
    finally:
        device.synchronize()
        device.free_pinned(host_memory)
        device.release(device_memory)


def compare_with_presets(measured: dict[str, DirectionMeasurement]) -> dict:
    """The measured link beside the nearest preset of :data:`LINK_PRESETS` (by mean fitted
    bandwidth) and the model's default latency: relative differences, and whether the
    preset is off by more than :data:`CALIBRATION_TOLERANCE`."""
    mean_gbps = statistics.fmean(m.fit.gbps for m in measured.values())
    preset = min(LINK_PRESETS, key=lambda name: abs(LINK_PRESETS[name] - mean_gbps))
    rows = {}
    for direction, m in measured.items():
        gbps_diff = m.fit.gbps / LINK_PRESETS[preset] - 1.0
        latency_diff = m.fit.latency_us / DEFAULT_LATENCY_US - 1.0
        rows[direction] = {
            **asdict(m.fit), "largest_copy_gbps": m.largest_copy_gbps,
            "sizes": list(m.sizes), "us_per_copy": list(m.us_per_copy),
            "preset_gbps": LINK_PRESETS[preset], "preset_latency_us": DEFAULT_LATENCY_US,
            "gbps_difference": gbps_diff, "latency_difference": latency_diff,
            "preset_off": (abs(gbps_diff) > CALIBRATION_TOLERANCE
                           or abs(latency_diff) > CALIBRATION_TOLERANCE),
        }
    return {"nearest_preset": preset, "directions": rows,
            "calibration_needed": any(row["preset_off"] for row in rows.values())}
