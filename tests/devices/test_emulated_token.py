"""The emulated device's one-shot flag: every waiter wakes once it is set, a wait on an
unset flag times out, setting it twice is setting it once."""

from __future__ import annotations

import threading

import pytest

from cupool.devices.emulated_sync import Token


def test_every_waiter_wakes_when_the_flag_is_set():
    token = Token()
    woke = []
    waiters = [threading.Thread(target=lambda: woke.append(token.wait(5.0)))
               for _ in range(4)]
    for thread in waiters:
        thread.start()
    assert not token.is_set()
    token.recorded_at = 1.5
    token.set()
    for thread in waiters:
        thread.join(5.0)
    assert woke == [True] * 4 and token.is_set() and token.recorded_at == 1.5
    assert token.wait(0.0)  # and later waits return at once


def test_a_wait_on_an_unset_flag_times_out_and_a_second_set_changes_nothing():
    token = Token()
    assert token.wait(0.01) is False
    token.set()
    token.set()
    assert token.wait(0.0) and token.wait(0.01)


def test_a_held_stream_keeps_its_work_back_and_hands_it_over_in_order():
    """Work enqueued behind a gate waits for the release (the stream is not idle while it
    does), runs in order then, and a failing piece is reported under its own task."""
    from cupool.devices import open_device
    from cupool.devices.errors import DeviceError

    with open_device("emulated", capacity="1MiB") as device:
        stream = device.create_stream("held")
        log = []
        gate = device.hold_streams((stream,))
        with pytest.raises(DeviceError, match="held by another gate"):
            device.hold_streams((stream,))
        device.launch(stream, lambda: log.append(1))
        device.launch(stream, lambda: 1 / 0)
        device.launch(stream, lambda: log.append(2))
        assert log == [] and not stream.query()
        gate.release()
        with pytest.raises(DeviceError, match="ZeroDivisionError"):
            stream.synchronize()
        assert log == [1, 2] and stream.query()


def test_a_release_here_runs_a_single_held_stream_on_the_calling_thread():
    from cupool.devices import open_device

    with open_device("emulated", capacity="1MiB") as device:
        one, two = device.create_stream("one"), device.create_stream("two")
        ran_on = []
        gate = device.hold_streams((one, two))
        device.launch(one, lambda: ran_on.append(threading.current_thread()))
        gate.release(here=True, at=12.5)  # only `one` holds work: it ran before the return
        assert ran_on == [threading.current_thread()] and gate.release() == 12.5
        gate = device.hold_streams((one, two))
        device.launch(one, lambda: ran_on.append(threading.current_thread()))
        device.launch(two, lambda: ran_on.append(threading.current_thread()))
        gate.release(here=True)  # two streams hold work: their threads run it
        device.synchronize()
        assert len(ran_on) == 3 and threading.current_thread() not in ran_on[1:]
