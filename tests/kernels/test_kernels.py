"""Kernels: the NumPy twins against hand-computed values and against each other, the
wrappers on the emulated device, and every ``.cu`` file through nvcc for sm_80 and sm_90.

No GPU here: the kernels themselves run in ``tests/gpu/test_kernels_gpu.py``.
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from cupool.devices import open_device
from cupool.devices.errors import InvalidPointerError
from cupool.kernels import (
    KernelArgumentError,
    KernelError,
    SegmentOverlapError,
    SegmentRangeError,
    check_segments,
    fill_pattern,
    gather,
    spin,
    verify_pattern,
)
from cupool.kernels import reference as ref
from cupool.kernels.errors import KernelArchitectureError, KernelToolchainError
from cupool.kernels.loader import (
    CUPY_NAMES,
    KERNEL_DIR,
    SOURCES,
    read_source,
    source_function_names,
)

M = (1 << 64) - 1


# -- the pattern, computed independently with plain Python ints -------------------------------
def _splitmix_finaliser(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % (1 << 64)
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % (1 << 64)
    return z ^ (z >> 31)


def _by_hand(seed: int, buffer_id: int, iteration: int, index: int) -> int:
    k = _splitmix_finaliser(_splitmix_finaliser(_splitmix_finaliser(seed) ^ buffer_id)
                            ^ iteration)
    word = _splitmix_finaliser((k + (index // 8 + 1) * 0x9E3779B97F4A7C15) % (1 << 64))
    return word.to_bytes(8, "little")[index % 8]


def test_mix_matches_published_splitmix64_output():
    # splitmix64 seeded with 0 yields 0xE220A8397B1DCDAF first (Vigna's reference code)
    assert ref.mix(0x9E3779B97F4A7C15) == 0xE220A8397B1DCDAF


@pytest.mark.parametrize(("seed", "buffer_id", "iteration"),
                         [(0, 0, 0), (1, 2, 3), (M, M, M), (12345, 17, 1 << 40)])
def test_first_16_bytes_match_hand_computation(seed, buffer_id, iteration):
    expected = [_by_hand(seed, buffer_id, iteration, i) for i in range(16)]
    assert ref.pattern(seed, buffer_id, iteration, 16).tolist() == expected


def test_known_bytes_are_pinned():
    # Frozen values: a change of the pattern must be deliberate (GPU results compare to it).
    assert ref.pattern(1, 2, 3, 8).tolist() == [232, 173, 31, 59, 187, 93, 78, 174]


@pytest.mark.parametrize("start", [0, 1, 7, 8, 13, (1 << 64) - 24])
def test_start_selects_the_same_bytes_as_the_whole_buffer(start):
    expected = [_by_hand(5, 6, 7, start + i) for i in range(21)]
    assert ref.pattern(5, 6, 7, 21, start=start).tolist() == expected


def test_chunked_fill_agrees_with_single_words_across_chunk_boundaries():
    nbytes = 8 * (1 << 20) + 37  # crosses the 8 MiB chunk boundary at an odd start
    view = ref.pattern(9, 1, 2, nbytes, start=3)
    for i in (0, 1, 8 * (1 << 20) - 4, 8 * (1 << 20) - 3, nbytes - 1):
        assert view[i] == _by_hand(9, 1, 2, 3 + i)


def test_pattern_depends_on_each_number():
    base = ref.pattern(1, 2, 3, 64)
    for other in (ref.pattern(2, 2, 3, 64), ref.pattern(1, 3, 3, 64), ref.pattern(1, 2, 4, 64)):
        assert np.count_nonzero(base != other) > 48


def test_fill_64_mib_in_eight_vectorised_passes(monkeypatch):
    """The twin makes its pattern in NumPy passes of 8 MiB (bounded temporaries), never
    byte by byte: filling 64 MiB asks for pattern words 8 times, 2**20 words each.
    Its speed depends on the machine and is measured by ``bench/replay.py``
    (``pattern_fill_gbps``)."""
    words, asked = ref._words, []

    def counted_words(stream_key, first_word, count):
        asked.append(count)
        return words(stream_key, first_word, count)

    monkeypatch.setattr(ref, "_words", counted_words)
    view = np.empty(64 << 20, dtype=np.uint8)
    ref.fill(view, 7, 8, 9)
    assert asked == [1 << 20] * 8
    monkeypatch.undo()
    assert ref.count_mismatches(view, 7, 8, 9) == 0
    assert ref.first_mismatch(view, 7, 8, 9) is None


# -- verify ----------------------------------------------------------------------------------
def test_fill_then_verify_and_flipped_bytes_are_counted_exactly():
    rng = np.random.default_rng(0)
    view = np.empty(100_003, dtype=np.uint8)
    ref.fill(view, 3, 4, 5, start=11)
    assert ref.count_mismatches(view, 3, 4, 5, start=11) == 0
    assert ref.first_mismatch(view, 3, 4, 5, start=11) is None
    assert ref.count_mismatches(view, 3, 4, 6, start=11) > 99_000
    for k in (1, 2, 17, 1000):
        broken = view.copy()
        where = rng.choice(view.size, size=k, replace=False)
        broken[where] ^= rng.integers(1, 256, size=k, dtype=np.uint8)
        assert ref.count_mismatches(broken, 3, 4, 5, start=11) == k
        assert ref.first_mismatch(broken, 3, 4, 5, start=11) == int(where.min())


@pytest.mark.parametrize(("call", "field", "value"), [
    (lambda: ref.pattern(-1, 0, 0, 4), "seed", -1),
    (lambda: ref.pattern(0, 1 << 64, 0, 4), "buffer_id", 1 << 64),
    (lambda: ref.pattern(0, 0, True, 4), "iteration", True),
    (lambda: ref.pattern(0, 0, 0, 4, start=1.5), "start", 1.5),
    (lambda: ref.fill(np.zeros(4, np.int32), 0, 0, 0), "view", "ndarray(dtype=int32, shape=(4,))"),
])
def test_bad_pattern_arguments_are_typed_and_quoted(call, field, value):
    with pytest.raises(KernelArgumentError) as caught:
        call()
    assert caught.value.field == field
    assert repr(value) in str(caught.value)
    again = pickle.loads(pickle.dumps(caught.value))
    assert str(again) == str(caught.value)


# -- gather ----------------------------------------------------------------------------------
def test_compaction_then_inverse_round_trips():
    arena = np.arange(256, dtype=np.uint32).astype(np.uint8) ^ 0x5A
    original = arena.copy()
    # three live blocks at 64, 128, 200 move to the front; the inverse moves them back
    moves = [(64, 0, 16), (128, 16, 24), (200, 40, 8)]
    gather_rows = check_segments(moves, arena.size)
    assert gather_rows == moves
    ref.gather(arena, moves)
    assert arena[:16].tolist() == original[64:80].tolist()
    assert arena[16:40].tolist() == original[128:152].tolist()
    assert arena[40:48].tolist() == original[200:208].tolist()
    ref.gather(arena, [(dst, src, n) for src, dst, n in moves])
    for src, _, n in moves:
        assert arena[src:src + n].tolist() == original[src:src + n].tolist()


def test_sources_may_overlap_and_empty_segments_are_ignored():
    arena = np.arange(64, dtype=np.uint8)
    ref.gather(arena, [(0, 32, 8), (4, 48, 8), (10, 10, 0)])
    assert arena[32:40].tolist() == list(range(8))
    assert arena[48:56].tolist() == list(range(4, 12))


@pytest.mark.parametrize(("segments", "index", "destination", "other", "role", "other_range"), [
    ([(0, 8, 16)], 0, (8, 24), 0, "source", (0, 16)),            # moves onto itself
    ([(0, 32, 8), (16, 36, 8)], 1, (36, 44), 0, "destination", (32, 40)),
    ([(40, 0, 8), (4, 20, 2)], 0, (0, 8), 1, "source", (4, 6)),   # dst covers a later source
    ([(0, 20, 4), (100, 10, 30)], 0, (20, 24), 1, "destination", (10, 40)),
])
def test_overlapping_segments_are_refused_quoting_the_numbers(segments, index, destination,
                                                              other, role, other_range):
    arena = np.zeros(256, dtype=np.uint8)
    with pytest.raises(SegmentOverlapError) as caught:
        ref.gather(arena, segments)
    error = caught.value
    assert (error.index, error.destination, error.other_index, error.other_role,
            error.other_range) == (index, destination, other, role, other_range)
    assert f"[{destination[0]}, {destination[1]})" in str(error)
    assert str(pickle.loads(pickle.dumps(error))) == str(error)
    assert not arena.any()  # nothing was copied


def test_out_of_arena_segment_is_refused():
    with pytest.raises(SegmentRangeError, match=r"segment 1 \(src_offset=60, dst_offset=0, "
                                                r"nbytes=8\).*\[0, 64\)"):
        check_segments([(0, 8, 8), (60, 0, 8)], 64)
    with pytest.raises(KernelArgumentError, match="segments\\[0\\]"):
        check_segments([(1, 2)], 64)


def test_overlap_check_agrees_with_a_naive_pairwise_check():
    rng = np.random.default_rng(1)

    def naive_ok(segments):
        ranges = [(s, s + n, d, d + n) for s, d, n in segments if n]
        for i, (_, _, d0, d1) in enumerate(ranges):
            for j, (s0, s1, e0, e1) in enumerate(ranges):
                if d0 < s1 and s0 < d1:
                    return False
                if i != j and d0 < e1 and e0 < d1:
                    return False
        return True

    for _ in range(400):
        segments = [tuple(int(x) for x in (rng.integers(0, 100), rng.integers(0, 100),
                                           rng.integers(0, 12))) for _ in range(rng.integers(1, 5))]
        try:
            check_segments(segments, 128)
            accepted = True
        except SegmentOverlapError:
            accepted = False
        assert accepted == naive_ok(segments), segments


# -- spin ------------------------------------------------------------------------------------
def test_spin_waits_at_least_the_time_asked():
    for ns in (0, 50_000, 3_000_000):
        begin = time.perf_counter_ns()
        ref.spin(ns)
        assert time.perf_counter_ns() - begin >= ns


# -- the wrappers on the emulated device --------------------------------------------------------
@pytest.fixture
def emulated():
    with open_device("emulated", capacity=1 << 26) as device:
        yield device


def test_wrappers_on_emulated_device_follow_stream_order(emulated):
    memory = emulated.reserve(1 << 16)
    stream = emulated.create_stream("kernels")
    fill_pattern(emulated, memory.ptr + 5, 4000, seed=1, buffer_id=2, iteration=3, start=5,
                 stream=stream)
    spin(emulated, 100_000, stream=stream)
    assert verify_pattern(emulated, memory.ptr + 5, 4000, seed=1, buffer_id=2, iteration=3,
                          start=5, stream=stream) == (0, None)
    view = emulated.device_array(memory)
    view[105] ^= 0xFF
    view[2000] ^= 0x01
    check = verify_pattern(emulated, memory.ptr + 5, 4000, seed=1, buffer_id=2, iteration=3,
                           start=5)
    assert check == (2, 100)
    before = view.copy()
    gather(emulated, memory.ptr, memory.size, [(5, 8192, 4000)], stream=stream)
    stream.synchronize()
    assert (view[8192:12192] == before[5:4005]).all()
    assert verify_pattern(emulated, memory.ptr + 8192, 4000, seed=1, buffer_id=2,
                          iteration=3, start=5).mismatches == 2
    emulated.release(memory)


def test_wrappers_check_ranges_before_enqueueing(emulated):
    memory = emulated.reserve(4096)
    with pytest.raises(InvalidPointerError, match=r"runs past the end .* by 1 bytes"):
        fill_pattern(emulated, memory.ptr, 4097, seed=0, buffer_id=0, iteration=0)
    with pytest.raises(SegmentOverlapError):
        gather(emulated, memory.ptr, 4096, [(0, 100, 200)])
    with pytest.raises(KernelArgumentError, match="clock"):
        spin(emulated, 10, clock="sundial")
    with pytest.raises(KernelArgumentError, match=r"ptr=-1"):
        verify_pattern(emulated, -1, 8, seed=0, buffer_id=0, iteration=0)
    emulated.release(memory)


def test_unknown_device_kind_is_refused():
    class Other:
        kind = "tpu"
        default_stream = None

    with pytest.raises(KernelError, match="'tpu'"):
        spin(Other(), 1)


def test_toolchain_and_architecture_errors_say_what_to_do():
    error = KernelToolchainError("NVRTC", "cupy-cuda13x[ctk]", "libnvrtc.so.13: not found")
    assert "install cupy-cuda13x[ctk]" in str(error)
    assert str(pickle.loads(pickle.dumps(error))) == str(error)
    error = KernelArchitectureError("cuda:0", "61", "needs compute capability >= 7.0")
    assert "compute capability 61" in str(error)
    assert str(pickle.loads(pickle.dumps(error))) == str(error)


# -- the CUDA sources ---------------------------------------------------------------------------
def test_loader_lists_exactly_the_extern_c_kernels_of_each_file():
    on_disk = sorted(path.name for path in KERNEL_DIR.glob("*.cu"))
    assert sorted(SOURCES) == on_disk
    for file, names in SOURCES.items():
        assert source_function_names(read_source(file)) == names, file


def _nvcc() -> str | None:
    candidates = [shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"]
    if os.environ.get("CUDA_PATH"):
        candidates.append(str(Path(os.environ["CUDA_PATH"]) / "bin" / "nvcc"))
    return next((c for c in candidates if c and Path(c).is_file()), None)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("file", sorted(SOURCES))
def test_every_source_compiles_with_nvcc(file, arch, tmp_path):
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found on PATH, at /usr/local/cuda/bin/nvcc or under $CUDA_PATH")
    output = tmp_path / f"{file}.{arch}.ptx"
    result = subprocess.run([nvcc, "-ptx", f"-arch={arch}", "-std=c++14", "-Werror",
                             "all-warnings", str(KERNEL_DIR / file), "-o", str(output)],
                            capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    ptx = output.read_text()
    for name in SOURCES[file]:
        assert f".entry {name}(" in ptx


def test_every_cupy_name_the_kernels_use_exists():
    cupy = pytest.importorskip("cupy")
    import importlib

    for dotted in CUPY_NAMES:
        parts = dotted.split(".")[1:]
        thing = cupy
        for depth, part in enumerate(parts):
            if not hasattr(thing, part):  # submodules may need an import
                importlib.import_module(".".join(["cupy", *parts[:depth + 1]]))
            thing = getattr(thing, part)
        assert thing is not None, dotted
