"""The stress run's workloads: random allocations for the pool scenario, a seeded synthetic
training step for the swap scenario."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from cupool.core.vocabulary import PERSISTENT, Buffer, Op, Trace


class Workload(NamedTuple):
    """One iteration of the pool scenario's program (see :func:`random_workload`)."""

    steps: list
    carried: int | None
    persistent: list


def random_workload(rng: np.random.Generator, allocations: int | None = None) -> Workload:
    """One iteration of random allocations and frees: a :class:`Workload`
    ``(steps, carried, persistent)``.

    ``steps`` is a list of ``("alloc", k, size)`` and ``("free", k)`` in program order
    (every block ``k`` allocated once, freed once, except ``carried``); sizes are mostly
    log-uniform in ``[1, 512 KiB]`` with a few exact repeats. ``carried`` is the block kept
    across the iteration boundary (freed after the next iteration's second allocation).
    ``persistent`` are the sizes of blocks allocated outside any iteration."""
    n = int(allocations if allocations is not None else rng.integers(12, 48))
    sizes = np.exp(rng.uniform(0.0, np.log(512 << 10), size=n)).astype(np.int64) + 1
    repeats = rng.random(n) < 0.2
    sizes[repeats] = rng.choice([512, 4096, 65536], size=int(repeats.sum()))
    steps, live = [], []
    for k in range(n):
        steps.append(("alloc", k, int(sizes[k])))
        live.append(k)
        for j in [j for j in live if rng.random() < 0.3]:
            steps.append(("free", j))
            live.remove(j)
    carried = int(rng.choice(live)) if live else None
    rng.shuffle(live)
    steps += [("free", j) for j in live if j != carried]
    persistent = [int(s) for s in rng.integers(1, 1 << 16, size=int(rng.integers(1, 4)))]
    return Workload(steps, carried, persistent)


def training_trace(seed: int, layers: int | None = None) -> Trace:
    """A seeded synthetic training step with room to swap at 50% of its lower bound.

    Ops: forward ``fw0 .. fw(L-1)``, backward ``bw(L-1) .. bw0``, one optimizer op.
    Layer ``l``'s activation lives from ``fw l`` to ``bw l`` (uses: ``fw l``, ``fw l+1``,
    ``bw l``), so the live set climbs through the forward pass and drains through the
    backward one while each op touches only a few buffers; a one-op workspace per forward
    op; a gradient carried from ``bw l`` to the next backward op; small persistent weights
    used at ``fw l``, ``bw l`` and the optimizer. Sizes are random byte counts (not
    aligned), durations 50-300 µs. ::

        op:   fw0  fw1  fw2  bw2  bw1  bw0  opt
        a0    [=========================)        uses fw0, fw1, bw0
        a1         [===============)             uses fw1, fw2, bw1
        a2              [=====)                  uses fw2, bw2
        W*    [==================================)  persistent
    """
    rng = np.random.default_rng(seed)
    count = int(layers if layers is not None else rng.integers(10, 17))
    fw = list(range(count))
    bw = [2 * count - 1 - layer for layer in range(count)]
    opt = 2 * count
    ops = tuple(Op(f"fw{layer}", float(rng.uniform(50, 300)), phase="fw") for layer in fw) \
        + tuple(Op(f"bw{layer}", float(rng.uniform(50, 300)), phase="bw")
                for layer in reversed(range(count))) \
        + (Op("opt", float(rng.uniform(50, 300)), phase="opt"),)
    buffers: list[Buffer] = []

    def add(size, start, end, uses, kind="temporary", name=""):
        buffers.append(Buffer(len(buffers), int(size), start, end, tuple(sorted(set(uses))),
                              kind, name))

    for layer in range(count):
        add(rng.integers(4 << 10, 24 << 10), 0, opt + 1, (fw[layer], bw[layer], opt),
            PERSISTENT, f"W{layer}")
    for layer in range(count):
        uses = [fw[layer], bw[layer]] + ([fw[layer + 1]] if layer + 1 < count else [])
        add(rng.integers(48 << 10, 256 << 10), fw[layer], bw[layer] + 1, uses, name=f"a{layer}")
        add(rng.integers(1, 64 << 10), fw[layer], fw[layer] + 1, (fw[layer],),
            name=f"ws{layer}")
    for layer in reversed(range(count)):
        nxt = bw[layer] + 1
        add(rng.integers(8 << 10, 64 << 10), bw[layer], nxt + 1, (bw[layer], nxt),
            name=f"g{layer}")
    return Trace(f"stress-train-{seed}", ops, tuple(buffers), source="cupool.app.stress")
