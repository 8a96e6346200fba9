"""The diagnosis of ``bench/always_plan.py``'s misses: which cells it takes, and how it
splits the waits of a simulation by whether the link was busy."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.bench_modules import load_bench

swap_diagnose = load_bench("swap_diagnose")
always_plan_diagnose = load_bench("always_plan_diagnose")


def test_waits_split_by_whether_a_copy_in_ran_recomputes_left_out():
    # op 1 waits from 2 to 10: a recompute runs 4-6; a copy in runs 3-5 and another 8-12
    # (the union of the copies: 3-5 and 8-12); op 2 waits from 11 to 14 (busy until 12)
    sim = SimpleNamespace(
        op_times=((0.0, 0.0, 2.0), (2.0, 10.0, 11.0), (11.0, 14.0, 15.0)),
        copies=((7, "h2d", 8, 3.0, 3.0, 5.0), (8, "d2h", 8, 0.0, 0.0, 9.0),
                (9, "h2d", 8, 8.0, 8.0, 12.0), (9, "h2d", 8, 9.0, 9.0, 9.5)),
        recomputes=((3, 1, 4.0, 6.0),))
    split = swap_diagnose.stall_split(sim)
    # waits: 2-4 (busy 3-4: 1), 6-10 (busy 8-10: 2), 11-14 (busy 11-12: 1)
    assert split["stall_link_busy_us"] == pytest.approx(4.0)
    assert split["stall_link_idle_us"] == pytest.approx(5.0)
    assert (split["h2d_copies"], split["d2h_copies"]) == (3, 1)


def _row(shape, budget, link, bound, valid=True, target_met=True):
    return {"shape": shape, "budget": budget, "link": link, "bound": bound,
            "valid": valid, "target_met": target_met}


def test_the_diagnosis_takes_misses_and_cells_without_a_validated_plan():
    rows = [_row("near-budget-0", "90%", "gen4", 0.02, target_met=False),
            _row("near-budget-0", "90%", "gen5", 0.0),
            _row("near-budget-0", "50%", "gen5", None, valid=False, target_met=None),
            _row("recurrent", "ws", "55GBps 50us", 0.9, valid=False, target_met=False)]
    picked = always_plan_diagnose.misses({"rows": rows})
    assert [(r["shape"], r["link"]) for r in picked] == [("near-budget-0", "gen4"),
                                                         ("recurrent", "55GBps 50us")]
    assert always_plan_diagnose.misses({"rows": rows}, only=["recurrent"]) == [rows[3]]


def test_a_diagnosed_cell_accounts_for_its_stalls():
    cell = always_plan_diagnose.diagnose(_row("persistent-heavy", "90%", "gen5", 0.0))
    assert cell["status"] == "feasible" and cell["budget_bytes"] > 0
    assert cell["fraction"] == pytest.approx(0.9, abs=1e-6)
    # every stall is a wait before an op (op 0's too: the link busy or idle) or the tail
    assert cell["stall_us"] > 0
    assert (cell["stall_link_busy_us"] + cell["stall_link_idle_us"] + cell["tail_us"]
            ) == pytest.approx(cell["stall_us"], rel=1e-9)
    assert cell["h2d_copies"] > 0 and cell["overhead"] >= cell["bound"]


def test_a_row_of_another_benchmark_is_refused_by_name():
    with pytest.raises(SystemExit, match=r"budget '0\.7' is not a cell"):
        always_plan_diagnose.diagnose(_row("near-budget-0", "0.7", "gen4", 0.02))
    with pytest.raises(SystemExit, match=r"not a cell of bench/always_plan\.py"):
        always_plan_diagnose.diagnose(_row("resnet50", "70%", "gen4", 0.02))
