"""How long a copy takes to reach the stream that waits for it, beyond its bytes.

A planned swap-in is issued on a copy stream once the op that triggers it ran, and the op
that needs it waits for it on the compute stream. Between the two there is a fixed cost
that the link's bandwidth does not describe: the copy stream noticing the trigger, the
copy's own start, the compute stream noticing the copy's end. On a GPU it is a few
microseconds; on the emulated device each hand-off is a worker thread waking up, tens of
microseconds. The planner and the simulator charge every copy ``latency_us`` (see
:class:`cupool.sim.cost.CostModel`); :func:`measure_copy_round_trip` measures what this
device really charges, so a plan can lead its prefetches by that much and the simulator
predicts what the device does::

    compute  ──[mark a]──[record trigger]───────────────[wait landed]──[mark b]──
    copy                     └─[wait trigger]──[copy n bytes]──[record landed]┘
    round trip = b - a;  latency = median round trip - n / bandwidth

The marks are timing events (device time on a GPU, the worker's clock on the emulated
device). The copy is a host-to-device copy of ``nbytes`` (tiny: its bytes' time is a
rounding error) from pinned memory, between two streams made for the measurement.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from cupool.devices.protocol import Device
from cupool.errors import InputError

ROUND_TRIP_BYTES = 256
ROUND_TRIP_REPEATS = 21


@dataclass(frozen=True)
class CopyRoundTrip:
    """``latency_us``: the median round trip (module docstring) less the copy's bytes at
    ``gbps``, never below 0; ``round_trips_us``: every measured round trip, in order;
    ``nbytes``: the size of the copy measured."""

    latency_us: float
    round_trips_us: tuple[float, ...]
    nbytes: int


def measure_copy_round_trip(device: Device, gbps: float, *, nbytes: int = ROUND_TRIP_BYTES,
                            repeats: int = ROUND_TRIP_REPEATS) -> CopyRoundTrip:
    """Measure ``device``'s fixed cost per copy (module docstring), ``repeats`` times; the
    link's bandwidth ``gbps`` (GB/s) accounts for the bytes. Makes two streams and frees
    the memory it reserved."""
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise InputError(f"repeats (={repeats!r}) must be an integer >= 1")
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 1:
        raise InputError(f"nbytes (={nbytes!r}) must be an integer >= 1")
    if not gbps > 0:
        raise InputError(f"gbps (={gbps!r}) must be > 0")
    compute = device.create_stream("calibrate-compute")
    copy = device.create_stream("calibrate-copy")
    memory = device.reserve(nbytes)
    pinned = device.alloc_pinned(nbytes)
    trigger, landed = device.create_event(), device.create_event()
    began, ended = device.create_event(timing=True), device.create_event(timing=True)
    rounds: list[float] = []
    try:
        for _ in range(repeats):
            began.record(compute)
            trigger.record(compute)
            copy.wait_event(trigger)
            device.copy_h2d_async(memory.ptr, pinned.ptr, nbytes, copy)
            landed.record(copy)
            compute.wait_event(landed)
            ended.record(compute)
            compute.synchronize()
            rounds.append(ended.seconds_since(began) * 1e6)
    finally:
        device.synchronize()
        device.free_pinned(pinned)
        device.release(memory)
    latency = max(0.0, statistics.median(rounds) - nbytes / (gbps * 1e3))
    return CopyRoundTrip(latency, tuple(rounds), nbytes)


__all__ = ["ROUND_TRIP_BYTES", "ROUND_TRIP_REPEATS", "CopyRoundTrip", "measure_copy_round_trip"]
