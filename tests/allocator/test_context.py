"""``managed()``: a pool becomes CuPy's allocator for a block, and the previous one comes
back.
"""

from __future__ import annotations

import pytest

cupy = pytest.importorskip("cupy")

from cupool.allocator import ManagedStateError, PlannedPool, managed  # noqa: E402
from tests.allocator.helpers import empty  # noqa: E402


def test_managed_restores_the_allocator_even_when_the_body_raises(device):
    before = cupy.cuda.get_allocator()
    with pytest.raises(KeyError), managed(device=device) as pool:
        assert cupy.cuda.get_allocator() == pool.malloc
        x = empty(512)
        raise KeyError("body failed")
    assert cupy.cuda.get_allocator() == before
    assert pool.used_bytes() == 512
    del x
    assert pool.used_bytes() == 0


def test_managed_is_one_shot(device):
    scope = managed(device=device)
    with scope:
        pass
    with pytest.raises(ManagedStateError, match="entered twice"):
        scope.__enter__()
    with pytest.raises(ManagedStateError, match="without being entered"):
        managed(device=device).__exit__(None, None, None)
    with pytest.raises(ManagedStateError, match="either a pool or options"):
        managed(PlannedPool(device), capacity="1MiB")
