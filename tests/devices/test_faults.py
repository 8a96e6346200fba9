"""Injected faults on the emulated device: the n-th call of an operation fails with the error
the cuda backend raises for it, nothing else changes, and a bad specification names itself."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from cupool.devices.errors import DeviceError, DeviceOutOfMemoryError, StreamTaskError
from cupool.devices.faults import OPERATIONS, Fault, FaultSpecError, FaultyDevice

KIB = 1024


@pytest.fixture
def device():
    with FaultyDevice(capacity=64 * KIB) as dev:
        yield dev


def _leak_free(device) -> bool:
    stats = device.stats()
    return stats["reserved_bytes.current"] == 0 and stats["pinned_bytes.current"] == 0


def test_an_unknown_operation_is_named_with_the_known_ones():
    with pytest.raises(FaultSpecError) as caught:
        Fault("cpy_h2d", 2)
    error = caught.value
    assert str(error) == (f"Fault(operation='cpy_h2d'): operation must be one of "
                          f"{', '.join(OPERATIONS)}")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is FaultSpecError and str(again) == str(error)
    assert isinstance(error, DeviceError)


@pytest.mark.parametrize(("fields", "message"), [
    ({"nth": 0}, "Fault(nth=0): nth must be an int >= 1"),
    ({"times": True}, "Fault(times=True): times must be an int >= 1"),
    ({"stage": "later"}, "Fault(stage='later'): stage must be one of ('enqueue', 'run')"),
    ({"operation": "reserve", "stage": "run"}, "Fault(stage='run'): stage must be 'enqueue' "
                                               "for 'reserve'"),
])
def test_bad_fault_fields_are_refused_by_name(fields, message):
    with pytest.raises(FaultSpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Fault(**{"operation": "copy_h2d", **fields})


def test_arm_refuses_what_is_not_a_fault(device):
    with pytest.raises(FaultSpecError, match="arm\\(fault='reserve'\\)"):
        device.arm("reserve")


def test_the_nth_reservation_fails_as_cuda_reports_it_and_leaks_nothing(device):
    device.arm(Fault("reserve", nth=2))
    first = device.reserve(4 * KIB)
    with pytest.raises(DeviceOutOfMemoryError) as caught:
        device.reserve(8 * KIB)
    error = caught.value
    assert type(error) is DeviceOutOfMemoryError
    assert (error.operation, error.size, error.free, error.capacity) == \
        ("reserve", 8 * KIB, 60 * KIB, 64 * KIB)
    third = device.reserve(8 * KIB)  # only the second call fails
    assert device.stats()["reservations.current"] == 2
    assert device.mem_info() == (52 * KIB, 64 * KIB)
    assert [(i.operation, i.call) for i in device.injected] == [("reserve", 2)]
    assert device.injected[0].message == str(error)
    device.release(first)
    device.release(third)
    assert _leak_free(device) and device.counts["reserve"] == 3


def test_consecutive_failures_and_pinned_allocations(device):
    device.arm(Fault("alloc_pinned", nth=1, times=2))
    for _ in range(2):
        with pytest.raises(DeviceOutOfMemoryError, match=r"^alloc_pinned\(size=512\)"):
            device.alloc_pinned(512)
    device.free_pinned(device.alloc_pinned(512))
    assert _leak_free(device) and device.stats()["pinned_bytes.peak"] == 512


def _pair(device, nbytes=KIB):
    host = device.alloc_pinned(nbytes)
    dev = device.reserve(nbytes)
    device.pinned_array(host)[:] = np.arange(nbytes, dtype=np.uint8)
    device.device_array(dev)[:] = 7
    return host, dev


def test_a_copy_refused_at_enqueue_names_itself_and_copies_nothing(device):
    host, dev = _pair(device)
    stream = device.create_stream()
    device.arm(Fault("copy_h2d", nth=1))
    with pytest.raises(DeviceError) as caught:
        device.copy_h2d_async(dev.ptr, host.ptr, KIB, stream)
    assert str(caught.value) == ("copy_h2d_async of 1024 bytes on 'faulty': injected fault "
                                 "(copy_h2d call 1, at enqueue)")
    stream.synchronize()
    assert (device.device_array(dev) == 7).all()
    assert device.stats()["copy_count.h2d"] == 0
    device.copy_h2d_async(dev.ptr, host.ptr, KIB, stream)  # the next one runs
    stream.synchronize()
    assert np.array_equal(device.device_array(dev), device.pinned_array(host))


def test_a_copy_failing_on_its_stream_is_reported_at_synchronize(device):
    host, dev = _pair(device)
    stream = device.create_stream()
    device.arm(Fault("copy_d2h", nth=1, stage="run"))
    device.copy_d2h_async(host.ptr, dev.ptr, KIB, stream)  # accepted
    with pytest.raises(StreamTaskError) as caught:
        stream.synchronize()
    assert caught.value.task == "copy_d2h_async of 1024 bytes"
    assert "injected fault (copy_d2h call 1, at run)" in caught.value.failure
    assert np.array_equal(device.pinned_array(host), np.arange(KIB, dtype=np.uint8))
    assert [(i.operation, i.stage) for i in device.injected] == [("copy_d2h", "run")]
    stream.synchronize()  # reported once


@pytest.mark.parametrize("operation", ["create_stream", "create_event", "record",
                                       "host_callback", "synchronize"])
def test_stream_operations_fail_with_the_cuda_wording(device, operation):
    stream = device.create_stream()
    event = device.create_event()
    ran = []
    calls = {"create_stream": device.create_stream, "create_event": device.create_event,
             "record": lambda: event.record(stream),
             "host_callback": lambda: device.host_callback(stream, lambda: ran.append(1)),
             "synchronize": device.synchronize}
    what = {"record": "event.record()"}.get(operation, f"{operation}()")
    device.arm(Fault(operation, nth=2))
    calls[operation]()
    with pytest.raises(DeviceError) as caught:
        calls[operation]()
    assert str(caught.value) == (f"{what} on 'faulty': injected fault ({operation} call 2, "
                                 f"at enqueue)")
    calls[operation]()
    if operation != "synchronize":
        device.synchronize()
    assert ran == ([1, 1] if operation == "host_callback" else [])


def test_a_refused_stream_wait_is_not_enqueued_and_names_the_stream(device):
    first, second = device.create_stream("first"), device.create_stream("second")
    event = device.create_event()
    ran = []
    event.record(first)
    device.arm(Fault("wait_event", nth=1))
    with pytest.raises(DeviceError) as caught:
        second.wait_event(event)
    assert str(caught.value) == ("stream 'second'.wait_event() on 'faulty': injected fault "
                                 "(wait_event call 1, at enqueue)")
    assert device.stats()["stream_waits.count"] == 0  # nothing was enqueued
    second.wait_event(event)  # the next one is
    device.host_callback(second, lambda: ran.append(1))
    device.synchronize()
    assert ran == [1] and device.stats()["stream_waits.count"] == 1


def test_waits_and_records_made_inside_launched_work_fail_as_the_stream_ones(device):
    """The emulated device's waits and marks made inside launched work (what the swap
    engine's batched op work uses) count as ``wait_event`` and ``record`` calls and fail
    the same way, before anything is counted or enqueued."""
    stream = device.create_stream("compute")
    event = device.create_event()
    event.record(stream)
    device.arm(Fault("wait_event", nth=1), Fault("record", nth=1))
    with pytest.raises(DeviceError, match=r"injected fault \(wait_event call 1, at enqueue\)"):
        event.wait_in_work()
    with pytest.raises(DeviceError, match=r"injected fault \(record call 1, at enqueue\)"):
        event.record_in_work()
    assert device.stats()["stream_waits.count"] == 0
    wait, mark = event.wait_in_work(), device.create_event(timing=True).record_in_work()
    device.launch(stream, lambda: (wait(), mark()))
    device.synchronize()
    assert device.stats()["stream_waits.count"] == 1


def test_a_failed_stream_synchronize_waits_for_the_work_then_names_the_stream(device):
    stream = device.create_stream("copies")
    ran = []
    device.arm(Fault("stream_synchronize", nth=1))
    device.synchronize()  # the device's own synchronize is another operation
    device.host_callback(stream, lambda: ran.append(1))
    with pytest.raises(DeviceError) as caught:
        stream.synchronize()
    assert str(caught.value) == ("stream 'copies'.synchronize() on 'faulty': injected fault "
                                 "(stream_synchronize call 1, at enqueue)")
    assert ran == [1] and device.pending_work() == 0
    stream.synchronize()
    assert dict(device.counts) == {"synchronize": 1, "host_callback": 1,
                                   "stream_synchronize": 2}


def test_stream_work_failing_when_run_is_skipped_and_reported(device):
    stream = device.create_stream()
    ran = []
    device.arm(Fault("host_callback", nth=1, stage="run"))

    def work():
        ran.append(1)

    device.host_callback(stream, work)
    device.host_callback(stream, work)
    with pytest.raises(StreamTaskError, match="host_callback work on 'faulty'"):
        device.synchronize()
    assert ran == [1]


def test_a_launch_fails_at_enqueue_or_when_run(device):
    if not hasattr(device, "launch"):
        pytest.skip("this device protocol has no launch()")
    stream = device.create_stream()
    ran = []
    device.arm(Fault("launch", nth=1), Fault("launch", nth=2, stage="run"))
    with pytest.raises(DeviceError, match=r"^launch\(\) on 'faulty': injected fault "
                                          r"\(launch call 1, at enqueue\)$"):
        device.launch(stream, lambda: ran.append(1))
    device.launch(stream, lambda: ran.append(2))
    device.launch(stream, lambda: ran.append(3))
    with pytest.raises(StreamTaskError, match="launch call 2, at run"):
        stream.synchronize()
    assert ran == [3]


def test_drawn_faults_are_seeded():
    draws = [Fault.drawn("copy_h2d", 50, seed).nth for seed in range(20)]
    assert draws == [Fault.drawn("copy_h2d", 50, seed).nth for seed in range(20)]
    assert all(1 <= n <= 50 for n in draws) and len(set(draws)) > 5
    with pytest.raises(FaultSpecError, match="calls must be an int >= 1"):
        Fault.drawn("copy_h2d", 0, 1)


def test_another_process_takes_free_memory_between_steps(device):
    kept = device.reserve(16 * KIB)
    device.occupy(40 * KIB)
    assert device.mem_info() == (8 * KIB, 64 * KIB)
    assert device.stats()["reserved_bytes.current"] == 16 * KIB  # not this device's
    with pytest.raises(DeviceOutOfMemoryError, match="only 8192 of 65536 bytes are free"):
        device.reserve(16 * KIB)
    with pytest.raises(DeviceOutOfMemoryError, match=r"^occupy\(size=16384\)"):
        device.occupy(16 * KIB)
    device.vacate()
    device.release(device.reserve(16 * KIB))
    device.release(kept)
    assert device.mem_info() == (64 * KIB, 64 * KIB) and _leak_free(device)


def test_without_faults_it_only_counts(device):
    host, dev = _pair(device)
    stream = device.create_stream()
    device.arm()
    device.copy_h2d_async(dev.ptr, host.ptr, KIB, stream)
    device.copy_d2h_async(host.ptr, dev.ptr, KIB, stream)
    device.synchronize()
    assert dict(device.counts) == {"copy_h2d": 1, "copy_d2h": 1, "synchronize": 1}
    assert device.injected == [] and device.describe()["faults"] == []
