"""Tensor handles: checked uses (lifetime, state, conflicting intents from other threads),
typed arrays at the planned address, and the resident fast path."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest

from cupool.core.vocabulary import Buffer
from cupool.devices import open_device
from cupool.devices.errors import InvalidPointerError, InvalidSizeError
from cupool.swap.errors import (
    ConflictingUseError,
    HandleError,
    HandleLifetimeError,
    HandleStateError,
)
from cupool.swap.handles import DEVICE, RETIRED, WRITE, TensorHandle


def _resident_handle(size=64):
    handle = TensorHandle(Buffer(7, size, 2, 5, uses=(2, 4)))
    array = np.zeros(size, dtype=np.uint8)
    handle.move(DEVICE, array, array.ctypes.data)
    return handle


def test_use_after_lifetime_raises():
    handle = _resident_handle()
    handle.move(RETIRED)
    expected = r"buffer 7: used after its lifetime \[2, 5\)"
    with pytest.raises(HandleLifetimeError, match=expected), handle.use():
        pass
    error = pickle.loads(pickle.dumps(HandleLifetimeError(7, 2, 5)))
    assert (error.buffer_id, error.start, error.end) == (7, 2, 5)


def test_conflicting_intents_raise_and_leave_the_handle_clean():
    handle = _resident_handle()
    with handle.use(WRITE):
        errors = []

        def other():
            try:
                with handle.use():
                    pass
            except ConflictingUseError as exc:
                errors.append(exc)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert len(errors) == 1 and errors[0].writers == 1
    with handle.use(), handle.use():  # reads share
        pass
    with handle.use(WRITE) as view:
        assert view.size == 64


def test_not_resident_use_raises_state_error():
    handle = TensorHandle(Buffer(3, 8, 0, 2))
    with pytest.raises(HandleStateError, match="state is 'unborn'"), handle.use():
        pass


def test_resident_use_takes_the_fast_path():
    """A use of a resident handle is the fast path the module promises: it hands back the
    handle's own view (no new array), takes the handle's lock once to enter and once to
    leave, and never looks at the landing event, so it cannot wait. How fast that is
    depends on the machine and is measured by ``bench/replay.py`` (``use_median_us``)."""

    class CountingLock:
        def __init__(self, lock) -> None:
            self.lock, self.acquired = lock, 0

        def acquire(self, *args) -> bool:
            self.acquired += 1
            return self.lock.acquire(*args)

        def release(self) -> None:
            self.lock.release()

        def __enter__(self) -> bool:
            return self.acquire()

        def __exit__(self, *exc_info) -> None:
            self.release()

    class NoLanding:
        def wait(self, timeout=None):
            raise AssertionError("a use of a resident handle waited for a swap-in")

        is_set = wait

    handle = _resident_handle()
    view = handle.view
    handle._lock = lock = CountingLock(handle._lock)
    handle._landed = NoLanding()
    for intent in ("read", WRITE) * 500:
        with handle.use(intent) as got:
            assert got is view
    assert lock.acquired == 2 * 1000
    assert (handle.uses, handle.waited_us, handle.state) == (1000, 0.0, DEVICE)
    assert (handle._readers, handle._writers) == (0, 0)


def test_handle_arrays_are_typed_views_at_the_planned_address():
    with open_device("emulated", capacity="1MiB") as device:
        memory = device.reserve(4096)
        handle = TensorHandle(Buffer(3, 1024, 0, 2, uses=(0, 1)), dtype="float32",
                              shape=(16, 16))
        array = handle.array_at(device, memory.ptr + 512, 1024)
        handle.move(DEVICE, array, memory.ptr + 512)
        with handle.use(WRITE) as view:
            assert isinstance(view, np.ndarray)
            assert (view.dtype, view.shape) == (np.float32, (16, 16))
            assert view.ctypes.data == memory.ptr + 512
            view[:] = 1.5
        assert (device.device_array(memory)[512:1536].view(np.float32) == 1.5).all()


def test_cupy_arrays_over_emulated_memory_at_the_planned_address():
    cupy = pytest.importorskip("cupy")
    with open_device("emulated", capacity="1MiB", cupy_arrays=True) as device:
        memory = device.reserve(4096)
        flat = TensorHandle(Buffer(4, 4096, 0, 2, uses=(0,)), dtype="float64")
        array = flat.array_at(device, memory.ptr, 1000)  # scaled size: whole items only
        assert isinstance(array, cupy.ndarray)
        assert (array.dtype, array.shape, array.data.ptr) == (np.float64, (125,), memory.ptr)
        flat.move(DEVICE, array, memory.ptr)
        with flat.use() as view:
            assert view is array


def test_array_at_refuses_bad_layouts_and_foreign_bytes():
    with open_device("emulated", capacity="1MiB") as device:
        memory = device.reserve(1024)
        with pytest.raises(InvalidSizeError, match=r"shape=\(300,\)\): shape needs 1200"):
            device.array_at(memory.ptr, 1024, "float32", (300,))
        with pytest.raises(InvalidSizeError, match="must be a multiple of the float32"):
            device.array_at(memory.ptr, 1022, "float32")
        with pytest.raises(InvalidSizeError, match="dtype='no such type'"):
            device.array_at(memory.ptr, 1024, "no such type")
        with pytest.raises(InvalidPointerError, match="not inside one live reservation"):
            device.array_at(memory.ptr + 512, 1024)
    with pytest.raises(HandleError, match=r"needs 4096 bytes of float32, only 64"):
        TensorHandle(Buffer(1, 64, 0, 1), dtype="float32", shape=(32, 32))
    with pytest.raises(HandleError, match=r"recompute .* must be callable"):
        TensorHandle(Buffer(1, 64, 0, 1), recompute="not callable")


def test_two_threads_with_conflicting_intents_on_a_replayed_handle():
    with open_device("emulated", capacity="1MiB") as device:
        memory = device.reserve(1024)
        handle = TensorHandle(Buffer(2, 1024, 0, 3, uses=(0, 2)))
        handle.move(DEVICE, handle.array_at(device, memory.ptr, 1024), memory.ptr)
        entered, release, errors = threading.Event(), threading.Event(), []

        def writer():
            with handle.use(WRITE):
                entered.set()
                release.wait(5)

        thread = threading.Thread(target=writer)
        thread.start()
        entered.wait(5)
        try:
            with handle.use():
                pass
        except HandleError as exc:
            errors.append(exc)
        release.set()
        thread.join()
        assert len(errors) == 1 and "conflicts with 0 read(s) and 1 write(s)" in str(errors[0])
        with handle.use(WRITE):  # nothing left behind
            pass
