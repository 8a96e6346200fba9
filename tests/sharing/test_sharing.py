"""Time-shared devices: layout and admission arithmetic, needs from traces, errors, and the
broker and client in one process (the broker runs in a thread; each client has its own
socket). The multi-process scenarios are in ``test_sharing_processes.py``."""

from __future__ import annotations

import pickle
import shutil
import tempfile
import threading
import time
from multiprocessing.connection import Client

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cupool.core.vocabulary import PERSISTENT, Buffer, Op, Trace
from cupool.data import DATA_DIR
from cupool.io import load_trace
from cupool.sharing import (
    NAIVE,
    AdmissionError,
    ArenaError,
    Broker,
    BrokerConfig,
    BrokerRunningError,
    BrokerUnreachableError,
    Geometry,
    JobNeeds,
    ProtocolError,
    RegionAccessError,
    RegionBoundsError,
    SharingArgumentError,
    SharingClient,
    SliceTimeoutError,
    StaleGrantError,
    broker_paths,
    broker_request,
    needs_from_trace,
    place_slot,
)
from cupool.sharing.errors import BrokerGoneError, error_from_wire
from cupool.sharing.layout import Slot, align_up, slots_overlap


# ------------------------------------------------------------------ layout and admission
def test_geometry_splits_the_arena():
    geometry = Geometry(capacity_bytes=10_000, temporary_bytes=3000, gap_bytes=100, alignment=512)
    assert geometry.temporary_region_bytes == 3072
    assert geometry.temporary_offset == 6656  # (10000 - 3072) aligned down to 512
    assert geometry.persistent_area_bytes == 6556


def test_slots_are_side_by_side_with_gap_and_alignment():
    geometry = Geometry(capacity_bytes=1 << 20, temporary_bytes=4096, gap_bytes=100, alignment=256)
    slots = []
    for job, size in (("a", 1000), ("b", 10), ("c", 256)):
        slots.append(place_slot(geometry, JobNeeds(job, size, 0), slots))
    # a: [0, 1024) + gap 100 -> b at align_up(1124) = 1280; b: [1280, 1536) -> c at 1792
    assert [(s.job, s.offset, s.size) for s in slots] == [("a", 0, 1000), ("b", 1280, 10),
                                                           ("c", 1792, 256)]
    assert not any(slots_overlap(x, y, 256) for x in slots for y in slots if x is not y)


def test_slot_overlaps_the_fewest_bytes_when_the_area_is_full():
    geometry = Geometry(capacity_bytes=4096, temporary_bytes=1024, alignment=512)  # area 3072
    a = place_slot(geometry, JobNeeds("a", 2048, 0), [])
    b = place_slot(geometry, JobNeeds("b", 512, 0), [a])
    c = place_slot(geometry, JobNeeds("c", 1024, 0), [a, b])
    # candidates 0 (overlaps a by 1024) and 2048 (overlaps b by 512; 3072 fits exactly)
    assert (a.offset, b.offset, c.offset) == (0, 2048, 2048)
    assert slots_overlap(b, c, 512) and not slots_overlap(a, c, 512)


def test_naive_policy_puts_every_slot_at_zero():
    geometry = Geometry(capacity_bytes=1 << 20, temporary_bytes=1024)
    a = place_slot(geometry, JobNeeds("a", 100, 0), [], NAIVE)
    b = place_slot(geometry, JobNeeds("b", 200, 0), [a], NAIVE)
    assert a.offset == b.offset == 0


def test_admission_refuses_with_the_numbers():
    geometry = Geometry(capacity_bytes=8192, temporary_bytes=2048, gap_bytes=0, alignment=512)
    with pytest.raises(AdmissionError) as caught:
        place_slot(geometry, JobNeeds("big", 7000, 4096), [])
    error = caught.value
    assert (error.persistent_bytes, error.temporary_bytes) == (7000, 4096)
    assert (error.persistent_area_bytes, error.temporary_region_bytes) == (6144, 2048)
    assert "persistent_bytes (=7000) > persistent area (6144 B)" in str(error)
    assert "temporary_bytes (=4096) > temporary region (2048 B)" in str(error)
    place_slot(geometry, JobNeeds("fits", 6144, 2048), [])  # exactly at the limits


def test_geometry_for_jobs_keeps_every_slot_exclusive():
    jobs = [JobNeeds("a", 1000, 5000), JobNeeds("b", 3000, 7000)]
    geometry = Geometry.for_jobs(jobs, gap_bytes=64, alignment=512)
    assert geometry.temporary_bytes == 7000
    slots = []
    for needs in jobs:
        slots.append(place_slot(geometry, needs, slots))
    assert not slots_overlap(*slots, 512)


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=8),
       area=st.integers(5000, 30000), gap=st.integers(0, 700),
       alignment=st.sampled_from([1, 64, 512]))
def test_slot_placement_properties(sizes, area, gap, alignment):
    geometry = Geometry(area + gap + 1024, 1024, gap, alignment)
    slots = []
    for index, size in enumerate(sizes):
        needs = JobNeeds(f"j{index}", size, 0)
        if align_up(size, alignment) > geometry.persistent_area_bytes:
            with pytest.raises(AdmissionError):
                place_slot(geometry, needs, slots)
            continue
        slot = place_slot(geometry, needs, slots)
        assert slot.offset % alignment == 0 and slot.size == size
        assert slot.end(alignment) <= geometry.persistent_area_bytes
        slots.append(slot)
    reserved = sum(align_up(align_up(s.size, alignment) + gap, alignment) for s in slots)
    if reserved <= geometry.persistent_area_bytes:  # everything fits: nothing may overlap
        assert not any(slots_overlap(a, b, alignment) for a in slots for b in slots
                       if a is not b)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"capacity_bytes": 100, "temporary_bytes": 4096}, "capacity_bytes"),
    ({"capacity_bytes": 4096, "temporary_bytes": 0, "alignment": 3}, "alignment"),
    ({"capacity_bytes": -1, "temporary_bytes": 0}, "capacity_bytes"),
    ({"capacity_bytes": 4096, "temporary_bytes": 0, "gap_bytes": 1.5}, "gap_bytes"),
])
def test_bad_geometry_is_a_typed_error(kwargs, field):
    with pytest.raises(SharingArgumentError) as caught:
        Geometry(**kwargs)
    assert caught.value.field == field


@pytest.mark.parametrize(("args", "field"), [
    (("", 1, 1), "job"), (("a", -1, 1), "persistent_bytes"), (("a", 1, "2"), "temporary_bytes"),
])
def test_bad_needs_are_typed_errors(args, field):
    with pytest.raises(SharingArgumentError) as caught:
        JobNeeds(*args)
    assert caught.value.field == field


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"device": "tpu:0"}, "device"), ({"slice_iterations": 0}, "slice_iterations"),
    ({"policy": "lru"}, "policy"),
])
def test_bad_broker_config_is_a_typed_error(kwargs, field):
    with pytest.raises(SharingArgumentError) as caught:
        BrokerConfig(capacity_bytes=1 << 20, temporary_bytes=1024, **kwargs)
    assert caught.value.field == field


def test_scaled_needs_round_up():
    assert JobNeeds("a", 1001, 10).scaled(10) == JobNeeds("a", 101, 1)


# ------------------------------------------------------------------ needs from a trace
def test_needs_from_trace_sums_persistent_and_plans_the_rest():
    ops = tuple(Op(f"op{i}") for i in range(4))
    trace = Trace("tiny", ops, (
        Buffer(0, 8, 0, 4, kind=PERSISTENT), Buffer(1, 16, 0, 2), Buffer(2, 16, 2, 4),
        Buffer(3, 24, 1, 3), Buffer(4, 4, 0, 4, kind=PERSISTENT)))
    # temporary: b1 and b3 overlap (40 B at op 1), b2 reuses b1's bytes -> 40 B
    assert needs_from_trace(trace) == JobNeeds("tiny", 12, 40)
    assert needs_from_trace(trace, job="j").job == "j"


def test_needs_from_a_bundled_inference_trace():
    trace = load_trace(DATA_DIR / "traces" / "resnet50_infer_b8.trace.json.gz")
    needs = needs_from_trace(trace)
    persistent = sum(b.size for b in trace.buffers if b.kind == PERSISTENT)
    assert needs.persistent_bytes == persistent
    temporary = [b for b in trace.buffers if b.kind != PERSISTENT]
    lower = Trace("t", trace.ops, tuple(temporary)).lower_bound_bytes()
    assert lower <= needs.temporary_bytes <= sum(b.size for b in temporary)


# ------------------------------------------------------------------ errors
def test_errors_pickle_and_cross_the_wire():
    errors = [AdmissionError("a", 1, 2, 3, 4), StaleGrantError("a", 1, 2, 3, 4),
              RegionBoundsError("a", "persistent", 10, 5, 12),
              SharingArgumentError("op", "field", 7, "must be > 8"),
              BrokerGoneError("/x.sock", 9, "gone"), SliceTimeoutError("a", 0.5),
              ArenaError("cuda:0", "create a 1-byte", "no GPU")]
    for error in errors:
        for copy in (pickle.loads(pickle.dumps(error)), error_from_wire(error.to_wire())):
            assert type(copy) is type(error) and str(copy) == str(error)
    assert isinstance(error_from_wire({"type": "KeyboardInterrupt", "args": []}), ProtocolError)


# ------------------------------------------------------------------ broker in a thread
@pytest.fixture
def runtime_dir():
    # AF_UNIX paths are limited to ~100 bytes: keep the directory short
    path = tempfile.mkdtemp(prefix="cps", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def start_broker(runtime_dir):
    brokers = []

    def start(**overrides):
        options = {"capacity_bytes": 64 << 10, "temporary_bytes": 8 << 10,
                   "runtime_dir": runtime_dir, **overrides}
        broker = Broker(BrokerConfig(**options)).start()
        brokers.append(broker)
        return broker

    yield start
    for broker in brokers:
        broker.stop()


def _client(runtime_dir, job, persistent, temporary, **options):
    return SharingClient(job, persistent, temporary, runtime_dir=runtime_dir,
                         reply_timeout_s=10.0, **options)


def test_regions_are_bounds_checked_and_neighbours_untouched(start_broker, runtime_dir):
    broker = start_broker(alignment=512)
    a = _client(runtime_dir, "a", 1000, 2000)
    b = _client(runtime_dir, "b", 1000, 2000)
    b_offset = b.layout["persistent"]["offset"]
    with b.iteration() as grant:
        grant.persistent.write(0, b"\xbb" * 1000)
    with a.iteration() as grant:
        grant.persistent.write(0, b"\xaa" * 1000)
        for offset, data in ((1000, b"x"), (999, b"xy"), (-1, b"x"), (0, b"x" * 1001)):
            with pytest.raises(RegionBoundsError) as caught:
                grant.persistent.write(offset, data)
            assert caught.value.size == 1000
        with pytest.raises(RegionBoundsError):
            grant.temporary.write(1999, b"xy")  # declared 2000 B, region holds 8 KiB
        with pytest.raises(RegionBoundsError):
            grant.temporary.read(0, 2001)
        assert grant.persistent.array().size == 1000  # a view of exactly the region
        grant.persistent.write(np.int64(998), b"\xaa\xaa")
        with pytest.raises(SharingArgumentError):
            grant.persistent.read(0.5, 1)
    assert broker.read_arena(b_offset, 1000) == b"\xbb" * 1000
    assert broker.read_arena(0, 1000) == b"\xaa" * 1000
    assert broker.read_arena(1000, b_offset - 1000) == bytes(b_offset - 1000)
    a.close()
    b.close()


def test_regions_refuse_access_outside_a_slice(start_broker, runtime_dir):
    start_broker()
    client = _client(runtime_dir, "a", 100, 100)
    for call in (lambda: client.persistent.write(0, b"x"), lambda: client.temporary.read(0, 1),
                 lambda: client.temporary.array(), client.iteration_done, client.release):
        with pytest.raises(RegionAccessError):
            call()
    with client.iteration() as grant:
        grant.temporary.write(0, b"ok")
    client.close()
    with pytest.raises(RegionAccessError, match="closed"):
        client.persistent.read(0, 1)


def test_temporary_is_zeroed_at_slice_end_and_persistent_kept(start_broker, runtime_dir):
    broker = start_broker(slice_iterations=2)
    client = _client(runtime_dir, "a", 256, 4096)
    temporary_offset = client.layout["temporary"]["offset"]
    with client.iteration() as grant:
        grant.persistent.write(0, b"\x07" * 256)
        grant.temporary.fill(9)
    assert client.holding  # slice of 2 iterations: still held
    assert broker.read_arena(temporary_offset, 4096) == b"\x09" * 4096
    with client.iteration() as grant:
        assert grant.temporary.read(0, 4) == b"\x09" * 4  # same slice: kept
    assert not client.holding
    assert broker.read_arena(temporary_offset, 4096) == bytes(4096)
    with client.iteration() as grant:
        assert grant.persistent.read() == b"\x07" * 256
        assert grant.temporary.read() == bytes(4096)
    assert broker.stats()["bytes.temporary_zeroed"] == 4096  # the second slice is still held
    client.close()


def test_a_clients_writes_reach_the_broker_only_when_it_synchronizes(start_broker,
                                                                     runtime_dir):
    # As on a GPU, where cudaMemset and a pageable cudaMemcpy return before the device has
    # finished and another process is not ordered with them, the emulated client queues its
    # writes: the broker sees them once the client synchronizes, which the client does before
    # it reports an iteration done; the client's own reads always see them.
    broker = start_broker(slice_iterations=2)
    client = _client(runtime_dir, "a", 256, 4096)
    offset = client.layout["temporary"]["offset"]
    with client.iteration() as grant:
        grant.temporary.fill(5)
        grant.temporary.write(0, b"ab")
        assert broker.read_arena(offset, 4) == bytes(4)  # not yet visible to another process
        assert grant.temporary.read(0, 4) == b"ab\x05\x05"
        grant.temporary.write(2, b"cd")
        assert broker.read_arena(offset, 4) == b"ab\x05\x05"
    assert broker.read_arena(offset, 4) == b"abcd"  # iteration_done synchronized first
    with client.iteration() as grant:
        grant.temporary.fill(6)
    with client.iteration() as grant:  # the fill landed before the broker zeroed the slice
        assert grant.temporary.read(0, 4) == bytes(4)
    client.close()


def test_round_robin_order_and_slice_length(start_broker, runtime_dir):
    broker = start_broker(slice_iterations=2)
    clients = {name: _client(runtime_dir, name, 64, 64) for name in "abc"}
    order = []
    lock = threading.Lock()

    def run(client, iterations):
        for _ in range(iterations):
            with client.iteration(timeout_s=10) as grant:
                with lock:
                    order.append((client.job, grant.grant))
                time.sleep(0.02)

    clients["a"].acquire()  # a holds the first slice while b, then c, queue up
    threads = []
    for name, iterations in (("b", 4), ("c", 4)):
        threads.append(threading.Thread(target=run, args=(clients[name], iterations)))
        threads[-1].start()
        queued = len(threads)
        _wait_until(lambda n=queued: _queued(broker) == n)
    threads.append(threading.Thread(target=run, args=(clients["a"], 6)))
    threads[-1].start()
    for thread in threads:
        thread.join(30)
    grants = {}
    for job, grant in order:
        grants.setdefault(grant, []).append(job)
    assert [jobs for _, jobs in sorted(grants.items())] == [
        [job, job] for job in "abcabca"]  # strict rotation, two iterations per slice
    assert broker.stats()["switches"] == 6
    for client in clients.values():
        client.close()


def _queued(broker) -> int:
    with broker._cond:
        return len(broker._queue)


def _wait_until(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


def test_acquire_timeout_is_typed_and_leaves_the_queue(start_broker, runtime_dir):
    broker = start_broker()
    a = _client(runtime_dir, "a", 64, 64)
    b = _client(runtime_dir, "b", 64, 64)
    a.acquire()
    with pytest.raises(SliceTimeoutError, match="timeout_s"):
        b.acquire(timeout_s=0.05)
    assert _queued(broker) == 0
    a.release()
    assert b.acquire(timeout_s=5).grant > 0
    a.close()
    b.close()


def test_admission_error_reaches_the_client(start_broker, runtime_dir):
    broker = start_broker(capacity_bytes=64 << 10, temporary_bytes=8 << 10)
    with pytest.raises(AdmissionError) as caught:
        _client(runtime_dir, "huge", 1 << 20, 100)
    assert caught.value.persistent_bytes == 1 << 20
    assert caught.value.persistent_area_bytes == (64 << 10) - (8 << 10)
    with pytest.raises(SharingArgumentError):
        _client(runtime_dir, "bad", -5, 100)
    assert broker.stats()["jobs.refused"] == 1
    a = _client(runtime_dir, "a", 64, 64)
    with pytest.raises(SharingArgumentError, match="connected job"):
        _client(runtime_dir, "a", 64, 64)
    a.close()


def test_eviction_round_trip_is_byte_exact(start_broker, runtime_dir):
    # area = 64 KiB - 8 KiB = 56 KiB: a (40 KiB) and b (30 KiB) cannot both be resident
    broker = start_broker(capacity_bytes=64 << 10, temporary_bytes=8 << 10)
    a = _client(runtime_dir, "a", 40 << 10, 1024)
    b = _client(runtime_dir, "b", 30 << 10, 1024)
    assert not b.exclusive
    data = {"a": np.random.default_rng(1).integers(0, 256, 40 << 10, dtype=np.uint8),
            "b": np.random.default_rng(2).integers(0, 256, 30 << 10, dtype=np.uint8)}
    for round_ in range(3):
        for client in (a, b):
            with client.iteration() as grant:
                if round_ == 0:
                    grant.persistent.write(0, data[client.job])
                assert grant.persistent.read() == data[client.job].tobytes()
    stats = broker.stats()
    assert stats["evictions"] == 5 and stats["restores"] == 5  # b starts evicted (zeros)
    assert stats["bytes.persistent_in"] == 2 * (40 << 10) + 2 * (30 << 10)
    assert stats["bytes.persistent_out"] == 3 * (40 << 10) + 2 * (30 << 10)
    evicted = [e["job"] for e in broker.events() if e["event"] == "evict"]
    assert evicted == ["a", "b", "a", "b", "a"]
    a.close()
    b.close()


def test_broker_unreachable_and_wrong_key(runtime_dir, start_broker):
    with pytest.raises(BrokerUnreachableError, match="key file"):
        _client(runtime_dir, "a", 1, 1)
    with pytest.raises(BrokerUnreachableError, match="no cupool broker"):
        _client(runtime_dir, "a", 1, 1, authkey=b"k")
    start_broker()
    with pytest.raises(BrokerUnreachableError, match="Authentication"):
        _client(runtime_dir, "a", 1, 1, authkey=b"wrong key")
    assert broker_request("stats", runtime_dir=runtime_dir)["stats"]["jobs.active"] == 0


def test_a_device_that_cannot_hold_the_arena_is_a_typed_error(start_broker, runtime_dir):
    from cupool.devices import probe_cuda

    if probe_cuda()[0]:
        pytest.skip("a GPU is usable here: the failure cannot be observed")
    with pytest.raises(ArenaError, match="cannot create a 65536-byte arena on 'cuda:0'"):
        start_broker(device="cuda:0")
    code, _, err = _cli(["broker", "--capacity", "1MiB", "--temporary", "1KiB", "--device",
                         "cuda:0", "--runtime-dir", runtime_dir])
    assert code == 2 and "cannot create a 1048576-byte arena" in err and err.count("\n") == 1


def test_second_broker_is_refused(start_broker, runtime_dir):
    start_broker()
    with pytest.raises(BrokerRunningError, match="already has a broker") as caught:
        start_broker()
    assert caught.value.device == "emulated:0"
    start_broker(device="emulated:1")  # another device is fine


def test_protocol_version_and_stale_grants_are_refused(start_broker, runtime_dir):
    broker = start_broker()
    paths = broker_paths("emulated:0", runtime_dir)
    with open(paths["key"], "rb") as file:
        key = file.read()
    with Client(paths["address"], "AF_UNIX", authkey=key) as conn:
        conn.send({"v": 99, "op": "hello", "seq": 1})
        answer = conn.recv()
        assert not answer["ok"] and answer["error"]["type"] == "ProtocolError"
        conn.send({"v": 1, "op": "acquire", "seq": 2, "epoch": broker.epoch})
        assert "before hello" in str(error_from_wire(conn.recv()["error"]))
        conn.send({"v": 1, "op": "hello", "seq": 3, "job": "raw", "persistent_bytes": 8,
                   "temporary_bytes": 8})
        assert conn.recv()["ok"]
        conn.send({"v": 1, "op": "acquire", "seq": 4, "epoch": broker.epoch + 1})
        assert isinstance(error_from_wire(conn.recv()["error"]), StaleGrantError)
        conn.send({"v": 1, "op": "acquire", "seq": 5, "epoch": broker.epoch})
        grant = conn.recv()["grant"]
        conn.send({"v": 1, "op": "iteration_done", "seq": 6, "epoch": broker.epoch,
                   "grant": grant - 1})
        error = error_from_wire(conn.recv()["error"])
        assert isinstance(error, StaleGrantError) and error.current_grant == grant


def test_naive_policy_swaps_the_whole_footprint(start_broker, runtime_dir):
    broker = start_broker(policy=NAIVE)
    a = _client(runtime_dir, "a", 4096, 2048)
    b = _client(runtime_dir, "b", 2048, 1024)
    for _ in range(3):
        for client in (a, b):
            with client.iteration() as grant:
                grant.temporary.fill(5)
    switches = [e for e in broker.events() if e["event"] == "switch"]
    assert len(switches) == 5
    # from the second switch on, both footprints are copied: out and in
    for switch in switches[2:]:
        assert switch["persistent_bytes_moved"] == 4096 + 2048
        assert switch["temporary_bytes_moved"] == 2048 + 1024
    assert broker.stats()["bytes.temporary_zeroed"] == 0
    a.close()
    b.close()


def test_stopped_broker_gives_clients_a_typed_error(start_broker, runtime_dir):
    broker = start_broker()
    client = _client(runtime_dir, "a", 64, 64)
    with client.iteration() as grant:
        grant.persistent.write(0, b"x")
    broker.stop()
    with pytest.raises(BrokerGoneError):
        client.acquire(timeout_s=5)
    with pytest.raises(BrokerGoneError):
        client.persistent.read(0, 1)
    client.close()  # never raises because the broker is gone


def test_slot_of_a_departed_job_is_zeroed_for_the_next(start_broker, runtime_dir):
    broker = start_broker()
    a = _client(runtime_dir, "a", 1024, 64)
    with a.iteration() as grant:
        grant.persistent.fill(0xEE)
    a.close()
    assert broker.read_arena(0, 1024) == bytes(1024)
    b = _client(runtime_dir, "b", 1024, 64)
    assert b.layout["persistent"]["offset"] == 0
    with b.iteration() as grant:
        assert grant.persistent.read() == bytes(1024)
    b.close()
    assert Slot("x", 0, 1).end(512) == 512


# ------------------------------------------------------------------ command line
def _cli(argv):
    import io

    from cupool.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = main(argv, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


TRACE_DIR = DATA_DIR / "traces"


def test_cli_share_lays_out_jobs_and_refuses_with_numbers():
    import json

    resnet = str(TRACE_DIR / "resnet50_infer_b8.trace.json.gz")
    mobilenet = str(TRACE_DIR / "mobilenetv2_infer_b1.trace.json.gz")
    code, out, _ = _cli(["share", resnet, mobilenet, resnet, "--json"])
    document = json.loads(out)
    assert code == 0 and document["all_admitted"] and document["all_resident"]
    assert [j["job"] for j in document["jobs"]] == ["resnet50_infer_b8", "mobilenetv2_infer_b1",
                                                    "resnet50_infer_b8#2"]
    code, out, _ = _cli(["share", resnet, mobilenet, "--capacity", "150MB", "--json"])
    document = json.loads(out)
    assert code == 1 and not document["all_admitted"]
    assert "persistent_bytes (=107257928) > persistent area (66506752 B)" in \
        document["jobs"][0]["reason"]
    code, out, _ = _cli(["share", resnet, resnet, "--capacity", "250MB", "--gap", "4KiB"])
    assert code == 0 and "evicted while not scheduled" in out


@pytest.mark.parametrize("argv", [
    ["share", str(TRACE_DIR / "resnet50_infer_b8.trace.json.gz"), "--capacity", "12XB"],
    ["share", str(TRACE_DIR / "resnet50_infer_b8.trace.json.gz"), "--scale", "0"],
    ["share", "/nonexistent/trace.json"],
    ["broker"],
    ["broker", "--capacity", "1MiB", "--temporary", "2MiB", "--runtime-dir", "/tmp"],
    ["broker", "--capacity", "1MiB", "--temporary", "1KiB", "--device", "tpu:0"],
])
def test_cli_bad_input_is_one_line_and_exit_2(argv):
    code, out, err = _cli(argv)
    assert code == 2 and out == ""
    assert err.startswith("cupool: error: ") and err.count("\n") == 1


def test_cli_broker_runs_reports_and_stops(runtime_dir):
    code, _, err = _cli(["broker", "--stats", "--runtime-dir", runtime_dir])
    assert code == 2 and "no cupool broker reachable" in err
    result = {}

    def serve():
        argv = ["broker", "--capacity", "256KiB", "--temporary", "64KiB", "--runtime-dir",
                runtime_dir, "--json"]
        result.update(zip(("code", "out", "err"), _cli(argv), strict=True))

    thread = threading.Thread(target=serve)
    thread.start()
    _wait_until(lambda: _broker_answers(runtime_dir))
    with _client(runtime_dir, "a", 1024, 1024) as client, client.iteration():
        pass
    code, out, _ = _cli(["broker", "--stats", "--runtime-dir", runtime_dir])
    assert code == 0 and "slices.granted = 1" in out
    assert _cli(["broker", "--stop", "--runtime-dir", runtime_dir])[0] == 0
    thread.join(10)
    assert not thread.is_alive() and result["code"] == 0
    assert '"slices.granted": 1' in result["out"]


def _broker_answers(runtime_dir) -> bool:
    try:
        broker_request("stats", runtime_dir=runtime_dir)
    except BrokerUnreachableError:
        return False
    return True


def test_a_stalled_connection_does_not_block_other_clients(start_broker, runtime_dir):
    import socket

    start_broker()
    address = broker_paths("emulated:0", runtime_dir)["address"]
    with socket.socket(socket.AF_UNIX) as stalled, socket.socket(socket.AF_UNIX) as garbage:
        stalled.connect(address)  # never answers the challenge
        garbage.connect(address)
        garbage.sendall(b"\x00\x00\x00\x04nope")
        with _client(runtime_dir, "a", 64, 64) as client, client.iteration() as grant:
            grant.temporary.write(0, b"ok")
