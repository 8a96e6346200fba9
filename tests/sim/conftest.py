"""The flat replay runs compiled (``cupool.sim._timeline``) where built, else in Python:
``replay_loop`` runs a test module once with each (the compiled run skipped when the
extension is not built)."""

from __future__ import annotations

from unittest import mock

import pytest

from cupool.sim import timeline


@pytest.fixture(scope="module", params=["compiled", "python"])
def replay_loop(request):
    """Which loop :func:`cupool.sim.timeline.replay` runs: ``"compiled"`` or ``"python"``
    (the extension switched off, as where it is not built)."""
    if request.param == "compiled":
        if not timeline.COMPILED_AVAILABLE:
            pytest.skip("the C extension cupool.sim._timeline is not built")
        yield request.param
    else:
        with mock.patch.object(timeline, "_timeline", None):
            yield request.param
