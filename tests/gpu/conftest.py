"""Fixtures of the GPU suite: every test here is marked ``gpu`` and skipped, with the
probe's reason, where no usable GPU is present (the probe ``open_device("auto")`` uses).

Run the suite on a GPU machine with ``python -m pytest -q tests/gpu``; set
``CUPOOL_SOAK_MINUTES`` (e.g. ``180``) to add the long soak of ``test_stress_gpu.py``.
"""

from __future__ import annotations

import os

import pytest

from cupool.devices import probe_cuda

SOAK_ENV = "CUPOOL_SOAK_MINUTES"


@pytest.fixture
def gpu_usable():
    """Skip unless a GPU is usable through CuPy."""
    usable, reason = probe_cuda()
    if not usable:
        pytest.skip(f"needs a usable GPU: {reason}")


@pytest.fixture
def cuda_device(gpu_usable):
    """GPU 0 as a cupool device, with every kernel compiled (as ``cupool stress`` opens
    it); closed after the test."""
    from cupool.app.stress import open_stress_device

    device = open_stress_device("cuda")
    try:
        yield device
    finally:
        device.close()


@pytest.fixture
def soak_minutes(gpu_usable) -> float:
    """Minutes of the opt-in soak (``CUPOOL_SOAK_MINUTES``); skip when unset."""
    text = os.environ.get(SOAK_ENV)
    if not text:
        pytest.skip(f"opt-in soak: set {SOAK_ENV}=MINUTES (e.g. 180) to run it")
    try:
        minutes = float(text)
    except ValueError:
        pytest.fail(f"{SOAK_ENV} (={text!r}) must be a number of minutes")
    if not minutes > 0:
        pytest.fail(f"{SOAK_ENV} (={text!r}) must be > 0")
    return minutes
