"""The emulated device: real bytes, real ordering, checked ranges, paced links.

The ``scenario_*`` functions take any open device and check the protocol's contract;
they run here on the emulated device and, unchanged, on a GPU from
``tests/devices/test_devices_cuda.py``.
"""

from __future__ import annotations

import gc
import pickle
import threading
import time

import numpy as np
import pytest

from cupool.devices import describe, open_device
from cupool.devices.emulated import ALIGNMENT, EmulatedDevice
from cupool.devices.errors import (
    DeviceClosedError,
    DeviceError,
    DeviceOptionError,
    DeviceOutOfMemoryError,
    DeviceUnavailableError,
    InvalidPointerError,
    InvalidSizeError,
    StreamTaskError,
)

MiB = 1 << 20
GATE_TIMEOUT = 5.0  # seconds a blocked host callback waits before giving up (test safety)


@pytest.fixture
def device():
    with EmulatedDevice(capacity=256 * MiB) as dev:
        yield dev


def pattern(nbytes: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


def gate_callback(gate: threading.Event):
    """A host callback that holds its stream until ``gate`` is set."""
    def held() -> None:
        gate.wait(GATE_TIMEOUT)
    return held


# -- scenarios shared with the GPU tests ----------------------------------------------------
def scenario_round_trip(device) -> None:
    """h2d, d2d, d2h really move the bytes, in stream order, and are counted."""
    n = 64 * 1024 + 3
    host_in, host_out = device.alloc_pinned(n), device.alloc_pinned(n)
    first, second = device.reserve(n), device.reserve(n)
    expected = pattern(n, seed=1)
    device.pinned_array(host_in)[:] = expected
    device.pinned_array(host_out)[:] = 0
    stream = device.create_stream("round-trip")
    before = device.stats()
    device.copy_h2d_async(first.ptr, host_in.ptr, n, stream)
    device.copy_d2d_async(second.ptr, first.ptr, n, stream)
    device.copy_d2h_async(host_out.ptr, second.ptr, n, stream)
    stream.synchronize()
    np.testing.assert_array_equal(device.pinned_array(host_out), expected)
    after = device.stats()
    for kind in ("h2d", "d2d", "d2h"):
        assert after[f"copy_count.{kind}"] - before[f"copy_count.{kind}"] == 1
        assert after[f"copy_bytes.{kind}"] - before[f"copy_bytes.{kind}"] == n
    for memory in (first, second):
        device.release(memory)
    for memory in (host_in, host_out):
        device.free_pinned(memory)


def scenario_fifo(device) -> None:
    """Work on one stream runs in the order it was enqueued, copies included."""
    n = 4096
    host, dev_mem = device.alloc_pinned(n), device.reserve(n)
    view = device.pinned_array(host)
    stream = device.create_stream("fifo")
    log: list[object] = []
    for i in range(20):
        device.host_callback(stream, lambda i=i: log.append(i))
    # write 1s to the device, then overwrite the host and copy back: the d2h must see the 1s
    view[:] = 1
    device.copy_h2d_async(dev_mem.ptr, host.ptr, n, stream)
    device.host_callback(stream, lambda: view.__setitem__(slice(None), 2))
    device.copy_d2h_async(host.ptr, dev_mem.ptr, n, stream)
    device.host_callback(stream, lambda: log.append(int(view.min())))
    stream.synchronize()
    assert log == [*range(20), 1]
    device.release(dev_mem)
    device.free_pinned(host)


def scenario_event_waits_for_stream(device) -> None:
    """An event completes only when its stream reaches it."""
    stream = device.create_stream("held")
    event = device.create_event()
    assert event.query()  # never recorded: complete, as in CUDA
    gate = threading.Event()
    device.host_callback(stream, gate_callback(gate))
    event.record(stream)
    time.sleep(0.02)
    assert not event.query()
    assert not stream.query()
    gate.set()
    event.synchronize()
    assert event.query()
    stream.synchronize()
    assert stream.query()


def scenario_cross_stream_wait(device) -> None:
    """stream.wait_event orders work across streams; a later re-record does not move it."""
    n = 8192
    host_in, host_out, dev_mem = device.alloc_pinned(n), device.alloc_pinned(n), device.reserve(n)
    expected = pattern(n, seed=2)
    device.pinned_array(host_in)[:] = expected
    device.pinned_array(host_out)[:] = 0
    producer, consumer, other = (device.create_stream(s) for s in ("producer", "consumer",
                                                                     "other"))
    ready = device.create_event()
    gate = threading.Event()
    log: list[str] = []
    device.host_callback(producer, gate_callback(gate))
    device.copy_h2d_async(dev_mem.ptr, host_in.ptr, n, producer)
    device.host_callback(producer, lambda: log.append("produced"))
    ready.record(producer)
    consumer.wait_event(ready)
    device.host_callback(consumer, lambda: log.append("consumed"))
    device.copy_d2h_async(host_out.ptr, dev_mem.ptr, n, consumer)
    ready.record(other)  # moves the event's mark; the consumer still waits for the producer
    other.synchronize()
    time.sleep(0.02)
    assert log == []
    assert not consumer.query()
    gate.set()
    consumer.synchronize()
    assert log == ["produced", "consumed"]
    np.testing.assert_array_equal(device.pinned_array(host_out), expected)
    device.synchronize()
    device.release(dev_mem)
    device.free_pinned(host_in)
    device.free_pinned(host_out)


def scenario_bad_sizes(device) -> None:
    """Bad sizes are typed errors that quote the value, whatever the backend."""
    with pytest.raises(InvalidSizeError, match=r"reserve\(size=-3\): size must be > 0"):
        device.reserve(-3)
    with pytest.raises(InvalidSizeError, match=r"reserve\(size=0\): size must be > 0"):
        device.reserve(0)
    with pytest.raises(InvalidSizeError, match=r"alloc_pinned\(size=1.5\): size must be an int"):
        device.alloc_pinned(1.5)
    with pytest.raises(InvalidSizeError, match="not a bool"):
        device.reserve(True)
    stream = device.create_stream()
    with pytest.raises(InvalidSizeError, match=r"copy_h2d_async\(nbytes=-1\): nbytes must be >= 0"):
        device.copy_h2d_async(0, 0, -1, stream)
    memory = device.reserve(np.int64(512))  # NumPy integers are fine
    assert memory.size == 512 and isinstance(memory.size, int)
    device.release(memory)
    with pytest.raises(InvalidPointerError, match="freed twice"):
        device.release(memory)


def scenario_close(device) -> None:
    """close() finishes queued work, is idempotent, and refuses later use."""
    stream = device.create_stream("closing")
    ran = threading.Event()
    device.host_callback(stream, lambda: (time.sleep(0.02), ran.set()))
    device.reserve(4096)
    device.close()
    assert ran.is_set()
    device.close()
    assert device.closed
    with pytest.raises(DeviceClosedError, match=r"reserve\(size=1\) refused"):
        device.reserve(1)
    with pytest.raises(DeviceClosedError):
        stream.synchronize()


SCENARIOS = (scenario_round_trip, scenario_fifo, scenario_event_waits_for_stream,
             scenario_cross_stream_wait, scenario_bad_sizes, scenario_close)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
def test_scenario(device, scenario):
    scenario(device)


# -- emulated specifics -----------------------------------------------------------------------
def test_blocks_are_aligned_real_memory(device):
    memory = device.reserve(1000)
    assert memory.ptr % ALIGNMENT == 0 and memory.kind == "device"
    array = device.device_array(memory)
    assert array.ctypes.data == memory.ptr and array.nbytes == 1000
    pinned = device.alloc_pinned(10)
    assert pinned.ptr % ALIGNMENT == 0 and pinned.kind == "pinned"


def test_pacing_holds_a_copy_to_the_link_bandwidth():
    n = 64 * MiB
    with EmulatedDevice(capacity=2 * n, h2d_gbps=1.0) as dev:
        host, target = dev.alloc_pinned(n), dev.reserve(n)
        stream = dev.create_stream()
        start = time.perf_counter()
        dev.copy_h2d_async(target.ptr, host.ptr, n, stream)
        stream.synchronize()
        elapsed = time.perf_counter() - start
    assert elapsed >= 0.060, f"64 MiB at 1 GB/s took {elapsed * 1e3:.1f} ms, expected >= 60 ms"


def test_queued_copies_run_back_to_back_on_the_link_clock(monkeypatch):
    """A copy its thread reaches after the previous one on the link was due to end starts
    at that end (the thread's wake-up delay is not link time), but never before an event
    its stream waited for was recorded. The catch-up window is widened so that the test
    does not depend on how fast threads wake on this machine."""
    import cupool.devices.emulated as emulated

    monkeypatch.setattr(emulated, "LINK_CATCH_UP_S", 5.0)
    paced = 0.02  # 20 ms of latency per copy
    with EmulatedDevice(capacity=MiB, h2d_gbps=None, latency_us=paced * 1e6) as dev:
        host, target = dev.alloc_pinned(64), dev.reserve(64)
        stream, other = dev.create_stream(), dev.create_stream()
        gate = threading.Event()
        dev.host_callback(stream, gate.wait)
        dev.copy_h2d_async(target.ptr, host.ptr, 16, stream)
        dev.copy_h2d_async(target.ptr + 16, host.ptr, 16, stream)
        gate.set()
        stream.synchronize()
        first_end = dev._link_free_at["h2d"] - paced
        # the second copy started exactly where the first was due to end
        assert dev._link_free_at["h2d"] == pytest.approx(first_end + paced, abs=1e-9)
        # a copy behind an event recorded later starts after the event, not at the link's end
        event = dev.create_event()
        dev.host_callback(other, lambda: time.sleep(0.05))
        event.record(other)
        stream.wait_event(event)
        dev.copy_h2d_async(target.ptr + 32, host.ptr, 16, stream)
        stream.synchronize()
        recorded_at = event._token.recorded_at
        assert dev._link_free_at["h2d"] == pytest.approx(recorded_at + paced, abs=1e-9)


def test_a_copy_first_behind_a_gate_starts_at_its_release(monkeypatch):
    """Work behind ``hold_streams`` waits for the release, and a paced copy first in line
    starts at the release, not when its woken thread reached it (a host callback before
    it stands in for the wake-up delay). The catch-up window is widened as above."""
    import cupool.devices.emulated as emulated

    monkeypatch.setattr(emulated, "LINK_CATCH_UP_S", 5.0)
    paced = 0.02
    with EmulatedDevice(capacity=MiB, h2d_gbps=None, latency_us=paced * 1e6) as dev:
        host, target = dev.alloc_pinned(64), dev.reserve(64)
        stream, other = dev.create_stream(), dev.create_stream()
        log: list[str] = []
        gate = dev.hold_streams((stream, other))
        dev.host_callback(other, lambda: log.append("other"))
        dev.host_callback(stream, lambda: time.sleep(0.05))
        dev.copy_h2d_async(target.ptr, host.ptr, 16, stream)
        time.sleep(0.02)
        assert log == [] and not gate.released
        released = gate.release()
        assert gate.release() == released  # once
        stream.synchronize()
        other.synchronize()
        assert log == ["other"]
        assert dev._link_free_at["h2d"] == pytest.approx(released + paced, abs=1e-9)


def test_only_worker_streams_of_the_device_can_be_held():
    with EmulatedDevice(capacity=MiB) as dev, EmulatedDevice(capacity=MiB) as other:
        with pytest.raises(DeviceError, match="default stream"):
            dev.hold_streams((dev.default_stream,))
        with pytest.raises(DeviceError, match="is not a Stream of device"):
            dev.hold_streams((other.create_stream(),))


def test_latency_and_a_shared_link():
    """Latency paces even tiny copies; two streams share one link per direction."""
    with EmulatedDevice(capacity=MiB, d2h_gbps=1.0, latency_us=10_000) as dev:
        host, source = dev.alloc_pinned(4096), dev.reserve(4096)
        first, second = dev.create_stream(), dev.create_stream()
        start = time.perf_counter()
        dev.copy_d2h_async(host.ptr, source.ptr, 16, first)
        dev.copy_d2h_async(host.ptr + 16, source.ptr, 16, second)
        dev.synchronize()
        elapsed = time.perf_counter() - start
        assert elapsed >= 0.019, f"two 10 ms copies on one link took {elapsed * 1e3:.1f} ms"
        # a device-to-device copy has a link of its own and its own 10 ms of latency; the
        # bound only catches a copy that never ends
        start = time.perf_counter()
        dev.copy_d2d_async(source.ptr + 2048, source.ptr, 2048, first)
        first.synchronize()
        assert time.perf_counter() - start < 0.5


def test_copies_outside_reservations_are_refused_with_the_numbers(device):
    host, target = device.alloc_pinned(4096), device.reserve(1024)
    stream = device.create_stream()
    with pytest.raises(InvalidPointerError) as info:
        device.copy_h2d_async(target.ptr, host.ptr, 4096, stream)
    assert str(info.value) == (
        f"copy_h2d_async: copy of 4096 bytes to {target.ptr:#x} runs past the end of device "
        f"reservation {target.ptr:#x}+1024 by 3072 bytes")
    assert (info.value.ptr, info.value.nbytes) == (target.ptr, 4096)
    with pytest.raises(InvalidPointerError, match="is not inside any device reservation"):
        device.copy_h2d_async(target.ptr - 64, host.ptr, 8, stream)
    # the host side of a copy must be pinned memory of this device, the device side a reservation
    with pytest.raises(InvalidPointerError, match=r"from .* not inside any pinned allocation"):
        device.copy_h2d_async(target.ptr, target.ptr + 512, 8, stream)
    with pytest.raises(InvalidPointerError, match=r"to .* not inside any pinned allocation"):
        device.copy_d2h_async(target.ptr, target.ptr, 8, stream)
    with pytest.raises(InvalidPointerError, match="source and destination overlap"):
        device.copy_d2d_async(target.ptr + 8, target.ptr, 16, stream)
    device.release(target)
    with pytest.raises(InvalidPointerError, match="not inside any device reservation"):
        device.copy_h2d_async(target.ptr, host.ptr, 8, stream)
    device.copy_h2d_async(0, 0, 0, stream)  # zero bytes: a no-op, still ordered
    stream.synchronize()


def test_capacity_and_statistics():
    with EmulatedDevice(capacity="1MiB") as dev:
        assert dev.mem_info() == (MiB, MiB)
        blocks = [dev.reserve(256 * 1024) for _ in range(3)]
        assert dev.mem_info() == (MiB - 768 * 1024, MiB)
        with pytest.raises(DeviceOutOfMemoryError) as info:
            dev.reserve(512 * 1024)
        assert str(info.value) == (f"reserve(size={512 * 1024}): out of memory, only "
                                   f"{256 * 1024} of {MiB} bytes are free")
        dev.release(blocks.pop())
        stats = dev.stats()
        assert stats["reserved_bytes.current"] == 512 * 1024
        assert stats["reserved_bytes.peak"] == 768 * 1024
        assert stats["reservations.current"] == 2
        assert dev.describe()["capacity"] == MiB
    assert dev.stats()["reserved_bytes.current"] == 0


def test_failing_host_callback_is_reported_at_synchronize(device):
    stream = device.create_stream("failing")
    after = threading.Event()

    def broken() -> None:
        raise ValueError("boom")

    device.host_callback(stream, broken)
    device.host_callback(stream, after.set)
    with pytest.raises(StreamTaskError, match=r"stream 'failing': host_callback broken failed: "
                                              r"ValueError\('boom'\)") as info:
        stream.synchronize()
    assert isinstance(info.value.__cause__, ValueError)
    assert after.is_set()  # later work still ran
    stream.synchronize()  # reported once


def test_device_synchronize_waits_for_busy_streams_and_reports_idle_ones_failures(device):
    """Idle streams get no token (nothing to wait for), yet a failure one of them ran
    into is still reported; a busy stream is waited for, however many idle ones there
    are."""
    idle = [device.create_stream(f"idle{k}") for k in range(20)]
    failed = device.create_stream("failed")

    def broken() -> None:
        raise ValueError("boom")

    device.host_callback(failed, broken)
    failed_done = threading.Event()
    device.host_callback(failed, failed_done.set)
    assert failed_done.wait(5)  # the failing stream is idle again
    busy, gate, ran = device.create_stream("busy"), threading.Event(), []
    device.host_callback(busy, gate.wait)
    device.host_callback(busy, lambda: ran.append(True))
    threading.Timer(0.05, gate.set).start()
    with pytest.raises(StreamTaskError, match=r"stream 'failed': host_callback broken"):
        device.synchronize()
    assert ran == [True]  # the busy stream was waited for
    assert all(stream.query() for stream in idle)
    device.synchronize()  # reported once


def test_default_stream_runs_in_the_caller(device):
    host, target = device.alloc_pinned(64), device.reserve(64)
    device.pinned_array(host)[:] = 5
    device.copy_h2d_async(target.ptr, host.ptr, 64, device.default_stream)
    assert (device.device_array(target) == 5).all()  # done on return
    assert device.default_stream.query()


def test_close_joins_threads_and_gc_stops_forgotten_devices():
    def workers() -> list[str]:
        return [t.name for t in threading.enumerate() if t.name.startswith("cupool-gc-test")]

    dev = EmulatedDevice(capacity=MiB, name="gc-test")
    dev.create_stream()
    dev.create_stream()
    assert len(workers()) == 2
    dev.close()
    assert workers() == []
    forgotten = EmulatedDevice(capacity=MiB, name="gc-test")
    forgotten.create_stream()
    del forgotten
    gc.collect()
    deadline = time.monotonic() + 2.0
    while workers() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert workers() == []


def test_close_gives_up_on_a_stuck_wait():
    """A stream waiting on an event that never completes does not hang close()."""
    dev = EmulatedDevice(capacity=MiB, close_timeout=0.1)
    held, waiting = dev.create_stream(), dev.create_stream()
    gate = threading.Event()
    dev.host_callback(held, gate_callback(gate))
    event = dev.create_event()
    event.record(held)
    waiting.wait_event(event)
    start = time.perf_counter()
    with pytest.raises(DeviceError, match=r"streams \['stream-1'\] still run a task"):
        dev.close()  # the held callback is stuck; the waiting stream was released
    assert time.perf_counter() - start < 3.0
    gate.set()


def test_errors_pickle_with_their_fields():
    errors = [InvalidSizeError("reserve", "size", -3, "must be > 0"),
              InvalidPointerError("copy_h2d_async", 4096, 8, "detail"),
              DeviceOutOfMemoryError("reserve", 10, 5, 8),
              DeviceClosedError("emulated", "reserve(size=1)"),
              DeviceUnavailableError("cuda", "no GPU"),
              DeviceOptionError("emulated", "bogus", ("capacity",)),
              StreamTaskError("s", "host_callback f", "ValueError('x')")]
    for error in errors:
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error)
        assert vars(copy) == vars(error)


def test_objects_of_another_device_are_refused(device):
    with EmulatedDevice(capacity=MiB, name="other") as other:
        foreign = other.create_stream()
        with pytest.raises(DeviceError, match="is not a Stream of device 'emulated'"):
            device.create_event().record(foreign)
        memory = other.reserve(64)
        with pytest.raises(InvalidPointerError, match="not a live device block"):
            device.release(memory)


def test_open_device_chooses_and_explains():
    with open_device("emulated", capacity="8MiB", h2d_gbps=12.5) as dev:
        assert dev.kind == "emulated" and dev.mem_info()[1] == 8 * MiB
        assert dev.reason == "emulated was requested"
    with pytest.raises(DeviceOptionError, match="unknown option 'bogus'"):
        open_device("emulated", bogus=1)
    with pytest.raises(DeviceOptionError, match="unknown option 'bogus'"):
        open_device("auto", bogus=1)
    with pytest.raises(DeviceUnavailableError, match="unknown device kind"):
        open_device("tpu")
    facts = describe()
    assert facts["auto_kind"] in ("cuda", "emulated") and facts["reason"]


def test_cupy_memory_pointer_into_emulated_memory(device):
    cupy = pytest.importorskip("cupy", reason="cupy is not installed (pip install cupy-cuda13x)")
    memory = device.reserve(4096)
    device.device_array(memory)[:] = 0
    # device_id=0: without it UnownedMemory asks the driver which device owns the pointer
    owned = cupy.cuda.UnownedMemory(memory.ptr, memory.size, memory, 0)
    array = cupy.ndarray((16,), dtype=cupy.float32, memptr=cupy.cuda.MemoryPointer(owned, 256))
    assert memory.ptr <= array.data.ptr < memory.end
    assert array.data.ptr - memory.ptr == 256
    view = array[4:]
    assert view.data.ptr == memory.ptr + 256 + 16
    assert view.data.ptr + view.nbytes <= memory.end


def test_concurrent_reserve_and_release_keep_exact_accounts():
    with EmulatedDevice(capacity=64 * MiB) as dev:
        failures: list[BaseException] = []

        def churn(seed: int) -> None:
            sizes = np.random.default_rng(seed).integers(1, 64 * 1024, 200)
            try:
                for size in sizes:
                    dev.release(dev.reserve(int(size)))
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=churn, args=(seed,)) for seed in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
        assert dev.mem_info() == (64 * MiB, 64 * MiB)
        stats = dev.stats()
        assert stats["reserved_bytes.current"] == 0 and stats["reservations.current"] == 0


def test_seconds_since_is_the_time_between_two_marks_as_the_stream_reached_them(device):
    stream = device.create_stream("timed")
    start, end = device.create_event(timing=True), device.create_event(timing=True)
    with pytest.raises(DeviceError, match="never recorded"):
        end.seconds_since(start)
    start.record(stream)
    device.host_callback(stream, lambda: time.sleep(0.02))
    end.record(stream)
    stream.synchronize()
    assert 0.02 <= end.seconds_since(start) < 2.0
    assert start.seconds_since(end) == -end.seconds_since(start)
