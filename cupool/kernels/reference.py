"""NumPy twins of the CUDA kernels: the same results, on host memory.

The emulated device runs these where the CUDA backend launches ``pattern.cu``,
``spin.cu`` and ``gather.cu``; the tests hold them against hand-computed values, and
the GPU tests hold the kernels against them. Semantics, in the kernels' words:

- **pattern**: pattern byte ``i`` of ``(seed, buffer_id, iteration)`` is byte ``i % 8``
  (little-endian) of ``word(i // 8)``, where, modulo 2**64::

      mix(z)  = splitmix64 finaliser (xor-shift 30, * 0xBF58476D1CE4E5B9,
                                      xor-shift 27, * 0x94D049BB133111EB, xor-shift 31)
      key     = mix(mix(mix(seed) ^ buffer_id) ^ iteration)
      word(w) = mix(key + (w + 1) * 0x9E3779B97F4A7C15)

  Each byte depends only on its index and the three numbers, so any byte can be checked
  alone, and a different iteration or buffer gives different bytes. ``start`` selects
  pattern bytes ``[start, start + n)`` for a view of ``n`` bytes (a piece of a buffer).
  ``seed``, ``buffer_id``, ``iteration`` and ``start`` are ints in ``[0, 2**64)``.
- **gather**: copies segments ``(src_offset, dst_offset, nbytes)`` inside one arena as if
  all at once; :func:`check_segments` states and enforces the overlap rule.
- **spin**: waits ``ns`` nanoseconds of wall time.

Views are 1-D C-contiguous ``uint8`` NumPy arrays (what
:func:`cupool.devices.memory.host_view` returns).
"""

from __future__ import annotations

import operator
import time
from collections.abc import Iterable

import numpy as np

from cupool.kernels.errors import KernelArgumentError, SegmentOverlapError, SegmentRangeError

__all__ = ["MASK64", "check_segments", "count_mismatches", "fill", "first_mismatch", "gather",
           "key", "mix", "pattern", "spin"]

MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MUL1 = 0xBF58476D1CE4E5B9
_MUL2 = 0x94D049BB133111EB
_CHUNK_WORDS = 1 << 20  # 8 MiB of pattern per NumPy pass: bounded temporaries, cache-friendly


def mix(z: int) -> int:
    """The splitmix64 finaliser on one Python int (modulo 2**64)."""
    z &= MASK64
    z = ((z ^ (z >> 30)) * _MUL1) & MASK64
    z = ((z ^ (z >> 27)) * _MUL2) & MASK64
    return z ^ (z >> 31)


def key(seed: int, buffer_id: int, iteration: int) -> int:
    """The per-(seed, buffer, iteration) key every pattern word is derived from."""
    return mix(mix(mix(seed) ^ buffer_id) ^ iteration)


def _check_u64(operation: str, name: str, value: object) -> int:
    if isinstance(value, bool):
        raise KernelArgumentError(operation, name, value, "must be an int, not a bool")
    try:
        number = operator.index(value)
    except TypeError:
        raise KernelArgumentError(operation, name, value, "must be an int") from None
    if not 0 <= number <= MASK64:
        raise KernelArgumentError(operation, name, number, "must be in [0, 2**64)")
    return number


def check_pattern_args(operation: str, seed: object, buffer_id: object, iteration: object,
                       start: object) -> tuple[int, int, int, int]:
    """The four pattern numbers as ints in ``[0, 2**64)``, else :class:`KernelArgumentError`."""
    return (_check_u64(operation, "seed", seed), _check_u64(operation, "buffer_id", buffer_id),
            _check_u64(operation, "iteration", iteration), _check_u64(operation, "start", start))


def _check_view(operation: str, view: object, *, writable: bool) -> np.ndarray:
    if not isinstance(view, np.ndarray) or view.dtype != np.uint8 or view.ndim != 1 \
            or not view.flags.c_contiguous:
        raise KernelArgumentError(operation, "view", type(view).__name__ if not isinstance(
            view, np.ndarray) else f"ndarray(dtype={view.dtype}, shape={view.shape})",
            "must be a 1-D C-contiguous uint8 ndarray")
    if writable and not view.flags.writeable:
        raise KernelArgumentError(operation, "view", "read-only ndarray", "must be writable")
    return view


def _mix_array(z: np.ndarray) -> np.ndarray:
    """``mix`` over a uint64 array, in place (wrapping uint64 arithmetic)."""
    z ^= z >> np.uint64(30)
    z *= np.uint64(_MUL1)
    z ^= z >> np.uint64(27)
    z *= np.uint64(_MUL2)
    z ^= z >> np.uint64(31)
    return z


def _words(stream_key: int, first_word: int, count: int) -> np.ndarray:
    """``word(first_word) .. word(first_word + count - 1)`` as a uint64 array."""
    z = np.arange(count, dtype=np.uint64)
    z += np.uint64((first_word + 1) & MASK64)  # w + 1, wrapping like the kernel
    z *= np.uint64(_GOLDEN)
    z += np.uint64(stream_key)
    return _mix_array(z)


def _chunks(stream_key: int, start: int, nbytes: int) -> Iterable[tuple[int, np.ndarray]]:
    """``(offset, bytes)`` pieces of pattern bytes ``[start, start + nbytes)``; offsets are
    relative to ``start``."""
    done = 0
    while done < nbytes:
        position = start + done
        first_word = position // 8
        skip = position - first_word * 8
        take = min(nbytes - done, _CHUNK_WORDS * 8 - skip)
        words = _words(stream_key, first_word, (skip + take + 7) // 8)
        little_endian = words.astype("<u8", copy=False).view(np.uint8)
        yield done, little_endian[skip:skip + take]
        done += take


def pattern(seed: int, buffer_id: int, iteration: int, nbytes: int, start: int = 0) -> np.ndarray:
    """Pattern bytes ``[start, start + nbytes)`` of ``(seed, buffer_id, iteration)`` as a new
    ``uint8`` array."""
    out = np.empty(_check_u64("pattern", "nbytes", nbytes), dtype=np.uint8)
    fill(out, seed, buffer_id, iteration, start)
    return out


def fill(view: np.ndarray, seed: int, buffer_id: int, iteration: int, start: int = 0) -> None:
    """Write pattern bytes ``[start, start + len(view))`` into ``view`` (what
    ``cupool_pattern_fill`` does on a GPU)."""
    view = _check_view("fill", view, writable=True)
    seed, buffer_id, iteration, start = check_pattern_args("fill", seed, buffer_id, iteration,
                                                           start)
    stream_key = key(seed, buffer_id, iteration)
    for offset, piece in _chunks(stream_key, start, view.size):
        view[offset:offset + piece.size] = piece


def _mismatch_masks(view: np.ndarray, seed: int, buffer_id: int, iteration: int,
                    start: int, operation: str) -> Iterable[tuple[int, np.ndarray]]:
    view = _check_view(operation, view, writable=False)
    seed, buffer_id, iteration, start = check_pattern_args(operation, seed, buffer_id,
                                                           iteration, start)
    stream_key = key(seed, buffer_id, iteration)
    for offset, piece in _chunks(stream_key, start, view.size):
        yield offset, view[offset:offset + piece.size] != piece


def count_mismatches(view: np.ndarray, seed: int, buffer_id: int, iteration: int,
                     start: int = 0) -> int:
    """How many bytes of ``view`` differ from pattern bytes ``[start, start + len(view))``
    (what ``cupool_pattern_verify`` adds to its counter)."""
    return sum(int(np.count_nonzero(mask)) for _, mask in
               _mismatch_masks(view, seed, buffer_id, iteration, start, "count_mismatches"))


def first_mismatch(view: np.ndarray, seed: int, buffer_id: int, iteration: int,
                   start: int = 0) -> int | None:
    """Index into ``view`` of the first byte that differs from the pattern, or ``None``."""
    for offset, mask in _mismatch_masks(view, seed, buffer_id, iteration, start,
                                        "first_mismatch"):
        hits = np.flatnonzero(mask)
        if hits.size:
            return offset + int(hits[0])
    return None


def spin(ns: int) -> None:
    """Wait ``ns`` nanoseconds (``>= 0``) of wall time on the host: sleep for most of it,
    busy-wait the last 200 µs, since ``time.sleep`` overshoots by up to a scheduler tick."""
    ns = _check_u64("spin", "ns", ns)
    deadline = time.perf_counter_ns() + ns
    remaining = ns
    while remaining > 200_000:
        time.sleep((remaining - 200_000) / 1e9)
        remaining = deadline - time.perf_counter_ns()
    while time.perf_counter_ns() < deadline:
        pass


Segment = tuple[int, int, int]


def check_segments(segments: Iterable[object], arena_bytes: int) -> list[Segment]:
    """Gather segments as ``(src_offset, dst_offset, nbytes)`` int triples, checked.

    The rule, the same for the kernel and this twin: every segment lies inside
    ``[0, arena_bytes)``, and no destination range overlaps another destination or any
    source range, its own included (sources may overlap each other; empty segments
    overlap nothing). Then a concurrent copy equals a sequential one in any order.
    Raises :class:`SegmentRangeError` or :class:`SegmentOverlapError` quoting the numbers.
    Sort-and-sweep, ``O(n log n)``.
    """
    arena_bytes = _check_u64("gather", "arena_bytes", arena_bytes)
    checked: list[Segment] = []
    for index, segment in enumerate(segments):
        try:
            src, dst, nbytes = (operator.index(field) for field in segment)
        except (TypeError, ValueError):
            raise KernelArgumentError("gather", f"segments[{index}]", segment,
                                      "must be an (src_offset, dst_offset, nbytes) int "
                                      "triple") from None
        if min(src, dst, nbytes) < 0 or src + nbytes > arena_bytes \
                or dst + nbytes > arena_bytes:
            raise SegmentRangeError(index, (src, dst, nbytes), arena_bytes)
        checked.append((src, dst, nbytes))
    # (start, end, is_destination, index); any overlapping pair is caught when the
    # later-starting member is visited, against the furthest-reaching earlier range.
    ranges = sorted((offset, offset + nbytes, role, index)
                    for index, (src, dst, nbytes) in enumerate(checked) if nbytes
                    for offset, role in ((src, False), (dst, True)))
    reach = {False: (-1, -1, -1), True: (-1, -1, -1)}  # is_destination -> (end, start, index)
    for start, end, is_destination, index in ranges:
        for other_is_destination in (True, False) if is_destination else (True,):
            other_end, other_start, other_index = reach[other_is_destination]
            if other_end <= start:
                continue
            if is_destination:
                raise SegmentOverlapError(index, (start, end), other_index,
                                          "destination" if other_is_destination else "source",
                                          (other_start, other_end))
            raise SegmentOverlapError(other_index, (other_start, other_end), index, "source",
                                      (start, end))
        if end > reach[is_destination][0]:
            reach[is_destination] = (end, start, index)
    return checked


def gather(arena_view: np.ndarray, segments: Iterable[object]) -> None:
    """Copy each segment ``(src_offset, dst_offset, nbytes)`` inside ``arena_view`` (what
    ``cupool_gather`` does on a GPU), after :func:`check_segments` on the arena's size."""
    arena_view = _check_view("gather", arena_view, writable=True)
    for src, dst, nbytes in check_segments(segments, arena_view.size):
        arena_view[dst:dst + nbytes] = arena_view[src:src + nbytes]
