"""Plan format v2: swapping plans round-trip; static plans stay v1; malformed v2 is named."""

from __future__ import annotations

import json

import pytest

from cupool.core.vocabulary import Placement, Plan, SolveStatus
from cupool.errors import PlanFormatError
from cupool.io import load_plan, save_plan
from cupool.io.plan_json import parse_plan, plan_to_document
from tests.swap_cases import six_op_recompute_plan, six_op_swap_plan, six_op_trace


def test_swap_plan_round_trips(tmp_path):
    trace = six_op_trace()
    for plan in (six_op_swap_plan(trace), six_op_recompute_plan(trace)):
        path = tmp_path / "plan.json"
        save_plan(plan, path)
        document = json.loads(path.read_text())
        assert document["version"] == 2
        assert document["budget_bytes"] == plan.capacity_bytes
        assert "capacity_bytes" not in document
        again = load_plan(path)
        assert again == plan
        assert again.residencies == plan.residencies and again.actions == plan.actions


def test_action_entries_are_documented_shapes():
    document = plan_to_document(six_op_swap_plan(six_op_trace()))
    assert document["residencies"][1] == {"id": 1, "start": 0, "end": 1, "offset": 8}
    assert document["actions"] == [{"kind": "swap_out", "id": 1, "after_op": 0},
                                   {"kind": "swap_in", "id": 1, "trigger_op": 3, "due_op": 4}]
    recompute = plan_to_document(six_op_recompute_plan(six_op_trace()))["actions"]
    assert recompute == [{"kind": "recompute", "id": 1, "before_op": 4}]


def test_static_plan_stays_version_1():
    plan = Plan("t", "abc", "greedy", SolveStatus.OPTIMAL, 8, 8, (Placement(0, 0),), 0.5, None)
    document = plan_to_document(plan)
    assert document["version"] == 1
    assert "residencies" not in document and "actions" not in document
    assert "capacity_bytes" in document
    assert parse_plan(document) == plan


def _v2(**changes):
    document = plan_to_document(six_op_swap_plan(six_op_trace()))
    document.update(changes)
    return document


@pytest.mark.parametrize(("changes", "expected"), [
    ({"version": 3}, "version (=3)"),
    ({"budget_bytes": None}, "'budget_bytes' (=None)"),
    ({"capacity_bytes": 7}, "'capacity_bytes' (=7) differs from 'budget_bytes' (=24)"),
    ({"residencies": {}}, "'residencies' must be a list"),
    ({"residencies": [{"id": 1, "start": 3, "end": 2, "offset": 0}]},
     "residencies[0] (buffer 1): end (=2) must be >= start (=3)"),
    ({"residencies": [{"id": 1, "start": 0, "end": 2, "offset": -4}]},
     "residencies[0]: field 'offset' (=-4)"),
    ({"residencies": [7]}, "residencies[0]: residency must be an object"),
    ({"actions": [{"kind": "teleport", "id": 1}]}, "actions[0]: field 'kind' (='teleport')"),
    ({"actions": [{"kind": "swap_out", "id": 1}]},
     "actions[0]: swap_out field 'after_op' (=None)"),
    ({"actions": [{"kind": "swap_in", "id": 1, "trigger_op": 4, "due_op": 2}]},
     "due_op (=2) must be >= trigger_op (=4)"),
    ({"actions": [{"kind": "recompute", "id": True, "before_op": 2}]},
     "recompute field 'id' (=True)"),
])
def test_malformed_v2_is_rejected_with_item_and_value(changes, expected):
    with pytest.raises(PlanFormatError) as info:
        parse_plan(_v2(**changes), "p.json")
    assert expected in str(info.value)
    assert str(info.value).startswith("p.json: ")


def test_v1_reader_still_rejects_missing_placements():
    document = plan_to_document(
        Plan("t", "abc", "greedy", SolveStatus.OPTIMAL, 8, 8, (Placement(0, 0),)))
    del document["placements"]
    with pytest.raises(PlanFormatError, match="'placements' must be a list"):
        parse_plan(document)
