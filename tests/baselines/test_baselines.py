"""The CuPy and PyTorch allocator models: named scenarios with exact numbers from the
frameworks' documented rules, a Hypothesis property over random malloc/free sequences,
and every bundled trace run through the models against its lower bound."""

from __future__ import annotations

import itertools
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cupool.baselines import POLICIES, CupyMemoryPool, TorchCachingAllocator, allocate_trace
from cupool.baselines.torch_caching import LARGE_MIN_SPLIT, SMALL_MIN_SPLIT, should_split
from cupool.errors import InputError
from cupool.io import load_trace
from tests.conftest import TRACES

KIB = 1024
MIB = 1024 * KIB


# --- CuPy: cupy/cuda/memory.pyx ---------------------------------------------------------

def test_cupy_malloc_1_rounds_to_512_and_cudamallocs_512():
    pool = CupyMemoryPool()
    pool.malloc(1)
    assert pool.stats() == {"reserved_bytes": 512, "peak_reserved_bytes": 512,
                            "allocated_bytes": 512, "peak_allocated_bytes": 512,
                            "num_device_mallocs": 1}


def test_cupy_cudamallocs_exactly_the_rounded_size_when_nothing_fits():
    pool = CupyMemoryPool()
    pool.malloc(1000)
    pool.malloc(1500)
    assert (pool.reserved_bytes, pool.num_device_mallocs) == (1024 + 1536, 2)


def test_cupy_freed_1024_chunk_serves_two_512_requests_by_splitting():
    pool = CupyMemoryPool()
    chunk = pool.malloc(1024)
    pool.free(chunk)
    assert pool.malloc(512) == chunk
    assert pool.malloc(300) == chunk + 512
    assert (pool.reserved_bytes, pool.allocated_bytes, pool.num_device_mallocs) == (1024, 1024, 1)


def test_cupy_two_frees_merge_back_into_the_whole_block():
    pool = CupyMemoryPool()
    block = pool.malloc(2048)
    pool.free(block)
    first, second = pool.malloc(512), pool.malloc(512)  # [512 | 512 | 1024 free]
    pool.free(first)
    pool.free(second)  # merges with the free 1024 after it, then the free 512 before it
    assert pool.snapshot() == [{"address": block, "size": 2048,
                                "blocks": [(block, 2048, False)]}]
    assert pool.malloc(2048) == block
    assert pool.num_device_mallocs == 1


def test_cupy_best_fit_takes_the_smallest_fitting_chunk_then_the_lowest_address():
    pool = CupyMemoryPool()
    big, small_low, small_high = pool.malloc(1536), pool.malloc(1024), pool.malloc(1024)
    for address in (big, small_high, small_low):
        pool.free(address)
    assert pool.malloc(1000) == small_low
    assert pool.malloc(1024) == small_high
    assert pool.malloc(1024) == big  # split: 512 B left over in the 1536 chunk
    assert pool.malloc(512) == big + 1024
    assert pool.num_device_mallocs == 3


def test_cupy_chunks_of_different_cudamalloc_blocks_never_merge():
    pool = CupyMemoryPool()
    first, second = pool.malloc(512), pool.malloc(512)
    pool.free(first)
    pool.free(second)
    pool.malloc(1024)
    assert (pool.num_device_mallocs, pool.reserved_bytes, pool.peak_allocated_bytes) == (3, 2048,
                                                                                        1024)


# --- PyTorch: c10/cuda/CUDACachingAllocator.cpp -----------------------------------------

def test_torch_malloc_1_reserves_a_2mib_small_segment():
    allocator = TorchCachingAllocator()
    allocator.malloc(1)
    assert allocator.stats() == {"reserved_bytes": 2 * MIB, "peak_reserved_bytes": 2 * MIB,
                                 "allocated_bytes": 512, "peak_allocated_bytes": 512,
                                 "num_device_mallocs": 1}


def test_torch_small_requests_are_packed_into_one_2mib_segment():
    allocator = TorchCachingAllocator()
    first = allocator.malloc(1)
    assert allocator.malloc(600) == first + 512
    assert allocator.malloc(MIB) == first + 512 + 1024  # 1 MiB is still "small"
    assert (allocator.reserved_bytes, allocator.num_device_mallocs) == (2 * MIB, 1)


@pytest.mark.parametrize(("request_bytes", "reserved"), [
    (MIB + 1, 20 * MIB),           # just above kSmallSize: large pool, kLargeBuffer
    (5 * MIB, 20 * MIB),
    (10 * MIB - 512, 20 * MIB),    # still below kMinLargeAlloc
    (10 * MIB, 10 * MIB),          # kMinLargeAlloc: rounded to 2 MiB
    (30 * MIB, 30 * MIB),
    (31 * MIB, 32 * MIB),
    (30 * MIB + 1, 32 * MIB),
])
def test_torch_segment_size_of_a_first_request(request_bytes, reserved):
    allocator = TorchCachingAllocator()
    allocator.malloc(request_bytes)
    assert allocator.reserved_bytes == reserved


def test_torch_two_5mib_requests_share_one_20mib_segment():
    allocator = TorchCachingAllocator()
    first = allocator.malloc(5 * MIB)
    assert allocator.malloc(5 * MIB) == first + 5 * MIB
    assert (allocator.reserved_bytes, allocator.allocated_bytes) == (20 * MIB, 10 * MIB)


def test_torch_large_remainder_of_1mib_is_not_split():
    allocator = TorchCachingAllocator()
    block = allocator.malloc(11 * MIB)  # 12 MiB segment, 1 MiB left: not > kSmallSize
    assert allocator.block_size(block) == 12 * MIB
    assert allocator.allocated_bytes == 12 * MIB
    allocator.malloc(512 * KIB)  # small pool: a new 2 MiB segment, not the 1 MiB tail
    assert allocator.reserved_bytes == 14 * MIB


def test_torch_large_remainder_above_1mib_is_split():
    allocator = TorchCachingAllocator()
    block = allocator.malloc(11 * MIB - 512)  # 1 MiB + 512 B left over
    assert allocator.block_size(block) == 11 * MIB - 512
    assert allocator.malloc(MIB + 512) == block + 11 * MIB - 512
    assert allocator.reserved_bytes == 12 * MIB


@pytest.mark.parametrize("is_small", [True, False])
def test_torch_free_sets_split_exactly_when_should_split_says(is_small):
    min_split = SMALL_MIN_SPLIT if is_small else LARGE_MIN_SPLIT
    for remaining in range(512, 4 * MIB, 512):
        assert should_split(remaining, is_small) == (remaining >= min_split), remaining


def test_torch_cached_20mib_block_serves_19_5mib_whole():
    allocator = TorchCachingAllocator()
    allocator.free(allocator.malloc(5 * MIB))  # the 20 MiB segment merges back whole
    block = allocator.malloc(19 * MIB + 512 * KIB)
    assert allocator.block_size(block) == 20 * MIB
    assert (allocator.reserved_bytes, allocator.num_device_mallocs) == (20 * MIB, 1)


def test_torch_small_and_large_pools_do_not_share_segments():
    allocator = TorchCachingAllocator()
    allocator.free(allocator.malloc(5 * MIB))
    allocator.malloc(1)
    assert (allocator.reserved_bytes, allocator.num_device_mallocs) == (22 * MIB, 2)


def test_torch_frees_merge_and_the_whole_segment_is_reused():
    allocator = TorchCachingAllocator()
    first = allocator.malloc(5 * MIB)
    second = allocator.malloc(5 * MIB)
    allocator.free(second)
    allocator.free(first)
    assert allocator.malloc(20 * MIB) == first
    assert allocator.num_device_mallocs == 1


def test_torch_best_fit_by_size_then_address():
    allocator = TorchCachingAllocator()
    big = allocator.malloc(12 * MIB)
    low = allocator.malloc(10 * MIB)
    high = allocator.malloc(10 * MIB)
    for address in (big, high, low):
        allocator.free(address)
    assert allocator.malloc(10 * MIB) == low
    assert allocator.malloc(9 * MIB) == high  # 1 MiB left: not split, the block stays 10 MiB
    assert allocator.allocated_bytes == 20 * MIB
    assert allocator.malloc(10 * MIB) == big  # 2 MiB left: split
    assert allocator.malloc(2 * MIB) == big + 10 * MIB


# --- errors ---------------------------------------------------------------------------

@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("size", [0, -5])
def test_size_must_be_positive(policy, size):
    with pytest.raises(InputError, match=rf"size \(={size}\) must be an integer > 0"):
        POLICIES[policy]().malloc(size)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_double_free_and_unknown_handle_are_typed_errors(policy):
    allocator = POLICIES[policy]()
    address = allocator.malloc(100)
    allocator.free(address)
    with pytest.raises(InputError, match=rf"free\(0x{address:x}\): double free"):
        allocator.free(address)
    with pytest.raises(InputError, match=r"unknown handle: none of the 0 live blocks") as info:
        allocator.free(address + 512)
    assert str(pickle.loads(pickle.dumps(info.value))) == str(info.value)


def test_unknown_policy_is_named():
    with pytest.raises(InputError, match=r"unknown policy 'tlsf'; known: cupy, torch"):
        allocate_trace(load_trace(TRACES[0]), "tlsf")


# --- property: random malloc/free sequences -------------------------------------------

sizes = st.one_of(st.integers(1, 4 * KIB), st.integers(1, 3 * MIB), st.integers(1, 40 * MIB))
steps = st.lists(st.tuples(st.booleans(), sizes, st.integers(0, 10**6)), max_size=60)


def check_model(allocator, live: dict[int, int]) -> None:
    """Live requests never overlap, and the segments are tiled by merged blocks."""
    spans = sorted((address, address + size) for address, size in live.items())
    assert all(end <= next_start for (_, end), (next_start, _) in itertools.pairwise(spans))
    assert allocator.reserved_bytes >= allocator.allocated_bytes
    assert allocator.allocated_bytes == sum(allocator.block_size(a) for a in live)
    reserved, allocated = 0, set()
    for segment in allocator.snapshot():
        cursor, previous_free = segment["address"], False
        for address, size, in_use in segment["blocks"]:
            assert address == cursor and size > 0
            assert in_use or not previous_free  # two free neighbours would have merged
            cursor, previous_free = address + size, not in_use
            if in_use:
                allocated.add(address)
        assert cursor == segment["address"] + segment["size"]
        reserved += segment["size"]
    assert allocated == set(live)
    assert reserved == allocator.reserved_bytes == allocator.peak_reserved_bytes


@pytest.mark.parametrize("policy", sorted(POLICIES))
@settings(max_examples=60, deadline=None)
@given(steps=steps)
def test_random_sequences_keep_blocks_disjoint_and_reserved_above_allocated(policy, steps):
    allocator = POLICIES[policy]()
    live: dict[int, int] = {}
    for is_malloc, size, pick in steps:
        if is_malloc or not live:
            address = allocator.malloc(size)
            assert address not in live and allocator.block_size(address) >= size
            live[address] = size
        else:
            address = sorted(live)[pick % len(live)]
            allocator.free(address)
            del live[address]
        check_model(allocator, live)


# --- running traces through the models -----------------------------------------------------------

def test_a_trace_frees_before_allocating_at_the_same_op(tiny_trace_path):
    trace = load_trace(tiny_trace_path)  # b0 persistent 8 B; b1 [0, 2) 16 B; b2 [2, 4) 16 B
    cupy = allocate_trace(trace, "cupy")
    assert cupy["reserved_bytes_per_op"] == [1024] * 4  # b2 reuses b1's 512 B chunk
    assert (cupy["num_device_mallocs"], cupy["lower_bound_bytes"]) == (2, 24)
    torch = allocate_trace(trace, "torch")
    assert torch["reserved_bytes_per_op"] == [2 * MIB] * 4
    assert torch["allocated_bytes_per_op"] == [1024] * 4
    assert torch["ratio"] == 2 * MIB / 24


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name.split(".")[0])
def test_running_a_trace_never_beats_its_lower_bound(path, policy):
    trace = load_trace(path)
    allocator = POLICIES[policy]()
    result = allocate_trace(trace, allocator)
    assert result["peak_reserved_bytes"] >= result["peak_allocated_bytes"]
    assert result["lower_bound_bytes"] == trace.lower_bound_bytes()
    assert result["peak_allocated_bytes"] >= result["lower_bound_bytes"]
    curve = result["reserved_bytes_per_op"]
    assert len(curve) == trace.num_ops and curve == sorted(curve)
    assert curve[-1] == result["peak_reserved_bytes"]
    assert max(result["allocated_bytes_per_op"]) == result["peak_allocated_bytes"]
    assert allocator.allocated_bytes == 0  # every buffer was freed at the end
