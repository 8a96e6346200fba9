"""The simulator's C extensions (``cupool.sim._timeline``: the flat replay;
``cupool.sim._columns``: attributes read as columns) run where built, else Python does the
same: ``replay_loop`` runs a test module once with each (the compiled run skipped when the
extensions are not built)."""

from __future__ import annotations

from unittest import mock

import pytest

from cupool.sim import replay_input, timeline


@pytest.fixture(scope="module", params=["compiled", "python"])
def replay_loop(request):
    """What :func:`cupool.sim.simulate` runs on: ``"compiled"`` or ``"python"`` (both
    extensions switched off, as where they are not built)."""
    if request.param == "compiled":
        if not timeline.COMPILED_AVAILABLE or replay_input._columns is None:
            pytest.skip("the C extensions of cupool.sim are not built")
        yield request.param
    else:
        with mock.patch.object(timeline, "_timeline", None), \
                mock.patch.object(replay_input, "_columns", None):
            yield request.param
