"""The copy engine: swap round trips keep every byte with nothing but copies, waits and
event records on its streams; a copy refused when issued fails the buffer's next use, and
one failing on its stream is reported by the next synchronize."""

from __future__ import annotations

import numpy as np
import pytest

from cupool.core.vocabulary import Buffer
from cupool.devices import open_device
from cupool.devices.errors import StreamTaskError
from cupool.devices.memory import host_view
from cupool.swap.copy_engine import CopyEngine
from cupool.swap.errors import CopyFailedError
from cupool.swap.handles import DEVICE, HOST, TO_DEVICE, WRITE, TensorHandle
from cupool.swap.staging import PinnedStaging


def test_failing_copy_surfaces_at_the_use():
    with open_device("emulated", capacity="1MiB") as device:
        staging = PinnedStaging(device, 4096)
        engine = CopyEngine(device, staging)
        handle = TensorHandle(Buffer(9, 1024, 0, 4, uses=(0, 3)))
        handle.move(HOST)
        slot = staging.acquire(1024)
        bogus = 0x10  # not inside any reservation: the device refuses the copy
        engine.swap_in(handle, slot, 1024, bogus, [])
        device.synchronize()
        failed = "buffer 9: h2d copy of 1024 bytes failed"
        with pytest.raises(CopyFailedError, match=failed), handle.use():
            pass
        assert engine.stats()["failed.count"] == 1
        staging.release(slot)  # the slot stays the caller's
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
        before = device.stats()
        slot, out = engine.swap_out(handle, arena.ptr, 1024, done)
        assert handle.state == HOST  # on the host, in program order
        landing = host_view(arena.ptr + 2048, 1024)
        landed = engine.swap_in(handle, slot, 1024, arena.ptr + 2048, [out])
        assert handle.state == TO_DEVICE
        device.default_stream.wait_event(landed)
        engine.arrived(handle, landing, arena.ptr + 2048)
        device.synchronize()
        after = device.stats()
        assert after["host_callbacks.count"] == before["host_callbacks.count"]
        assert after["launches.count"] == before["launches.count"]
        assert after["event_records.count"] - before["event_records.count"] == 2
        assert handle.state == DEVICE and handle.ptr == arena.ptr + 2048
        with pytest.raises(RuntimeError, match="inside use"), handle.use(WRITE) as data:
            assert np.array_equal(data, np.arange(1024) % 251)
            raise RuntimeError("inside use")
        with handle.use(WRITE):  # no use left behind by the exception
            pass
        staging.release(slot)
        assert staging.is_clean()
        assert staging.stats()["staging.pinned_slots.count"] == 1
        staging.close()


def test_a_copy_failing_on_the_stream_is_reported_by_synchronize():
    """The H2D copy fails when the stream runs it: the stream reports it at synchronize
    (as a CUDA copy error surfaces there), naming the failed work."""
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
            device.launch(stream, copy)

        device.copy_h2d_async = failing_copy
        engine.swap_in(handle, slot, 1024, arena.ptr, [])
        with pytest.raises(StreamTaskError, match=r"launch copy failed: .*DMA engine fault"):
            device.synchronize()
        staging.release(slot)
        assert staging.is_clean()
        staging.close()
