"""Capture options are checked when they are made, without PyTorch."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cupool.capture import MODEL_NAMES, MODES, OPTIMIZER_NAMES, CaptureOptions
from cupool.errors import InputError

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_are_one_full_size_training_step_under_fake_tensors():
    options = CaptureOptions()
    assert (options.mode, options.batch, options.small, options.amp, options.optimizer,
            options.module_tracker, options.fake, options.seed, options.cost_model,
            options.lifted_from_start) == ("train", 1, False, False, None, True, True, 0, None,
                                           False)
    assert MODES == ("train", "infer")


@pytest.mark.parametrize(("fields", "message"), [
    ({"mode": "eval"}, r"^mode \(='eval'\) must be one of train, infer$"),
    ({"batch": 0}, r"^batch \(=0\) must be an integer >= 1$"),
    ({"batch": True}, r"^batch \(=True\) must be an integer >= 1$"),
    ({"batch": 2.0}, r"^batch \(=2.0\) must be an integer >= 1$"),
    ({"optimizer": "lamb"}, r"^optimizer \(='lamb'\) must be one of sgd, adamw$"),
])
def test_a_bad_value_is_refused_with_the_value(fields, message):
    with pytest.raises(InputError, match=message):
        CaptureOptions(**fields)


def test_options_are_frozen_and_replace_checks_again():
    options = CaptureOptions(mode="infer", batch=4, small=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.batch = 8
    assert dataclasses.replace(options, batch=8).batch == 8
    with pytest.raises(InputError, match=r"batch \(=-1\)"):
        dataclasses.replace(options, batch=-1)


def test_making_options_does_not_import_torch():
    code = ("import sys; from cupool.capture import CaptureOptions; "
            "CaptureOptions(mode='infer', optimizer='sgd'); "
            "print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.stdout.strip() == "False"


def test_the_name_lists_match_the_registries():
    pytest.importorskip("torch")
    from cupool.capture.models import MODELS, OPTIMIZERS

    assert tuple(MODELS) == MODEL_NAMES
    assert tuple(OPTIMIZERS) == OPTIMIZER_NAMES
