"""The copy round trip: what a device charges per copy beyond its bytes."""

import pytest

from cupool.devices import open_device
from cupool.devices.calibrate import measure_copy_round_trip
from cupool.errors import InputError


@pytest.fixture
def device():
    with open_device("emulated", h2d_gbps=55, d2h_gbps=55, latency_us=3.0) as dev:
        yield dev


def test_round_trip_is_measured_and_leaves_nothing_reserved(device):
    before = device.stats()
    result = measure_copy_round_trip(device, 55.0, nbytes=512, repeats=7)
    assert len(result.round_trips_us) == 7 and result.nbytes == 512
    # two thread hand-offs and the emulated link's own 3 µs: never below that latency
    assert min(result.round_trips_us) >= 3.0
    assert result.latency_us == pytest.approx(
        max(0.0, sorted(result.round_trips_us)[3] - 512 / 55e3))
    after = device.stats()
    assert after["copy_bytes.h2d"] - before["copy_bytes.h2d"] == 7 * 512
    held = [k for k in after if k.endswith("current")]
    assert held and {k: after[k] for k in held} == {k: before[k] for k in held}


def test_a_slow_link_is_measured_as_slow():
    with open_device("emulated", h2d_gbps=55, d2h_gbps=55, latency_us=2000.0) as dev:
        result = measure_copy_round_trip(dev, 55.0, repeats=3)
    assert result.latency_us >= 2000.0


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"repeats": 0}, "repeats (=0) must be an integer >= 1"),
    ({"nbytes": 0}, "nbytes (=0) must be an integer >= 1"),
    ({"gbps": 0.0}, "gbps (=0.0) must be > 0"),
])
def test_bad_arguments_are_named(device, kwargs, message):
    gbps = kwargs.pop("gbps", 55.0)
    with pytest.raises(InputError) as caught:
        measure_copy_round_trip(device, gbps, **kwargs)
    assert message in str(caught.value)
