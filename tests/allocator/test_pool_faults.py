"""Device faults under a PlannedPool (the fault matrix's pool cells): a refused reservation
while recording, at the plan's install, while re-planning and off the plan, and device
memory taken by another process between iterations. After each: the error is typed and
says what it was for, no device byte is left once the pool is closed, no array's bytes
change, the pool never reserves above its capacity, and the next iterations are served."""

from __future__ import annotations

import pytest

pytest.importorskip("cupy")

from tests.bench_modules import load_bench

clients = load_bench("fault_clients")
POINTS = {point.label: point for point in clients.pool_points()}


@pytest.mark.parametrize("label", list(POINTS))
def test_every_pool_cell_meets_the_targets(label):
    point = POINTS[label]
    cell = clients.pool_cell(point)
    assert clients.good(cell), cell
    assert cell.outcome.startswith("continued"), cell  # the pool always serves again
    if point.nth and point.times == 3 and "no reservation" not in label:
        # refused for good: raised, or (a plan's arena) logged, naming what it was for
        assert "fallback region" in cell.error or "not installed" in cell.error, cell
    if point.occupy == "before" and point.iteration == 0:
        assert "cannot reserve 8192 bytes" in cell.error, cell


def test_a_refusal_the_retry_absorbs_raises_nothing():
    cell = clients.pool_cell(POINTS["recording: a fallback reservation refused once "
                                    "(retried)"])
    assert cell.error is None and cell.outcome == "continued", cell
    assert cell.detail.startswith("mode planned; plans 1, plan failures 0")


def test_a_planned_iteration_reserves_nothing_so_memory_taken_before_it_is_harmless():
    for label in ("planned: first malloc (from the arena: no reservation)",
                  "between iterations: memory taken before a planned iteration"):
        cell = clients.pool_cell(POINTS[label])
        assert cell.error is None and cell.later_errors == [], cell
        assert "planned iterations 3" in cell.detail, cell
    assert clients.pool_cell(POINTS["planned: first malloc (from the arena: no "
                                    "reservation)"]).outcome == "continued (not hit)"


def test_an_arena_that_cannot_be_reserved_leaves_the_pool_unplanned_until_replan():
    cell = clients.pool_cell(POINTS["install: the planned arena's reservation refused"])
    assert cell.error.startswith("logged: PlannedPool 'pool': plan of 32768 bytes not "
                                 "installed"), cell
    # one iteration served from the fallback region, then replan(): recorded, planned
    assert cell.detail == "mode planned; plans 1, plan failures 1, planned iterations 2"
