"""bench/chains.py's own numbers: revolve's formula, the two-level optimum's limits, and a
cell planned and checked end to end."""

from __future__ import annotations

import pytest

from tests.bench_modules import load_bench


@pytest.fixture(scope="module")
def chains():
    return load_bench("chains")


def test_revolve_formula_matches_the_published_counts(chains):
    assert [chains.revolve_optimum(48, c) for c in (13, 8, 5, 3)] == [81, 89, 116, 170]
    # units: k + 2 units never need more steps than k slots; 2 units halve re-running all
    assert all(chains.units_optimum(47, k + 2) <= chains.revolve_optimum(48, k + 1)
               for k in range(0, 12))
    assert chains.units_optimum(47, 2) == 576 < chains.revolve_optimum(48, 1) == 1128


def test_two_level_optimum_is_one_level_when_copies_cost_too_much(chains):
    length, slots, step = 24, 2, 3.0
    steps = min(chains.revolve_optimum(length, slots + 1),  # revolve's or in units
                chains.units_optimum(length - 1, slots + 2))
    one_level = (steps - (length - 1)) * step
    assert chains.two_level_optimum_us(length, slots, step, 1e9) == one_level
    # free copies: every state on the host, nothing recomputed
    assert chains.two_level_optimum_us(length, slots, step, 0.0) == 0.0


def test_a_cell_meets_the_optimum(chains):
    row = chains.cell(16, 1 << 20, 100.0, 2, True)
    # revolve's 18 with 2 slots beside the state advanced; 13 when the bytes of those
    # slots and the two states of a step are one memory of 4 states
    assert row["revolve_optimum_recomputes"] == 18
    assert row["revolve_recomputes"] == row["units_optimum_recomputes"] == 13
    assert row["bound_recomputes"] <= row["revolve_recomputes"]
    assert row["auto_vs_two_level"] <= 1.10
