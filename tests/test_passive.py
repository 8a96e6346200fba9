"""The passive first iteration (issue 5 item 4): LRU swapping on demand, measured trace."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from cupool.core.vocabulary import Buffer, Op, Trace
from cupool.devices import open_device
from cupool.io import load_trace
from cupool.runtime.passive import PassiveOutOfMemoryError, passive_iteration

TRACES = Path(__file__).resolve().parents[1] / "cupool" / "data" / "traces"

# op:        0    1    2    3
# buffer 0:  [p   u         u]      produced at 0, used at 1 and 3
# buffer 1:       [p   u]           produced at 1, used at 2
# buffer 2:            [p   u]      produced at 2, used at 3
# Budget 1024: ops 2 and 3 need 1 and 2 beside 0, so 0 (least recently used) is
# evicted at op 2 and swapped back in at op 3.
SMALL = Trace("small", tuple(Op(f"op{i}", duration_us=200.0) for i in range(4)), (
    Buffer(0, 512, 0, 4, uses=(1, 3)),
    Buffer(1, 512, 1, 3, uses=(2,)),
    Buffer(2, 512, 2, 4, uses=(3,)),
))


def test_lru_eviction_swaps_back_on_access_and_logs_every_access():
    with open_device("emulated", capacity="1MiB", h2d_gbps=0.001, d2h_gbps=0.001) as device:
        run = passive_iteration(SMALL, 1024, device)
    assert (run.swap_outs, run.swap_ins) == (1, 1)
    assert [(a.op, a.buffer_id, a.intent) for a in run.accesses] == [
        (0, 0, "write"), (1, 0, "read"), (1, 1, "write"), (2, 1, "read"), (2, 2, "write"),
        (3, 0, "read"), (3, 2, "read")]
    slowest = sorted(run.accesses, key=lambda a: a.swap_us)[-2:]
    assert {(a.op, a.buffer_id) for a in slowest} == {(2, 2), (3, 0)}
    assert all(a.swap_us > 400 for a in slowest)  # 512 B at 1 MB/s: ~512 µs each way
    assert run.corrupt_bytes == 0 and run.bytes_checked == 512 * 4
    assert run.peak_device_bytes <= 1024


def test_measured_trace_keeps_buffers_and_excludes_swap_time():
    # 512 B at 0.1 MB/s: ~5 ms per copy, so the swapping (~10 ms) dwarfs the ops (800 µs)
    # and any timer overshoot a loaded machine adds.
    with open_device("emulated", capacity="1MiB", h2d_gbps=0.0001, d2h_gbps=0.0001) as device:
        run = passive_iteration(SMALL, 1024, device)
    assert run.trace.buffers == SMALL.buffers
    durations = [op.duration_us for op in run.trace.ops]
    assert run.swap_us > 9000
    assert all(d >= 200.0 for d in durations), durations
    assert sum(durations) < 800 + run.swap_us / 2, (durations, run.swap_us)


def test_passive_run_of_a_real_trace_under_70_percent():
    trace = load_trace(TRACES / "resnet50_train_b32_fp32.trace.json.gz")
    budget = int(trace.lower_bound_bytes() * 0.7)
    with open_device("emulated", capacity="64MiB", h2d_gbps=55 / 4096,
                     d2h_gbps=55 / 4096) as device:
        run = passive_iteration(trace, budget, device, size_scale=4096, time_scale=20.0)
    assert run.trace.buffers == trace.buffers
    assert [b.uses for b in run.trace.buffers] == [b.uses for b in trace.buffers]
    assert run.swap_outs > 0 and run.swap_ins > 0 and run.corrupt_bytes == 0
    assert run.peak_device_bytes <= budget
    measured = sum(op.duration_us for op in run.trace.ops)
    given = sum(op.duration_us or 10.0 for op in trace.ops)
    # the swapping, several times the iteration here, is not in the durations (timer
    # overshoot is: ~80 µs of wall time per op, 4 trace µs at time_scale 20, more under load)
    assert run.swap_us > 2 * given
    assert given <= measured < given + run.swap_us / 2, (measured, given, run.swap_us)
    uses = sum(len({b.start, *b.uses}) for b in trace.buffers)
    assert len(run.accesses) == uses


def test_a_working_set_over_the_budget_raises_with_the_numbers():
    with open_device("emulated", capacity="1MiB") as device:
        with pytest.raises(PassiveOutOfMemoryError, match=r"op 1: buffer 1 \(512 bytes\)"):
            passive_iteration(SMALL, 768, device)
        assert device.mem_info()[0] > 0
    error = pickle.loads(pickle.dumps(PassiveOutOfMemoryError(2, 2, 512, 768)))
    assert (error.op, error.nbytes) == (2, 512)
