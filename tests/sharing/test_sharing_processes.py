"""Time-shared devices with real processes: brokers and jobs in their own (spawned)
processes over one shared-memory arena. Every wait is bounded, so a hang fails the test
instead of blocking the suite."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from cupool.sharing import (
    Broker,
    BrokerConfig,
    BrokerGoneError,
    BrokerRunningError,
    Geometry,
    JobNeeds,
    SharingClient,
    broker_request,
    spawn_broker,
)
from cupool.sharing.workload import JobSpec, pattern, run_jobs


@pytest.fixture
def runtime_dir():
    path = tempfile.mkdtemp(prefix="cps", dir="/tmp")  # AF_UNIX paths are short
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _specs(needs, runtime_dir, iterations=6, **extra):
    return [JobSpec(n.job, n.persistent_bytes, n.temporary_bytes, iterations, seed=i + 1,
                    runtime_dir=runtime_dir, wait_for_jobs=len(needs), **extra)
            for i, n in enumerate(needs)]


def _assert_clean(reports, iterations):
    for report in reports:
        assert report.get("error") is None and "exitcode" not in report, report
        assert report["iterations"] == iterations
        assert report["persistent_corrupt_bytes"] == 0
        assert report["temporary_dirty_bytes"] == 0
        assert report["bytes_checked"] > 0


def test_jobs_share_one_arena_and_persistent_never_moves(runtime_dir):
    needs = [JobNeeds("a", 48 << 10, 32 << 10), JobNeeds("b", 16 << 10, 64 << 10),
             JobNeeds("c", 32 << 10, 16 << 10)]
    geometry = Geometry.for_jobs(needs, gap_bytes=512, alignment=512)
    config = BrokerConfig(geometry.capacity_bytes, geometry.temporary_bytes, gap_bytes=512,
                          slice_iterations=2, runtime_dir=runtime_dir)
    with spawn_broker(config):
        reports = run_jobs(_specs(needs, runtime_dir), timeout_s=60)
        answer = broker_request("stats", runtime_dir=runtime_dir)
    _assert_clean(reports, 6)
    stats = answer["stats"]
    assert stats["slices.granted"] == 9  # 3 jobs x 6 iterations / 2 per slice
    assert stats["switches"] >= 3
    assert stats["bytes.persistent_out"] == stats["bytes.persistent_in"] == 0
    assert stats["evictions"] == 0
    assert stats["bytes.temporary_zeroed"] == 3 * sum(n.temporary_bytes for n in needs)
    for report in reports:  # slices of exactly two iterations, each job's own
        assert [s["iterations"] for s in report["slices"]] == [2, 2, 2]


def test_evicted_slots_come_back_byte_exact(runtime_dir):
    needs = [JobNeeds("a", 40 << 10, 8 << 10), JobNeeds("b", 40 << 10, 8 << 10),
             JobNeeds("c", 8 << 10, 8 << 10)]
    # area 64 KiB: a and b cannot both be resident (c may share with either, by arrival)
    config = BrokerConfig(72 << 10, 8 << 10, runtime_dir=runtime_dir)
    with spawn_broker(config):
        reports = run_jobs(_specs(needs, runtime_dir, iterations=5), timeout_s=60)
        answer = broker_request("stats", runtime_dir=runtime_dir)
    _assert_clean(reports, 5)
    stats = answer["stats"]
    assert stats["evictions"] >= 1 and stats["bytes.persistent_out"] >= 40 << 10
    evictions = [e for e in answer["events"] if e["event"] == "evict"]
    assert len(evictions) == stats["evictions"]
    assert {e["job"] for e in evictions} & {"a", "b"}


def test_a_client_dying_mid_slice_is_reclaimed(runtime_dir):
    broker = Broker(BrokerConfig(64 << 10, 16 << 10, runtime_dir=runtime_dir)).start()
    try:
        specs = [JobSpec("doomed", 8 << 10, 16 << 10, 5, seed=7, runtime_dir=runtime_dir,
                         die_after=1, wait_for_jobs=2),
                 JobSpec("survivor", 8 << 10, 16 << 10, 6, seed=8, runtime_dir=runtime_dir,
                         wait_for_jobs=2)]
        doomed, survivor = run_jobs(specs, timeout_s=60)
        assert doomed.get("exitcode") == 3
        _assert_clean([survivor], 6)
        stats = broker.stats()
        assert stats["jobs.reclaimed"] == 1 and stats["slices.revoked"] == 1
        assert stats["jobs.active"] == 0
        events = [(e["event"], e.get("job")) for e in broker.events()]
        assert ("revoke", "doomed") in events and ("reclaim", "doomed") in events
        geometry = broker.geometry
        assert broker.read_arena(0, geometry.capacity_bytes) == bytes(geometry.capacity_bytes)
    finally:
        broker.stop()


def test_broker_restart_gives_the_old_client_a_clear_error(runtime_dir):
    config = BrokerConfig(64 << 10, 8 << 10, runtime_dir=runtime_dir)
    first = spawn_broker(config)
    try:
        client = SharingClient("a", 1024, 1024, runtime_dir=runtime_dir, reply_timeout_s=10)
        with client.iteration() as grant:
            grant.persistent.write(0, pattern(1024, 1).tobytes())
        grant = client.acquire(timeout_s=10)
        grant.temporary.fill(0x55)
        first.kill()  # a crash: no cleanup, the slice is still "held" by the client
        second = spawn_broker(config)  # the lock died with the first broker
    except BaseException:
        first.stop()
        raise
    try:
        assert second.epoch != first.epoch
        with pytest.raises(BrokerGoneError, match=f"epoch {first.epoch}"):
            client.iteration_done()
        with pytest.raises(BrokerGoneError):
            grant.persistent.write(0, b"late write")
        with pytest.raises(BrokerGoneError):
            client.acquire(timeout_s=5)
        client.close()
        with SharingClient("a", 1024, 1024, runtime_dir=runtime_dir) as fresh:
            assert fresh.epoch == second.epoch
            with fresh.iteration() as new_grant:
                assert new_grant.persistent.read() == bytes(1024)
                assert new_grant.temporary.read() == bytes(1024)
        segments = [name for name in os.listdir("/dev/shm") if f"{first.epoch:x}" in name]
        assert segments == []  # the second broker removed the crashed one's segment
    finally:
        second.stop()


def test_two_brokers_on_one_device_are_refused(runtime_dir):
    config = BrokerConfig(64 << 10, 8 << 10, runtime_dir=runtime_dir)
    with spawn_broker(config) as first:
        with pytest.raises(BrokerRunningError, match=f"pid={first.pid}"):
            spawn_broker(config)
        assert broker_request("stats", runtime_dir=runtime_dir)["stats"]["jobs.admitted"] == 0
    spawn_broker(config).stop()  # the lock is free again after a clean stop


@pytest.mark.gpu
def test_jobs_share_a_cuda_device(runtime_dir):
    from cupool.devices import probe_cuda

    usable, reason = probe_cuda()
    if not usable:
        pytest.skip(f"needs a usable GPU: {reason}")
    needs = [JobNeeds("a", 1 << 20, 1 << 20), JobNeeds("b", 2 << 20, 512 << 10)]
    geometry = Geometry.for_jobs(needs)
    config = BrokerConfig(geometry.capacity_bytes, geometry.temporary_bytes, device="cuda:0",
                          runtime_dir=runtime_dir)
    with spawn_broker(config):
        specs = [JobSpec(n.job, n.persistent_bytes, n.temporary_bytes, 4, seed=i,
                         device="cuda:0", runtime_dir=runtime_dir) for i, n in enumerate(needs)]
        reports = run_jobs(specs, timeout_s=120)
    _assert_clean(reports, 4)


def test_naive_policy_keeps_each_jobs_footprint_across_switches(runtime_dir):
    needs = [JobNeeds("a", 24 << 10, 16 << 10), JobNeeds("b", 16 << 10, 8 << 10)]
    broker = Broker(BrokerConfig(48 << 10, 16 << 10, policy="naive",
                                 runtime_dir=runtime_dir)).start()
    try:
        reports = run_jobs(_specs(needs, runtime_dir, iterations=4), timeout_s=60)
        stats = broker.stats()
    finally:
        broker.stop()
    _assert_clean(reports, 4)  # temporary bytes come back as the job left them
    assert stats["bytes.temporary_zeroed"] == 0
    assert stats["bytes.temporary_out"] > 0 and stats["bytes.persistent_out"] > 0
