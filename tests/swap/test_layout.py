"""The plan's layout as the planned pool serves it: residencies disjoint at every scale,
validated, and a plan of the same size installed on the same arena."""

from __future__ import annotations

from cupool.allocator.pool import PlannedPool
from cupool.check import validate_plan
from cupool.devices import open_device
from cupool.swap.layout import pool_layout
from tests.swap_cases import resnet_capuchin_plan

SIZE_SCALE = 4096


_planned = resnet_capuchin_plan


def test_pool_layout_keeps_residencies_disjoint_and_validates():
    _trace, plan, planned = _planned()
    layout = pool_layout(plan, planned, SIZE_SCALE)
    assert len(layout.order) == len(plan.residencies) == len(layout.pool_trace.buffers)
    assert all(size % 512 == 0 for size in layout.block_sizes.values())
    assert validate_plan(layout.pool_trace, layout.pool_plan).valid  # the oracle
    # at full size the map only rounds each stretch between boundaries up to 512 bytes:
    # offsets keep their order, and the arena grows by less than 512 per stretch
    full = pool_layout(plan, planned, 1)
    by_offset = sorted(plan.residencies, key=lambda r: r.offset)
    scaled = [full.offsets[(r.buffer_id, r.start)] for r in by_offset]
    assert scaled == sorted(scaled)
    stretches = len({r.offset for r in plan.residencies}) * 2
    assert plan.arena_bytes <= full.pool_plan.arena_bytes < plan.arena_bytes + 512 * stretches


def test_install_plan_keeps_the_arena_for_a_plan_of_the_same_size():
    _trace, plan, planned = _planned()
    layout = pool_layout(plan, planned, SIZE_SCALE)
    with open_device("emulated", capacity="64MiB") as device:
        pool = PlannedPool(device)
        pool.install_plan(layout.pool_plan, layout.pool_trace)
        first = pool.arena_ptr
        pool.install_plan(layout.pool_plan, layout.pool_trace)
        assert pool.arena_ptr == first and pool.mode == "planned"
        assert pool.memory_stats()["device_reservations"] == 1
        pool.close()
