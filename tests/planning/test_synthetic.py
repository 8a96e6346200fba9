"""The synthetic problem families: same seed, same problem; the documented shapes hold."""

from __future__ import annotations

import numpy as np
import pytest

from cupool.planning.synthetic import lstm_problem, random_problem, small_problem


def arrays(p):
    return p.starts, p.ends, p.sizes


@pytest.mark.parametrize("make", [lambda s: random_problem(500, s), lambda s: lstm_problem(6, 2, s),
                                  lambda s: small_problem(s)], ids=["random", "lstm", "small"])
def test_same_seed_same_problem_other_seed_other_problem(make):
    same = [np.array_equal(a, b) for a, b in zip(arrays(make(4)), arrays(make(4)), strict=True)]
    other = [np.array_equal(a, b) for a, b in zip(arrays(make(4)), arrays(make(5)), strict=True)]
    assert all(same)
    assert not all(other)


def test_random_problem_shape():
    p = random_problem(20_000, seed=2, mean_lifetime=8.0, live_at_once=32.0)
    assert (p.n, p.num_ops) == (20_000, 5_000)
    assert ((p.starts >= 0) & (p.starts < p.ends) & (p.ends <= p.num_ops)).all()
    assert ((p.sizes % 256 == 0) & (p.sizes >= 256) & (p.sizes <= (1 << 24) + 256)).all()
    live = np.cumsum(np.bincount(p.starts, minlength=p.num_ops + 1)
                     - np.bincount(p.ends, minlength=p.num_ops + 1))[:-1]
    assert 28 <= live.mean() <= 36 and live.max() < 80      # short-lived: few live at once


def test_lstm_problem_counts_and_lifetimes():
    steps, layers = 5, 3
    p = lstm_problem(steps, layers, seed=1, hidden=64)
    assert p.n == 15 * steps * layers + 4 * layers
    assert p.num_ops == 5 * steps * layers + 1
    full = (p.starts == 0) & (p.ends == p.num_ops)
    assert full.sum() == 4 * layers                           # weights, grads, two moments
    forward_ops = 3 * steps * layers
    saved = (p.starts < forward_ops) & (p.ends > forward_ops) & ~full
    assert saved.sum() == 7 * steps * layers                  # i, f, g, o, c, tanh c, h
    assert p.live_bytes().argmax() in range(forward_ops - 3, forward_ops + 2)   # the apex


@pytest.mark.parametrize(("steps", "count"), [(200, 12_016), (250, 15_016)])
def test_lstm_problem_default_and_bench_sizes_have_12_to_15_thousand_buffers(steps, count):
    assert lstm_problem(steps).n == count


def test_small_problem_mixes_full_horizon_and_short_lifetimes():
    problems = [small_problem(seed, n=12, num_ops=8) for seed in range(20)]
    starts = np.concatenate([p.starts for p in problems])
    ends = np.concatenate([p.ends for p in problems])
    assert ((starts >= 0) & (starts < ends) & (ends <= 8)).all()
    assert ((starts == 0) & (ends == 8)).any() and (ends - starts == 1).any()


def test_lstm_trace_is_trace_v1_with_the_documented_count(tmp_path):
    from cupool.io import load_trace, save_trace
    from cupool.planning.synthetic import lstm_trace

    trace = lstm_trace(250, 4, seed=0)
    assert len(trace.buffers) == 12 * 250 * 4 + 4 * 250 + 4 * (4 + 2) == 13_024
    path = tmp_path / "lstm.trace.json.gz"
    save_trace(trace, path)
    again = load_trace(path)                          # the strict trace-v1 reader
    assert again.digest() == trace.digest() and again.buffers == trace.buffers
    assert again.ops == trace.ops
    persistent = [b for b in trace.buffers if b.kind == "persistent"]
    assert len(persistent) == 4 * (4 + 2)
    assert all(b.uses and b.start <= b.uses[0] and b.uses[-1] < b.end for b in trace.buffers)
    assert all(b.uses[0] == b.start and b.uses[-1] == b.end - 1
               for b in trace.buffers if b.kind != "persistent")
    assert all(op.duration_us > 0 for op in trace.ops)
    assert lstm_trace(6, 2, seed=3) == lstm_trace(6, 2, seed=3)
    assert lstm_trace(6, 2, seed=3) != lstm_trace(6, 2, seed=4)
