"""Kernels for integrity checks, replayed op durations and compaction, on any device.

Four operations, each a CUDA C kernel (``pattern.cu``, ``spin.cu``, ``gather.cu``,
compiled at run time by :mod:`cupool.kernels.loader`) with a NumPy twin of identical
semantics (:mod:`cupool.kernels.reference`, where the pattern is defined):

=======================  ========================================  =========================
function                 what                                      kernel
=======================  ========================================  =========================
:func:`fill_pattern`     write pattern bytes of (seed, buffer,     ``cupool_pattern_fill``
                         iteration) to device bytes
:func:`verify_pattern`   count bytes that differ from the pattern  ``cupool_pattern_verify``
:func:`spin`             keep a stream busy for ``ns`` nanoseconds ``cupool_spin_ns`` /
                                                                   ``cupool_spin_cycles``
:func:`gather`           copy ``(src, dst, nbytes)`` segments      ``cupool_gather``
                         inside one arena
=======================  ========================================  =========================

Each takes the device, device addresses and sizes (``int`` bytes), and a stream
(default: the device's default stream). The device's ``kind`` picks the
implementation: ``"cuda"`` launches the kernel on the stream; ``"emulated"`` enqueues
the NumPy twin as a host callback on the stream, after checking that the bytes lie in a
live reservation. So the work is ordered with the stream's copies on both, and, as for
copies, results are readable after the stream is synchronised. :func:`verify_pattern`
synchronises the stream itself, since it returns a number.

On a GPU, small scratch arrays (the verify counters, the gather segment table) come from
CuPy's default memory pool, never from an allocator installed with
``cupy.cuda.set_allocator`` (such as a planned pool), and are allocated on the launch
stream so CuPy reuses them only after the kernel.

Only this package and :mod:`cupool.devices.cuda` import CuPy, and only lazily.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from cupool.devices.errors import DeviceError
from cupool.devices.memory import host_view
from cupool.devices.protocol import Device, Stream
from cupool.kernels import reference
from cupool.kernels.errors import (
    KernelArchitectureError,
    KernelArgumentError,
    KernelError,
    KernelToolchainError,
    SegmentOverlapError,
    SegmentRangeError,
)
from cupool.kernels.reference import MASK64, check_pattern_args, check_segments

__all__ = ["SPIN_CLOCKS", "KernelArchitectureError", "KernelArgumentError", "KernelError",
           "KernelToolchainError", "PatternCheck", "SegmentOverlapError", "SegmentRangeError",
           "check_segments", "fill_pattern", "gather", "spin", "verify_pattern"]

_BLOCK = 256           # threads per block; a multiple of 32, as the verify reduction needs
_MAX_BLOCKS = 4096     # grid cap: the kernels loop grid-stride beyond it
SPIN_CLOCKS = ("globaltimer", "cycles")
"""``spin`` clocks on a GPU: ``%globaltimer`` nanoseconds, or ``clock64`` cycles converted
with the GPU's nominal clock rate (see ``spin.cu`` for when each is right)."""


class PatternCheck(NamedTuple):
    """What :func:`verify_pattern` found: ``mismatches`` bytes differ from the pattern;
    ``first_mismatch`` is the smallest differing index from the checked address (bytes),
    or ``None`` when all match."""

    mismatches: int
    first_mismatch: int | None


# -- dispatch ------------------------------------------------------------------------------
def _stream(device: Device, stream: Stream | None) -> Stream:
    return device.default_stream if stream is None else stream


def _is_cuda(device: Device, operation: str) -> bool:
    kind = getattr(device, "kind", None)
    if kind not in ("cuda", "emulated"):
        raise KernelError(f"{operation}: device {device!r} has kind {kind!r}; kernels run on "
                          f"'cuda' and 'emulated' devices")
    return kind == "cuda"


def _check_address(operation: str, name: str, value: object) -> int:
    """An address, size or duration as an int in ``[0, 2**64)``."""
    return reference._check_u64(operation, name, value)


def _reservation(device: Device, operation: str, ptr: int, nbytes: int):
    """The live reservation of ``device`` holding ``[ptr, ptr + nbytes)`` (emulated only:
    a GPU cannot be asked cheaply, and a kernel there faults instead of corrupting the host)."""
    return device.reservation_containing(operation, ptr, nbytes)


def _emulate(device: Device, stream: Stream, operation: str, ptr: int, nbytes: int,
             work) -> None:
    """Enqueue ``work(view)`` on ``stream`` over the checked bytes ``[ptr, ptr + nbytes)``."""
    block = _reservation(device, operation, ptr, nbytes)

    def run(block=block) -> None:  # holding ``block`` keeps the emulated bytes addressable
        work(host_view(ptr, nbytes))

    run.__name__ = operation
    device.launch(stream, run)


def _launch(device: Device, stream: Stream, function: str, grid: int, args: tuple,
            block: int = _BLOCK, scratch=None) -> object:
    """Launch ``function`` on ``stream``; ``scratch(cupy)`` (optional) makes arrays on the
    stream first and returns ``(arrays, extra_args)``. Returns the scratch arrays."""
    from cupool.kernels.loader import get_function

    kernel = get_function(device, function)
    cupy = device.cupy
    try:
        with cupy.cuda.Device(device.device_id), stream.cupy_stream, \
                cupy.cuda.using_allocator(cupy.get_default_memory_pool().malloc):
            arrays, extra = scratch(cupy) if scratch is not None else (None, ())
            kernel((grid,), (block,), (*args, *extra))
    except (cupy.cuda.driver.CUDADriverError, cupy.cuda.runtime.CUDARuntimeError) as exc:
        raise DeviceError(f"launching {function} on {device.name!r}: {exc}") from exc
    return arrays


def _pattern_grid(nbytes: int, start: int) -> int:
    words = (start + nbytes - 1) // 8 - start // 8 + 1
    return max(1, min(_MAX_BLOCKS, -(-words // _BLOCK)))


# -- the four operations -----------------------------------------------------------------
def fill_pattern(device: Device, ptr: int, nbytes: int, *, seed: int, buffer_id: int,
                 iteration: int, start: int = 0, stream: Stream | None = None) -> None:
    """Enqueue: write pattern bytes ``[start, start + nbytes)`` of ``(seed, buffer_id,
    iteration)`` to device bytes ``[ptr, ptr + nbytes)``. All numbers are ints in
    ``[0, 2**64)``; ``nbytes == 0`` does nothing."""
    seed, buffer_id, iteration, start = check_pattern_args("fill_pattern", seed, buffer_id,
                                                           iteration, start)
    ptr = _check_address("fill_pattern", "ptr", ptr)
    nbytes = _check_address("fill_pattern", "nbytes", nbytes)
    stream = _stream(device, stream)
    if nbytes == 0:
        return
    if _is_cuda(device, "fill_pattern"):
        u64 = np.uint64
        _launch(device, stream, "cupool_pattern_fill", _pattern_grid(nbytes, start),
                (u64(ptr), u64(nbytes), u64(start), u64(seed), u64(buffer_id), u64(iteration)))
        return
    _emulate(device, stream, "fill_pattern", ptr, nbytes,
             lambda view: reference.fill(view, seed, buffer_id, iteration, start))


def verify_pattern(device: Device, ptr: int, nbytes: int, *, seed: int, buffer_id: int,
                   iteration: int, start: int = 0,
                   stream: Stream | None = None) -> PatternCheck:
    """Count the bytes of ``[ptr, ptr + nbytes)`` that differ from pattern bytes
    ``[start, start + nbytes)``. Enqueued on ``stream`` after earlier work, then waits for
    the stream (blocking), so the answer reflects everything enqueued before the call."""
    seed, buffer_id, iteration, start = check_pattern_args("verify_pattern", seed, buffer_id,
                                                           iteration, start)
    ptr = _check_address("verify_pattern", "ptr", ptr)
    nbytes = _check_address("verify_pattern", "nbytes", nbytes)
    stream = _stream(device, stream)
    if nbytes == 0:
        return PatternCheck(0, None)
    if _is_cuda(device, "verify_pattern"):
        u64 = np.uint64

        def counters(cupy):
            result = cupy.array([0, MASK64], dtype=cupy.uint64)  # [mismatches, first]
            return result, (u64(result.data.ptr), u64(result.data.ptr + 8))

        result = _launch(device, stream, "cupool_pattern_verify", _pattern_grid(nbytes, start),
                         (u64(ptr), u64(nbytes), u64(start), u64(seed), u64(buffer_id),
                          u64(iteration)), scratch=counters)
        stream.synchronize()
        with device.cupy.cuda.Device(device.device_id):
            mismatches, first = (int(x) for x in result.get())
        return PatternCheck(mismatches, None if first == MASK64 else first)
    found: list[PatternCheck] = []
    done = threading.Event()

    def check(view: np.ndarray) -> None:
        found.append(PatternCheck(
            reference.count_mismatches(view, seed, buffer_id, iteration, start),
            reference.first_mismatch(view, seed, buffer_id, iteration, start)))
        done.set()

    _emulate(device, stream, "verify_pattern", ptr, nbytes, check)
    stream.synchronize()
    if not done.is_set():  # pragma: no cover - synchronize raised for an earlier failure
        raise KernelError("verify_pattern: the check did not run")
    return found[0]


def spin(device: Device, ns: int, *, stream: Stream | None = None,
         clock: str = "globaltimer") -> None:
    """Enqueue a wait of ``ns`` nanoseconds (an int in ``[0, 2**64)``) on ``stream``, to
    replay an op's duration. On a GPU it occupies one thread of one SM; ``clock`` picks
    ``%globaltimer`` (default) or ``clock64`` cycles (:data:`SPIN_CLOCKS`). The emulated
    device sleeps, then busy-waits, in the stream's thread."""
    ns = _check_address("spin", "ns", ns)
    if clock not in SPIN_CLOCKS:
        raise KernelArgumentError("spin", "clock", clock, f"must be one of {SPIN_CLOCKS}")
    stream = _stream(device, stream)
    if not _is_cuda(device, "spin"):
        def spin_ns() -> None:
            reference.spin(ns)

        device.launch(stream, spin_ns)
        return
    if clock == "globaltimer":
        _launch(device, stream, "cupool_spin_ns", 1, (np.uint64(ns), np.uint64(0)), block=1)
        return
    cupy = device.cupy
    rate_khz = cupy.cuda.runtime.deviceGetAttribute(cupy.cuda.runtime.cudaDevAttrClockRate,
                                                    device.device_id)
    cycles = min(MASK64, ns * int(rate_khz) // 1_000_000)
    _launch(device, stream, "cupool_spin_cycles", 1, (np.uint64(cycles), np.uint64(0)),
            block=1)


def gather(device: Device, arena_ptr: int, arena_bytes: int, segments: Iterable[object], *,
           stream: Stream | None = None) -> None:
    """Enqueue: copy each segment ``(src_offset, dst_offset, nbytes)`` (offsets in bytes from
    ``arena_ptr``) inside the arena ``[arena_ptr, arena_ptr + arena_bytes)``, all as if at
    once. Checked first by :func:`check_segments`: segments lie in the arena and no
    destination overlaps another destination or any source (raises
    :class:`SegmentRangeError` / :class:`SegmentOverlapError`, nothing enqueued)."""
    arena_ptr = _check_address("gather", "arena_ptr", arena_ptr)
    arena_bytes = _check_address("gather", "arena_bytes", arena_bytes)
    checked = [segment for segment in check_segments(segments, arena_bytes) if segment[2]]
    stream = _stream(device, stream)
    if not checked:
        return
    if not _is_cuda(device, "gather"):
        _emulate(device, stream, "gather", arena_ptr, arena_bytes,
                 lambda view: reference.gather(view, checked))
        return
    table = np.ascontiguousarray(np.array(checked, dtype=np.uint64).T)  # rows: src, dst, n
    count = len(checked)

    def upload(cupy):  # kernel parameters after the arena: src, dst, nbytes rows, count
        on_device = cupy.asarray(table)
        rows = tuple(np.uint64(on_device.data.ptr + row * count * 8) for row in range(3))
        return on_device, (*rows, np.uint64(count))

    _launch(device, stream, "cupool_gather", min(count, _MAX_BLOCKS), (np.uint64(arena_ptr),),
            scratch=upload)
