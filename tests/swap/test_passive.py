"""The passive first iteration: LRU swapping on demand, measured trace.

The assertions hold on any machine, however loaded: counts, bytes, the access log, lower
bounds that pacing guarantees (a paced copy cannot finish before its size over the link's
bandwidth, an op not before its duration), the run's own bookkeeping (the swap time of the
run is the sum of its accesses'), and, under a virtual clock that only moves when a test
says so, that swap and check time are removed from the op durations exactly. How much
timer overshoot a real machine adds is no guarantee and is not asserted here.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from cupool.core.vocabulary import Buffer, Op, Trace
from cupool.devices import open_device
from cupool.io import load_trace
from cupool.swap import passive
from cupool.swap.passive import PassiveOutOfMemoryError, passive_iteration

TRACES = Path(__file__).resolve().parents[2] / "cupool" / "data" / "traces"

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


class VirtualClock:
    """Stands in for the ``time`` module inside :mod:`cupool.swap.passive`: its
    ``perf_counter`` moves only when the op waits (``sleep``) or a test ``charge``s it,
    so every duration the run measures is known exactly. It starts at 1 s, above every
    step added, so that ``deadline - now`` is exact and the op's wait loop ends."""

    def __init__(self) -> None:
        self.now = 1.0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def charge(self, seconds: float) -> None:
        self.now += seconds


def charge_swaps_and_checks(monkeypatch, clock: VirtualClock, swap_s_per_byte: float,
                            check_s_per_byte: float) -> list[tuple[str, int]]:
    """Make every swap copy and every pattern fill or check cost virtual time in
    proportion to its bytes, while doing its real work. Returns the list that logs each
    swap as ``("out" | "in", scaled bytes)``."""
    from cupool.kernels import reference

    swaps: list[tuple[str, int]] = []

    class ChargedCopyEngine(passive.CopyEngine):
        def swap_out(self, handle, ptr, nbytes, *args, **kwargs):
            clock.charge(nbytes * swap_s_per_byte)
            swaps.append(("out", nbytes))
            return super().swap_out(handle, ptr, nbytes, *args, **kwargs)

        def swap_in(self, handle, slot, nbytes, *args, **kwargs):
            clock.charge(nbytes * swap_s_per_byte)
            swaps.append(("in", nbytes))
            return super().swap_in(handle, slot, nbytes, *args, **kwargs)

    fill, count_mismatches = reference.fill, reference.count_mismatches

    def charged_fill(view, *args):
        clock.charge(len(view) * check_s_per_byte)
        return fill(view, *args)

    def charged_count(view, *args):
        clock.charge(len(view) * check_s_per_byte)
        return count_mismatches(view, *args)

    monkeypatch.setattr(passive, "time", clock)
    monkeypatch.setattr(passive, "CopyEngine", ChargedCopyEngine)
    monkeypatch.setattr(reference, "fill", charged_fill)
    monkeypatch.setattr(reference, "count_mismatches", charged_count)
    return swaps


def expected_accesses(trace: Trace) -> list[tuple[int, int, str]]:
    """The access log the module docstring promises, derived from the trace alone: op by
    op, each buffer the op produces or uses in id order, ``write`` where it is produced."""
    log = []
    for i in range(len(trace.ops)):
        for b in sorted(trace.buffers, key=lambda b: b.id):
            if i == b.start or i in b.uses:
                log.append((i, b.id, "write" if i == b.start else "read"))
    return log


def test_lru_eviction_swaps_back_on_access_and_logs_every_access():
    with open_device("emulated", capacity="1MiB", h2d_gbps=0.001, d2h_gbps=0.001) as device:
        run = passive_iteration(SMALL, 1024, device)
        stats = device.stats()
    assert (run.swap_outs, run.swap_ins) == (1, 1)
    assert (stats["copy_count.d2h"], stats["copy_count.h2d"]) == (1, 1)
    assert [(a.op, a.buffer_id, a.intent) for a in run.accesses] == [
        (0, 0, "write"), (1, 0, "read"), (1, 1, "write"), (2, 1, "read"), (2, 2, "write"),
        (3, 0, "read"), (3, 2, "read")] == expected_accesses(SMALL)
    # op 2 places buffer 2 by evicting 0; op 3 swaps 0 back in. Each is the first paced
    # copy on its link, so it takes at least 512 B at 1 MB/s = 512 µs of wall time.
    swapping = {(a.op, a.buffer_id): a.swap_us for a in run.accesses}
    assert swapping[2, 2] >= 512 and swapping[3, 0] >= 512, swapping
    assert run.swap_us == pytest.approx(sum(a.swap_us for a in run.accesses))
    assert run.corrupt_bytes == 0 and run.bytes_checked == 512 * 4
    assert run.peak_device_bytes <= 1024


def test_measured_trace_keeps_buffers_and_never_undercuts_an_op():
    # 512 B at 0.1 MB/s: each of the two copies is paced to at least 5120 µs.
    with open_device("emulated", capacity="1MiB", h2d_gbps=0.0001, d2h_gbps=0.0001) as device:
        run = passive_iteration(SMALL, 1024, device)
    assert run.trace.buffers == SMALL.buffers
    assert run.trace.source == "passive run of small"
    durations = [op.duration_us for op in run.trace.ops]
    assert all(d >= 200.0 for d in durations), durations  # each op waits its duration
    assert run.swap_us >= 2 * 5120
    assert run.swap_us == pytest.approx(sum(a.swap_us for a in run.accesses))


def test_swap_and_check_time_are_removed_from_the_op_durations_exactly(monkeypatch):
    """Under the virtual clock a swap copy costs 1 µs and a fill or check 0.1 µs per
    byte: the durations are the ops' own 200 µs to the last bit, the two 512-byte swaps
    are charged to the accesses that waited for them, and nothing else is."""
    clock = VirtualClock()
    charge_swaps_and_checks(monkeypatch, clock, swap_s_per_byte=1e-6, check_s_per_byte=1e-7)
    with open_device("emulated", capacity="1MiB") as device:
        run = passive_iteration(SMALL, 1024, device)
    assert [op.duration_us for op in run.trace.ops] == pytest.approx([200.0] * 4, abs=1e-6)
    assert [a.swap_us for a in run.accesses] == pytest.approx(
        [0, 0, 0, 0, 512, 512, 0], abs=1e-6)
    assert run.swap_us == pytest.approx(1024, abs=1e-6)
    # the whole iteration: ops, swaps and 7 checks of 512 B at 0.1 µs per byte
    assert (clock.now - 1.0) * 1e6 == pytest.approx(800 + 1024 + 7 * 51.2, abs=1e-6)


def test_passive_run_of_a_real_trace_under_70_percent(monkeypatch):
    """ResNet-50 at 70 % of its lower bound (sizes divided by 4096, time by 20): every
    access in the promised order, counts that agree with the device's copy counters,
    every byte checked, the peak under the budget, and, under the virtual clock, each
    op's measured duration equal to the trace's while the swapping costs exactly what
    its copies were charged."""
    trace = load_trace(TRACES / "resnet50_train_b32_fp32.trace.json.gz")
    budget = int(trace.lower_bound_bytes() * 0.7)
    size_scale, time_scale, swap_s_per_byte = 4096, 20.0, 1e-8
    clock = VirtualClock()
    swaps = charge_swaps_and_checks(monkeypatch, clock, swap_s_per_byte, check_s_per_byte=1e-9)
    with open_device("emulated", capacity="64MiB") as device:
        run = passive_iteration(trace, budget, device, size_scale=size_scale,
                                time_scale=time_scale)
        stats = device.stats()
    assert run.trace.buffers == trace.buffers
    assert [(a.op, a.buffer_id, a.intent) for a in run.accesses] == expected_accesses(trace)
    outs = [nbytes for direction, nbytes in swaps if direction == "out"]
    ins = [nbytes for direction, nbytes in swaps if direction == "in"]
    assert (run.swap_outs, run.swap_ins) == (len(outs), len(ins))
    assert run.swap_outs > 0 and run.swap_ins > 0
    assert run.swap_ins <= run.swap_outs  # a buffer comes back only after it went out
    # the device saw each swap that has bytes once (a buffer under 4096 B scales to 0)
    assert (stats["copy_count.d2h"], stats["copy_count.h2d"]) == (
        sum(n > 0 for n in outs), sum(n > 0 for n in ins))
    assert (stats["copy_bytes.d2h"], stats["copy_bytes.h2d"]) == (sum(outs), sum(ins))
    sizes = {b.id: b.size // size_scale for b in trace.buffers}
    assert run.bytes_checked == sum(sizes[a.buffer_id] for a in run.accesses
                                    if a.intent == "read")
    assert run.corrupt_bytes == 0
    assert run.peak_device_bytes <= budget
    given = [passive.DEFAULT_OP_US if op.duration_us is None else op.duration_us
             for op in trace.ops]  # some ops last 0 µs; only a missing duration is 10 µs
    assert [op.duration_us for op in run.trace.ops] == pytest.approx(given, rel=1e-9, abs=1e-6)
    copied = stats["copy_bytes.d2h"] + stats["copy_bytes.h2d"]
    assert run.swap_us == pytest.approx(copied * swap_s_per_byte * 1e6 / time_scale, rel=1e-9)
    assert run.swap_us == pytest.approx(sum(a.swap_us for a in run.accesses), rel=1e-9)


def test_a_working_set_over_the_budget_raises_with_the_numbers():
    with open_device("emulated", capacity="1MiB") as device:
        with pytest.raises(PassiveOutOfMemoryError, match=r"op 1: buffer 1 \(512 bytes\)"):
            passive_iteration(SMALL, 768, device)
        assert device.mem_info()[0] > 0
    error = pickle.loads(pickle.dumps(PassiveOutOfMemoryError(2, 2, 512, 768)))
    assert (error.op, error.nbytes) == (2, 512)
