"""The shared free-range allocator: named scenarios with exact offsets, its typed errors,
and a Hypothesis property against a byte-by-byte reference."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cupool.core.free_ranges import (
    BEST_FIT,
    FIRST_FIT,
    DoubleFreeError,
    FreeRangeArgumentError,
    FreeRangeError,
    FreeRanges,
    FreeRangeStats,
    Piece,
    UnknownOffsetError,
)


def free_list(ranges: FreeRanges) -> list[tuple[int, int]]:
    return [(piece.start, piece.end) for piece in ranges.free_ranges()]


def test_the_module_docstring_example():
    ranges = FreeRanges()
    ranges.add_region(0, 16)
    ranges.add_region(16, 8)
    assert ranges.allocate(6) == 16 and free_list(ranges) == [(0, 16), (22, 24)]
    assert ranges.allocate(2) == 22 and free_list(ranges) == [(0, 16)]
    assert ranges.allocate(4) == 0 and free_list(ranges) == [(4, 16)]
    assert ranges.free(16) == 6
    assert free_list(ranges) == [(4, 16), (16, 22)]  # touching, but two regions
    ranges.check()
    assert ranges.stats() == FreeRangeStats(24, 6, 18, 2, 2, 2, 12)


def test_best_fit_ties_go_to_the_lowest_address_whatever_the_free_order():
    ranges = FreeRanges()
    ranges.add_region(0, 100)
    blocks = [ranges.allocate(10) for _ in range(9)]  # 0, 10, ..., 80; free [90, 100)
    ranges.free(blocks[6])  # [60, 70) freed first
    ranges.free(blocks[2])  # [20, 30) freed later, lower address
    assert ranges.allocate(10) == 20  # three 10-byte ranges: the lowest wins
    assert ranges.allocate(4) == 60  # two left, [60, 70) and [90, 100)
    assert ranges.allocate(11) is None


def test_best_fit_takes_the_smallest_range_first_fit_the_lowest():
    def layout(fit):
        ranges = FreeRanges(fit=fit)
        ranges.add_region(0, 64)
        a, _, c, _ = (ranges.allocate(size) for size in (16, 8, 4, 36))
        ranges.free(a)  # free [0, 16)
        ranges.free(c)  # free [24, 28)
        return ranges, ranges.allocate(4)

    best, at = layout(BEST_FIT)
    assert at == 24 and free_list(best) == [(0, 16)]
    first, at = layout(FIRST_FIT)
    assert at == 0 and free_list(first) == [(4, 16), (24, 28)]


def test_free_merges_both_neighbours_inside_a_region_only():
    ranges = FreeRanges()
    ranges.add_region(0, 30)
    ranges.add_region(30, 10)  # touches the first region
    a, b, c = ranges.allocate(10), ranges.allocate(10), ranges.allocate(10)
    d = ranges.allocate(10)
    assert (a, b, c, d) == (30, 0, 10, 20)  # 10 bytes: the second region fits exactly
    ranges.free(b)
    ranges.free(d)
    assert free_list(ranges) == [(0, 10), (20, 30)]
    assert ranges.free(c) == 10
    assert free_list(ranges) == [(0, 30)]  # merged left and right
    ranges.free(a)
    assert free_list(ranges) == [(0, 30), (30, 40)]  # never across the boundary
    assert ranges.region_is_free(0) and ranges.region_is_free(30)
    ranges.check()


def test_alignment_rounds_every_block_and_keeps_offsets_aligned_from_the_base():
    ranges = FreeRanges(alignment=256)
    ranges.add_region(1000, 1000)  # a region that is not itself aligned, nor its size
    assert ranges.aligned(1) == 256 and ranges.aligned(256) == 256 and ranges.aligned(257) == 512
    assert ranges.allocate(1) == 1000 and ranges.block_size(1000) == 256
    assert ranges.allocate(300) == 1256 and ranges.block_size(1256) == 512
    assert ranges.allocate(200) is None  # it takes 256 bytes; 232 are left: [1768, 2000)
    assert free_list(ranges) == [(1768, 2000)] and ranges.allocated_bytes == 768
    assert ranges.free(1256) == 512


def test_min_split_hands_out_the_whole_range_when_the_rest_would_be_small():
    ranges = FreeRanges(min_split=8)
    ranges.add_region(0, 20)
    assert ranges.allocate(13) == 0 and ranges.block_size(0) == 20  # 7 < 8 stays with it
    assert free_list(ranges) == [] and ranges.free(0) == 20
    assert ranges.allocate(12) == 0 and free_list(ranges) == [(12, 20)]  # 8 are split off


def test_grow_makes_a_heap_that_grows_from_the_free_range_at_its_top():
    heap = FreeRanges()
    heap.add_region(0, 0)
    assert heap.allocate(4) is None
    assert heap.allocate(4, grow=0) == 0 and heap.allocate(6, grow=0) == 4
    assert heap.regions() == [Piece(0, 10, False)]
    heap.free(4)  # the top 6 bytes are free: the next growth starts there
    assert heap.allocate(8, grow=0) == 4 and heap.regions() == [Piece(0, 12, False)]
    heap.free(0)
    assert heap.allocate(3, grow=0) == 0  # a free range holds it: best fit, no growth
    assert heap.regions() == [Piece(0, 12, False)] and free_list(heap) == [(3, 4)]
    heap.add_region(20, 4)
    with pytest.raises(FreeRangeError, match=r"allocate\(size=20, grow=0\): region \[0, 32\) "
                                             r"would overlap the region at 20"):
        heap.allocate(20, grow=0)
    with pytest.raises(FreeRangeError, match=r"allocate\(base=7\): no region starts there"):
        heap.allocate(40, grow=7)
    heap.check()


def test_an_empty_region_grows_from_its_own_base_not_from_the_region_below():
    ranges = FreeRanges()
    ranges.add_region(0, 8)  # free [0, 8) ends where the empty region starts
    ranges.add_region(8, 0)
    assert ranges.allocate(12, grow=8) == 8
    assert free_list(ranges) == [(0, 8)] and ranges.regions()[1] == Piece(8, 20, False)


def test_regions_are_removed_only_when_free():
    ranges = FreeRanges()
    ranges.add_region(100, 50)
    block = ranges.allocate(10)
    assert not ranges.region_is_free(100)
    with pytest.raises(FreeRangeError, match=r"region \[100, 150\) still holds 1 live blocks"):
        ranges.remove_region(100)
    ranges.free(block)
    assert ranges.remove_region(100) == 50 and ranges.regions() == []
    assert ranges.allocate(1) is None
    with pytest.raises(FreeRangeError, match=r"remove_region\(base=100\): no region starts there"):
        ranges.remove_region(100)


@pytest.mark.parametrize("base,size", [(0, 11), (19, 1), (10, 10), (15, 2), (5, 30)])
def test_overlapping_regions_are_refused_with_the_region_they_hit(base, size):
    ranges = FreeRanges()
    ranges.add_region(10, 10)
    with pytest.raises(FreeRangeError, match=r"overlaps region \[10, 20\)"):
        ranges.add_region(base, size)
    ranges.add_region(20, 5)  # touching is fine
    ranges.add_region(0, 10)


def test_double_free_and_unknown_offsets_are_typed_errors_with_the_numbers():
    ranges = FreeRanges()
    ranges.add_region(0, 64)
    a, b = ranges.allocate(16), ranges.allocate(16)
    ranges.free(a)
    with pytest.raises(DoubleFreeError) as info:
        ranges.free(a)
    assert (info.value.offset, info.value.range_start, info.value.range_end) == (0, 0, 16)
    assert str(info.value) == ("free(offset=0): the bytes there are already free (free range "
                               "[0, 16); freed twice?)")
    with pytest.raises(UnknownOffsetError, match=r"offset 20: none of the 1 live blocks starts "
                                                 r"there \(it is inside the block \[16, 32\)\)"):
        ranges.free(b + 4)
    with pytest.raises(UnknownOffsetError, match=r"offset 64: .*\(it is in no region\)"):
        ranges.free(64)
    with pytest.raises(UnknownOffsetError, match=r"offset 0: .*inside the free range \[0, 16\)"):
        ranges.block_size(0)
    assert ranges.is_live(b) and not ranges.is_live(a) and ranges.live_count == 1
    ranges.check()  # the failed frees changed nothing


@pytest.mark.parametrize("call,message", [
    (lambda r: r.allocate(0), "allocate(size=0): size must be an int > 0"),
    (lambda r: r.allocate(2.0), "allocate(size=2.0): size must be an int > 0"),
    (lambda r: r.allocate(-1, grow=0), "allocate(size=-1): size must be an int > 0"),
    (lambda r: r.add_region(-4, 8), "add_region(base=-4): base must be an int >= 0"),
    (lambda r: r.add_region(0, True), "add_region(size=True): size must be an int >= 0"),
    (lambda r: FreeRanges(alignment=0), "FreeRanges(alignment=0): alignment must be an int >= 1"),
    (lambda r: FreeRanges(fit="worst"), "FreeRanges(fit='worst'): fit must be 'best' or 'first'"),
    (lambda r: FreeRanges(min_split=0), "FreeRanges(min_split=0): min_split must be an int >= 1"),
])
def test_bad_arguments_quote_the_value(call, message):
    ranges = FreeRanges()
    with pytest.raises(FreeRangeArgumentError) as info:
        call(ranges)
    assert str(info.value) == message


@pytest.mark.parametrize("error", [
    DoubleFreeError(7, 0, 16), UnknownOffsetError(9, 3, "it is in no region"),
    FreeRangeArgumentError("allocate", "size", 0, "must be an int > 0"),
    FreeRangeError("add_region(base=0, size=4): overlaps region [0, 8)"),
])
def test_errors_pickle_with_their_fields(error):
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error)
    assert vars(copy) == vars(error)


# -- the property: the same answers as a reference that looks at every byte -----------------
class ByteReference:
    """The rules of :class:`FreeRanges` computed from scratch over every byte, each call."""

    def __init__(self, alignment: int, fit: str, min_split: int) -> None:
        self.alignment, self.fit, self.min_split = alignment, fit, min_split
        self.regions: dict[int, int] = {}
        self.live: dict[int, int] = {}

    def runs(self) -> list[tuple[int, int]]:
        """Maximal runs of free bytes inside each region, by address."""
        taken = {byte for start, size in self.live.items() for byte in range(start, start + size)}
        runs = []
        for base, size in sorted(self.regions.items()):
            start = None
            for byte in range(base, base + size + 1):
                free = byte < base + size and byte not in taken
                if free and start is None:
                    start = byte
                elif not free and start is not None:
                    runs.append((start, byte))
                    start = None
        return runs

    def rounded(self, size: int) -> int:
        return -(-size // self.alignment) * self.alignment

    def take(self, start: int, end: int, size: int) -> int:
        self.live[start] = end - start if end - start - size < self.min_split else size
        return start

    def allocate(self, size: int) -> int | None:
        size = self.rounded(size)
        fits = [run for run in self.runs() if run[1] - run[0] >= size]
        if not fits:
            return None
        key = (lambda r: (r[1] - r[0], r[0])) if self.fit == BEST_FIT else (lambda r: r[0])
        start, end = min(fits, key=key)
        return self.take(start, end, size)

    def allocate_grow(self, base: int, size: int) -> int | None:
        """``allocate(size, grow=base)``; ``None`` where the growth would overlap the next
        region (an error expected)."""
        size = self.rounded(size)
        fits = [run for run in self.runs() if run[1] - run[0] >= size]
        if fits:
            return self.allocate(size)
        end = base + self.regions[base]
        start = next((s for s, e in self.runs() if e == end and s >= base), end)
        if any(base < other < start + size for other in self.regions):
            return None
        self.regions[base] = start + size - base
        self.live[start] = size
        return start

    def kind_of(self, offset: int) -> str:
        if offset in self.live:
            return "live"
        if any(s <= offset < e for s, e in self.runs()):
            return "free"
        return "unknown"


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([1, 4]), st.sampled_from([BEST_FIT, FIRST_FIT]), st.sampled_from([1, 6]),
       st.data())
def test_free_ranges_agree_with_the_byte_reference(alignment, fit, min_split, data):
    ranges = FreeRanges(alignment, fit, min_split)
    reference = ByteReference(alignment, fit, min_split)
    top, aligned_sizes, grown = 0, True, False
    for _ in range(data.draw(st.integers(1, 40), label="steps")):
        step = data.draw(st.sampled_from(["region", "alloc", "alloc", "free", "free", "grow",
                                          "remove", "bad free"]), label="step")
        if step == "region":
            base = top + data.draw(st.sampled_from([0, 0, 3]), label="gap")
            base += base in reference.regions  # an empty region already starts there
            size = data.draw(st.integers(0, 48), label="region size")
            ranges.add_region(base, size)
            reference.regions[base] = size
            top = base + size
            aligned_sizes = aligned_sizes and size % alignment == 0
        elif step == "alloc":
            size = data.draw(st.integers(1, 24), label="size")
            assert ranges.allocate(size) == reference.allocate(size)
        elif step == "free" and reference.live:
            offset = data.draw(st.sampled_from(sorted(reference.live)), label="block")
            assert ranges.free(offset) == reference.live.pop(offset)
        elif step == "grow" and reference.regions:
            base = data.draw(st.sampled_from(sorted(reference.regions)), label="region")
            size = data.draw(st.integers(1, 24), label="size")
            expected = reference.allocate_grow(base, size)
            grown = True
            if expected is None:
                with pytest.raises(FreeRangeError, match="would overlap"):
                    ranges.allocate(size, grow=base)
            else:
                assert ranges.allocate(size, grow=base) == expected
                top = max(top, base + reference.regions[base])
        elif step == "remove" and reference.regions:
            base = data.draw(st.sampled_from(sorted(reference.regions)), label="region")
            size = reference.regions[base]
            busy = any(base <= offset < base + size for offset in reference.live)
            assert ranges.region_is_free(base) is not busy
            if busy:
                with pytest.raises(FreeRangeError, match="still holds"):
                    ranges.remove_region(base)
            else:
                assert ranges.remove_region(base) == reference.regions.pop(base)
        elif step == "bad free":
            offset = data.draw(st.integers(0, top + 2), label="offset")
            kind = reference.kind_of(offset)
            if kind != "live":
                expected_error = DoubleFreeError if kind == "free" else UnknownOffsetError
                with pytest.raises(expected_error, match=f"offset[ =]{offset}"):
                    ranges.free(offset)
        assert free_list(ranges) == reference.runs()
        assert [(p.start, p.size) for p in ranges.live_blocks()] == sorted(reference.live.items())
        assert ranges.regions() == [Piece(base, base + size, False)
                                    for base, size in sorted(reference.regions.items())]
        checked = aligned_sizes or (min_split == 1 and not grown)
        for piece in ranges.live_blocks() if checked else ():
            base = max(b for b in reference.regions if b <= piece.start)
            assert (piece.start - base) % alignment == 0
        assert ranges.allocated_bytes == sum(reference.live.values())
        ranges.check()
