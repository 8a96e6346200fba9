"""The copy engine: swap round trips keep every byte, and a copy that fails (refused when
issued, or failing on its stream) fails the buffer's next use, not its bytes."""

from __future__ import annotations

import numpy as np
import pytest

from cupool.core.vocabulary import Buffer
from cupool.devices import open_device
from cupool.devices.errors import StreamTaskError
from cupool.devices.memory import host_view
from cupool.swap.copy_engine import CopyEngine
from cupool.swap.errors import CopyFailedError
from cupool.swap.handles import DEVICE, FAILED, HOST, WRITE, TensorHandle
from cupool.swap.staging import PinnedStaging


def test_failing_copy_surfaces_at_the_use():
    with open_device("emulated", capacity="1MiB") as device:
        staging = PinnedStaging(device, 4096)
        engine = CopyEngine(device, staging)
        handle = TensorHandle(Buffer(9, 1024, 0, 4, uses=(0, 3)))
        handle.move(HOST)
        slot = staging.acquire(1024)
        bogus = 0x10  # not inside any reservation: the device refuses the copy
        engine.swap_in(handle, slot, 1024, bogus, None, [])
        device.synchronize()
        failed = "buffer 9: h2d copy of 1024 bytes failed"
        with pytest.raises(CopyFailedError, match=failed), handle.use():
            pass
        assert engine.stats()["failed.count"] == 1
        assert staging.is_clean()
        staging.close()


def test_swap_round_trip_keeps_bytes_and_staging_is_clean_after_an_exception():
    with open_device("emulated", capacity="1MiB") as device:
        arena = device.reserve(4096)
        staging = PinnedStaging(device, 8192)
        engine = CopyEngine(device, staging)
        handle = TensorHandle(Buffer(1, 1024, 0, 4, uses=(0, 3)))
        view = host_view(arena.ptr, 1024)
        handle.move(DEVICE, view, arena.ptr)
        view[:] = np.arange(1024) % 251
        done = device.create_event()
        done.record(device.default_stream)
        slot, out = engine.swap_out(handle, arena.ptr, 1024, done)
        landing = host_view(arena.ptr + 2048, 1024)
        engine.swap_in(handle, slot, 1024, arena.ptr + 2048, landing, [out])
        device.synchronize()
        assert handle.state == DEVICE and handle.ptr == arena.ptr + 2048
        with pytest.raises(RuntimeError, match="inside use"), handle.use(WRITE) as data:
            assert np.array_equal(data, np.arange(1024) % 251)
            raise RuntimeError("inside use")
        with handle.use(WRITE):  # no use left behind by the exception
            pass
        assert staging.is_clean()
        assert staging.stats()["staging.pinned_slots.count"] == 1
        staging.close()


def test_a_copy_failing_on_the_stream_fails_the_use_not_the_bytes():
    """The H2D copy fails when the stream runs it: the handle's next use raises
    CopyFailedError naming the copy, the stream reports it at synchronize, and the
    staging area is clean."""
    with open_device("emulated", capacity="1MiB") as device:
        arena = device.reserve(4096)
        staging = PinnedStaging(device, 4096)
        engine = CopyEngine(device, staging)
        handle = TensorHandle(Buffer(5, 1024, 0, 4, uses=(0, 3)))
        handle.move(HOST)
        slot = staging.acquire(1024)

        def failing_copy(dst, src, nbytes, stream):
            def copy():
                raise OSError("DMA engine fault")
            device.host_callback(stream, copy)

        device.copy_h2d_async = failing_copy
        engine.swap_in(handle, slot, 1024, arena.ptr, device.array_at(arena.ptr, 1024), [])
        with pytest.raises(StreamTaskError, match="DMA engine fault"):
            device.synchronize()
        assert handle.state == FAILED
        with pytest.raises(CopyFailedError, match="buffer 5: h2d copy of 1024 bytes failed: "
                                                  "host_callback copy failed"), handle.use():
            pass
        assert staging.is_clean()
        staging.close()
