"""The pool's arenas with exact pointer arithmetic and no device: best fit with split and
merge, and a plan made executable (slots served, overdue blocks, retirement)."""

from __future__ import annotations

from cupool.allocator.arena import BestFitArena, LiveBlock, PlannedArena
from cupool.allocator.recording import RecordedIteration, to_trace
from cupool.core.vocabulary import Placement, Plan, SolveStatus


class Segment:
    def __init__(self, ptr, size):
        self.ptr, self.size = ptr, size


def test_best_fit_arena_splits_and_merges_exactly():
    arena = BestFitArena("t")
    arena.add_segment(Segment(1000, 100))
    arena.add_segment(Segment(1100, 20))  # adjacent in address, but another segment
    a = arena.alloc(30)
    b = arena.alloc(20)
    assert (a, b) == (1000, 1100)  # b: the 20-byte segment is the best fit
    c = arena.alloc(60)
    assert c == 1030
    assert arena.alloc(11) is None
    assert arena.live_blocks() == [LiveBlock("t", 1000, 30, -1), LiveBlock("t", 1030, 60, -1),
                                   LiveBlock("t", 1100, 20, -1)]
    arena.free(a)
    arena.free(c)
    arena.check()
    assert arena.stats().largest_free_range == 100
    assert [s.ptr for s in arena.take_empty_segments()] == [1000]
    arena.free(b)
    assert [s.ptr for s in arena.take_empty_segments()] == [1100]
    arena.check()


def planned_arena(released: list) -> PlannedArena:
    """Three 512-byte slots; slot 2 is planned over slot 0's bytes (slot 0 ends at 2)::

        allocation:  0    1    2
        slot 0:     [=====)            offset 0
        slot 1:          [=====)       offset 512
        slot 2:               [==)     offset 0
    """
    recording = RecordedIteration((512, 512, 512), (2, 3, 3), (False, False, False))
    trace = to_trace(recording, "three")
    plan = Plan("three", trace.digest(), "hand", SolveStatus.OPTIMAL, 1024, 1024,
                (Placement(0, 0), Placement(1, 512), Placement(2, 0)))
    return PlannedArena(plan, trace, recording, Segment(4096, 1024), released.append)


def test_planned_arena_serves_each_slot_at_its_offset():
    arena = planned_arena([])
    tickets = []
    for k in range(3):
        if k == 2:
            arena.free(0)  # slot 0's block is freed before allocation 2, as planned
        tickets.append(arena.serve(512))
    assert [(t.ptr, t.size, t.slot) for t in tickets] == [(4096, 512, 0), (4608, 512, 1),
                                                           (4096, 512, 2)]
    assert arena.cursor == 3 and arena.live == [0, 1, 1] and not arena.overdue
    assert arena.serve(512) is None  # a fourth allocation: off the plan
    assert arena.live_blocks() == [LiveBlock("planned", 4608, 512, 1),
                                   LiveBlock("planned", 4096, 512, 2)]


def test_a_block_kept_past_its_end_blocks_the_slots_over_its_bytes():
    arena = planned_arena([])
    first = arena.serve(512)
    arena.serve(512)
    assert arena.serve(512) is None  # slot 0 still live at allocation 2: a collision
    assert arena.overdue == {0} and arena.blocked == [1, 0, 1]
    assert arena.slots[2].serves == 0 and arena.slots[2].ticket is arena.open_slots[2].ticket
    assert arena.serve(1024) is None  # the wrong size is never served either
    assert not arena.free(first.slot)  # the overdue block: the slots open again
    assert arena.blocked == [0, 0, 0] and arena.slots[2].serves == 512
    arena.end_iteration()  # slot 1 is still live: overdue from now on
    assert arena.overdue == {1} and arena.live_count() == 1
    arena.begin_iteration()
    assert arena.serve(512).slot == 0
    assert arena.serve(512) is None  # slot 1's bytes are still held by last iteration's block


def test_a_retired_arena_is_released_with_its_last_block():
    arena = planned_arena([])
    arena.serve(512)
    arena.serve(512)
    assert not arena.retire()  # two live blocks
    assert arena.retired and arena.remaining == {0, 1}
    assert not arena.free(1)
    assert arena.free(0)  # the last one: the caller releases the memory now
    arena.close_tickets()
    assert arena.slots == [] and arena.live_count() == 0
