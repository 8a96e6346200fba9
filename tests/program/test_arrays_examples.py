"""The examples written once (``examples/mlp_arrays.py``, ``examples/decoder_arrays.py``): the
same step function run on NumPy arrays and under a session at 90%, 70% and 50% of its peak
through the array namespace gives bitwise the same parameters and losses, with the device's
high-water mark within the budget and every plan valid."""

from __future__ import annotations

import numpy as np
import pytest

import cupool
from cupool.check import validate_swap_plan
from tests.program_cases import example

STEPS = 3
SIZES = {
    "mlp_arrays": ({"features": 8, "hidden": 16, "layers": 3, "classes": 4},
                   {"batch": 32, "features": 8, "classes": 4}),
    "decoder_arrays": ({"vocab": 32, "context": 16, "width": 32, "layers": 1, "hidden": 128},
                       {"batch": 8, "context": 16, "vocab": 32}),
}


def _case(name: str):
    module = example(name)
    model, data = SIZES[name]
    return module, module.initial_parameters(**model), module.batches(STEPS, **data)


@pytest.fixture(scope="module", params=sorted(SIZES))
def reference(request):
    module, params, data = _case(request.param)
    return request.param, module.train_directly(np, params, data)


@pytest.mark.parametrize("budget", ["90%", "70%", "50%"])
def test_the_step_function_gives_the_same_parameters_with_and_without_cupool(reference,
                                                                            budget):
    name, (losses, expected) = reference
    module, params, data = _case(name)
    with cupool.Session(budget, device="emulated", measure_link=False,
                        measure_overhead=False) as session:
        got_losses, got = module.train(session, params, data)
        reports, planned = session.reports, session.planned
        names = [op.name for op in session.trace.ops]
    assert [r.mode for r in reports] == ["passive"] + ["planned"] * (STEPS - 1)
    assert all(0 < r.device_peak_bytes <= r.budget_bytes for r in reports)
    assert validate_swap_plan(planned.trace, planned.plan).valid
    assert got_losses == losses
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key].tobytes() == value.tobytes(), key
    assert all("@" in n and f"{name}.py:" in n for n in names[:-1])  # function@file:line
    assert losses[-1] < losses[0]
