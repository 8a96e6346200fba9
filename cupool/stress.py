"""``cupool stress``: the pool and the swap runtime under random load, every byte checked.

:func:`run_stress` opens a device (``"emulated"`` or ``"cuda"``) and runs three scenarios
in rounds until the time is used, then reports one flat dict (the ``--json`` object)::

    {"device", "seconds", "scenarios", "bytes_checked", "corrupt_bytes",
     "leaked_blocks", "late_prefetches", "errors"}

Scenarios (each round runs them in this order, with seeds derived from ``(seed, round)``):

``pool``
    A :class:`~cupool.allocator.pool.PlannedPool` on the device serves a random workload
    (:func:`random_workload`: random sizes from 1 byte to 512 KiB, random free order, one
    block carried across the iteration boundary, a few persistent blocks) for
    :data:`POOL_ITERATIONS` iterations: the first is recorded and planned, the rest are
    served from the plan (the plan is checked by the independent validator). Every block
    is filled with the pattern of ``(block, iteration)`` when allocated and verified when
    freed, so two live blocks sharing a byte are caught.
``swap``
    Swaps under pressure: a small trace (:func:`training_trace`, a seeded synthetic
    training step; from the second round on, every other round the bundled ResNet-50
    training trace with sizes divided by :data:`BUNDLED_SIZE_SCALE`) is planned at 50%
    of its lower bound (:data:`SWAP_BUDGET`) by a policy that swaps, validated, and run
    by :func:`walk_plan` (swap-ins and swap-outs on their own streams, patterns filled
    and verified by the kernels at every use); then the same plan is replayed by the
    real swap runtime (:func:`cupool.app.replay.replay`: planned pool, handles, copy
    engine, pinned staging, late-prefetch feedback), on a paced emulated device of its
    own when the run is emulated, on the GPU itself otherwise.
``streams``
    :data:`THREADS` threads, each with its own stream and its own blocks (taken from one
    shared pool, concurrently) and pinned buffers, copy patterns host → device →
    device → host :data:`STREAM_ROUNDS` times; the kernels verify the device copy and
    the host checks what came back.

The first round always runs all three scenarios, so even a very short run checks each
once; later rounds start only while time is left (a round may end after the deadline).

**Counting.** ``bytes_checked`` / ``corrupt_bytes`` count bytes compared with their
pattern and those that differed. ``late_prefetches`` counts swap-ins whose data had not
landed when the op that needs it was reached (both the walker's and the replay's).
``leaked_blocks`` is *measured* after each scenario's teardown (every array and pointer
dropped): pool blocks still live, plus device reservations still held beyond what the
device held before the scenario (after the pool is closed), plus one for a scenario that
leaves pinned host bytes allocated (the device counts pinned bytes, not blocks).
``errors`` counts scenarios that raised; their messages are kept in
:attr:`StressResult.messages`.

**Kernels.** ``fill_pattern`` / ``verify_pattern`` / ``spin`` from :mod:`cupool.kernels`
dispatch on the device: the NumPy twins on the emulated device, the CUDA kernels (compiled
once with NVRTC by the loader) on a GPU. :func:`open_stress_device` compiles every kernel
before anything runs, so a missing NVRTC or an unsupported GPU is one clear error.

**Fault injection** (``faults``, for tests that prove the checks can fail): ``"pool-corrupt"``
overwrites the first bytes of one pool block after its fill, ``"pool-leak"`` keeps one
pool block alive past the teardown, ``"swap-corrupt"`` flips bytes of the first host copy a
swap-out wrote, ``"streams-corrupt"`` overwrites device bytes before they are checked.

:func:`walk_plan` is a second, independent way to run a swapping plan — the device
protocol and the kernels only, no pool, handles or staging — so a fault in the runtime and
a fault in the device or the kernels show up separately.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from cupool import progress
from cupool.check import validate_plan, validate_swap_plan
from cupool.core.vocabulary import PERSISTENT, Buffer, Op, Plan, SwapIn, SwapOut, Trace
from cupool.errors import CupoolError, InputError

__all__ = ["BUNDLED_SIZE_SCALE", "DEVICES", "FAULTS", "JSON_KEYS", "POOL_ITERATIONS",
           "SCENARIOS", "STREAM_ROUNDS", "SWAP_BUDGET", "THREADS", "ScenarioResult",
           "StressError", "StressResult", "WalkError", "open_stress_device", "random_workload",
           "run_pool_scenario", "run_streams_scenario", "run_stress", "run_swap_scenario",
           "training_trace", "walk_plan"]

DEVICES = ("emulated", "cuda")
SCENARIOS = ("pool", "swap", "streams")
FAULTS = ("pool-corrupt", "pool-leak", "swap-corrupt", "streams-corrupt")
JSON_KEYS = ("device", "seconds", "scenarios", "bytes_checked", "corrupt_bytes",
             "leaked_blocks", "late_prefetches", "errors")
"""The keys of :meth:`StressResult.summary`, in order (the ``--json`` object)."""

POOL_ITERATIONS = 4
"""Iterations per pool scenario: one recorded, the rest served from the plan."""
SWAP_BUDGET = 0.5
"""The swap scenario's budget, as a fraction of the trace's lower bound."""
SWAP_POLICIES = ("capuchin", "greedy", "auto")
"""Budget policies tried in order until one gives a plan the walker can run."""
SWAP_ITERATIONS = 2
BUNDLED_TRACE = "resnet50_train_b32_fp32"
BUNDLED_SIZE_SCALE = 4096
THREADS = 4
STREAM_ROUNDS = 8
EMULATED_CAPACITY = 512 << 20
"""Bytes of the emulated device :func:`open_stress_device` opens (a ceiling, not a
reservation)."""
_CORRUPT_BYTES = 4  # bytes a corrupting fault changes
_MAX_MESSAGES = 20

DRIVER_HINT = ("install an NVIDIA driver recent enough for the installed CuPy's CUDA "
               "version (check with `nvidia-smi`), or run with --device emulated")


class StressError(CupoolError):
    """``cupool stress`` cannot run as asked (bad minutes, unknown device, no usable GPU,
    no kernel compiler); the message is one line saying what is missing."""


class WalkError(CupoolError):
    """:func:`walk_plan` cannot run this plan (the reason quotes the buffer and offsets)."""


@dataclass
class ScenarioResult:
    """What one scenario checked (see the module docstring for each count)."""

    bytes_checked: int = 0
    corrupt_bytes: int = 0
    leaked_blocks: int = 0
    late_prefetches: int = 0
    notes: dict = field(default_factory=dict)

    def add(self, other: ScenarioResult) -> None:
        self.bytes_checked += other.bytes_checked
        self.corrupt_bytes += other.corrupt_bytes
        self.leaked_blocks += other.leaked_blocks
        self.late_prefetches += other.late_prefetches


@dataclass
class StressResult:
    """The totals of a stress run; :meth:`summary` is the ``--json`` object."""

    device: str
    seconds: float = 0.0
    scenarios: int = 0
    bytes_checked: int = 0
    corrupt_bytes: int = 0
    leaked_blocks: int = 0
    late_prefetches: int = 0
    errors: int = 0
    rounds: int = 0
    by_scenario: dict = field(default_factory=lambda: {name: 0 for name in SCENARIOS})
    messages: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """No corrupt byte, no leaked block, no error."""
        return self.corrupt_bytes == 0 and self.leaked_blocks == 0 and self.errors == 0

    def summary(self) -> dict:
        """``{"device", "seconds", "scenarios", "bytes_checked", "corrupt_bytes",
        "leaked_blocks", "late_prefetches", "errors"}`` (:data:`JSON_KEYS`)."""
        return {"device": self.device, "seconds": round(self.seconds, 3),
                "scenarios": self.scenarios, "bytes_checked": self.bytes_checked,
                "corrupt_bytes": self.corrupt_bytes, "leaked_blocks": self.leaked_blocks,
                "late_prefetches": self.late_prefetches, "errors": self.errors}


# -- the device ----------------------------------------------------------------------------
def open_stress_device(kind: str):
    """Open the device for a stress run: ``"emulated"`` (:data:`EMULATED_CAPACITY`
    bytes, unpaced) or ``"cuda"`` (GPU 0, every kernel compiled up front). Raises
    :class:`StressError` with one line saying what is missing: no usable GPU (no driver,
    a driver too old, no device), no NVRTC (and what to install), or a GPU architecture
    the kernels do not support."""
    from cupool.devices import open_device, probe_cuda

    if kind not in DEVICES:
        raise StressError(f"device (={kind!r}) must be one of {', '.join(DEVICES)}")
    if kind == "emulated":
        return open_device("emulated", capacity=EMULATED_CAPACITY, name="stress")
    usable, why = probe_cuda()
    if not usable:
        raise StressError(f"--device cuda needs a usable GPU: {_one_line(why)}; {DRIVER_HINT}")
    device = open_device("cuda")
    try:
        from cupool.kernels.errors import KernelError
        from cupool.kernels.loader import SOURCES, get_function

        for names in SOURCES.values():
            for name in names:
                get_function(device, name)
    except KernelError as exc:
        device.close()
        raise StressError(f"--device cuda: {_one_line(str(exc))}") from exc
    return device


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


# -- workloads ----------------------------------------------------------------------------
def random_workload(rng: np.random.Generator, allocations: int | None = None):
    """One iteration of random allocations and frees: ``(steps, carried, persistent)``.

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
    return steps, carried, persistent


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
    return Trace(f"stress-train-{seed}", ops, tuple(buffers), source="cupool.stress")


# -- scenario: the pool ------------------------------------------------------------------
def _baseline(device) -> dict:
    return device.stats()


def _measure_leaks(device, pool, before: dict) -> int:
    """Leaked blocks after a scenario dropped everything: pool blocks still live, plus
    device reservations beyond ``before`` once the pool is closed, plus one if pinned
    bytes are left (see the module docstring)."""
    leaked = 0
    if pool is not None:
        leaked = len(pool.live_blocks())
        if leaked == 0:
            pool.close()
    after = device.stats()
    if leaked == 0:
        leaked += max(0, after["reservations.current"] - before["reservations.current"])
    if after["pinned_bytes.current"] > before["pinned_bytes.current"]:
        leaked += 1
    return leaked


def run_pool_scenario(device, seed: int, stream=None, *, faults=(),
                      iterations: int = POOL_ITERATIONS, keep=None) -> ScenarioResult:
    """The ``pool`` scenario (module docstring) on ``device``; ``stream`` carries the
    kernels (default: a new stream). ``keep`` (a list) receives blocks a ``"pool-leak"``
    fault keeps alive."""
    from cupool.allocator.pool import PlannedPool
    from cupool.kernels import fill_pattern, verify_pattern

    rng = np.random.default_rng(seed)
    steps, carried, persistent_sizes = random_workload(rng)
    stream = stream or device.create_stream("stress-pool")
    result = ScenarioResult()
    before = _baseline(device)
    pool = PlannedPool(device, name=f"stress-pool-{seed}", solve_time_limit=1.0)
    live: dict = {}  # key -> (MemoryPointer, size, buffer id, iteration)
    pattern_seed = seed & ((1 << 64) - 1)

    def allocate(key, size, buffer_id, iteration):
        memory = pool.malloc(size)
        fill_pattern(device, memory.ptr, size, seed=pattern_seed, buffer_id=buffer_id,
                     iteration=iteration, stream=stream)
        if "pool-corrupt" in faults and not result.notes.get("corrupted"):
            result.notes["corrupted"] = True
            fill_pattern(device, memory.ptr, min(size, _CORRUPT_BYTES), seed=pattern_seed,
                         buffer_id=buffer_id + 1, iteration=iteration, stream=stream)
        live[key] = (memory, size, buffer_id, iteration)

    def release(key):
        memory, size, buffer_id, iteration = live.pop(key)
        check = verify_pattern(device, memory.ptr, size, seed=pattern_seed,
                               buffer_id=buffer_id, iteration=iteration, stream=stream)
        result.bytes_checked += size
        result.corrupt_bytes += check.mismatches

    try:
        for j, size in enumerate(persistent_sizes):
            allocate(("persistent", j), size, 1_000_000 + j, 0)
        for iteration in range(iterations):
            allocations = 0
            with pool.iteration():
                for step in steps:
                    if step[0] == "alloc":
                        allocate(("block", iteration, step[1]), step[2], step[1], iteration)
                        allocations += 1
                        if allocations == 2 and ("block", iteration - 1, carried) in live:
                            release(("block", iteration - 1, carried))
                    else:
                        release(("block", iteration, step[1]))
        for key in [key for key in live if key[0] == "block"]:
            release(key)
        stats = pool.memory_stats()
        result.notes.update(planned_hits=stats["planned_hits"], mode=pool.mode,
                            collisions=stats["collisions"])
        if pool.plan is not None and not validate_plan(pool.trace, pool.plan).valid:
            raise StressError(f"pool scenario (seed {seed}): the pool's plan fails the "
                              f"validator: {validate_plan(pool.trace, pool.plan).message}")
        if stats["planned_hits"] == 0:
            raise StressError(f"pool scenario (seed {seed}): no allocation was served from "
                              f"a plan (mode {pool.mode!r}, plans {stats['plans']})")
        for key in list(live):
            release(key)
        if "pool-leak" in faults and keep is not None:
            keep.append(pool.malloc(512))
    finally:
        try:  # no kernel may still write a block when its bytes go back to the pool
            stream.synchronize()
        finally:
            live.clear()
            result.leaked_blocks = _measure_leaks(device, pool, before)
    return result


# -- scenario: swaps under pressure -------------------------------------------------------
def _scaled(trace: Trace, plan: Plan, size_scale: int):
    """Scaled sizes and offsets (sizes round down, offsets up: disjoint stays disjoint)
    and the arena bytes they need."""
    sizes = {b.id: b.size // size_scale for b in trace.buffers}
    offsets = {(r.buffer_id, r.start): -(-r.offset // size_scale) for r in plan.residencies}
    arena = max([offsets[(r.buffer_id, r.start)] + sizes[r.buffer_id]
                 for r in plan.residencies] + [1])
    return sizes, offsets, arena


def walk_plan(device, trace: Trace, plan: Plan, *, iterations: int = SWAP_ITERATIONS,
              size_scale: int = 1, seed: int = 0, streams=None, spin_scale: float = 0.0,
              faults=()) -> ScenarioResult:
    """Run ``iterations`` of swapping ``plan`` for ``trace`` on ``device`` with the device
    protocol and the kernels only (so it runs on a GPU), checking every use.

    Per op ``i``, in order: swap-ins triggered at ``i`` on the H2D stream (after op
    ``i - 1``, after copies out of the bytes they land in, after the buffer's own swap-out);
    the compute stream waits for swap-ins due at ``i`` (one whose copy has not landed when
    the compute stream gets there is a late prefetch); recomputes and first productions
    fill the pattern of ``(buffer, iteration)`` (persistent buffers: ``(buffer, 0)``, filled
    once); every other use is verified; optionally a spin of the op's duration
    × ``spin_scale``; then swap-outs after ``i`` on the D2H stream. ``streams`` is
    ``(compute, h2d, d2h)`` (default: three new streams). Sizes are divided by
    ``size_scale`` as in :mod:`cupool.app.replay`. A persistent buffer must start
    and end the iteration at one offset, or start it swapped out (:class:`WalkError`).
    The arena and the pinned host slab are returned before this function returns."""
    from cupool.kernels import fill_pattern, spin, verify_pattern
    from cupool.kernels.reference import fill as host_fill

    if plan.is_static:
        raise WalkError("walk_plan needs a swapping plan (residencies and actions)")
    compute, h2d, d2h = streams or tuple(device.create_stream(f"walk-{name}")
                                         for name in ("compute", "h2d", "d2h"))
    sizes, offsets, arena_bytes = _scaled(trace, plan, size_scale)
    spans = defaultdict(list)
    for r in plan.residencies:
        spans[r.buffer_id].append(r)
    for rs in spans.values():
        rs.sort(key=lambda r: r.start)
    swap_ins, due, recomputes, swap_outs, entered = (defaultdict(list) for _ in range(5))
    for action in plan.actions:
        b = action.buffer_id
        if isinstance(action, SwapIn):
            swap_ins[action.trigger_op].append(action)
            due[action.due_op].append(action)
            entered[(b, action.trigger_op)] = action
        elif isinstance(action, SwapOut):
            swap_outs[action.after_op].append(b)
        else:
            recomputes[action.before_op].append(b)
            entered[(b, action.before_op)] = action
    produced = defaultdict(list)
    persistent_fill, host_init = [], []
    for b, rs in spans.items():
        buffer = trace.buffer(b)
        first = rs[0]
        if buffer.kind != PERSISTENT:
            if (b, first.start) not in entered:
                produced[first.start].append(b)
        elif isinstance(entered.get((b, first.start)), SwapIn):
            host_init.append(b)
        elif rs[-1].offset != first.offset:
            raise WalkError(f"persistent buffer {b} ends the iteration at offset "
                            f"{rs[-1].offset}, starts it at {first.offset}")
        else:
            persistent_fill.append(b)
    uses = defaultdict(list)
    for buffer in trace.buffers:
        for i in buffer.uses:
            uses[i].append(buffer.id)
    swapped = sorted({a.buffer_id for a in plan.actions if isinstance(a, SwapIn | SwapOut)})
    slot, slab_bytes = {}, 0
    for b in swapped:
        slot[b] = slab_bytes
        slab_bytes += -(-max(1, sizes[b]) // 256) * 256

    def ptr_at(b, i):
        for r in spans[b]:
            if r.start <= i < r.end:
                return arena.ptr + offsets[(b, r.start)]
        raise WalkError(f"buffer {b} is used at op {i} but not resident there")

    def expected(b, iteration):
        return 0 if trace.buffer(b).kind == PERSISTENT else iteration

    result = ScenarioResult()
    pattern_seed = seed & ((1 << 64) - 1)
    arena = device.reserve(arena_bytes)
    slab = None
    try:
        slab = device.alloc_pinned(max(1, slab_bytes))
        host = device.pinned_array(slab)
        for b in host_init:
            host_fill(host[slot[b]:slot[b] + sizes[b]], pattern_seed, b, 0)
        del host
        for b in persistent_fill:
            fill_pattern(device, arena.ptr + offsets[(b, spans[b][0].start)], sizes[b],
                         seed=pattern_seed, buffer_id=b, iteration=0, stream=compute)
        done = [device.create_event() for _ in range(trace.num_ops)]
        landed = {(a.buffer_id, a.trigger_op): device.create_event()
                  for a in plan.actions if isinstance(a, SwapIn)}
        corrupted = False
        for iteration in range(iterations):
            pending, last_out = [], {}  # (low, high, event) of swap-outs; buffer -> event
            for i in range(trace.num_ops):
                for action in swap_ins[i]:
                    b = action.buffer_id
                    ptr = arena.ptr + offsets[(b, i)]
                    for low, high, event in pending:
                        if low < ptr + sizes[b] and ptr < high:
                            h2d.wait_event(event)
                    if b in last_out:
                        h2d.wait_event(last_out[b])
                    if i > 0:
                        h2d.wait_event(done[i - 1])
                    device.copy_h2d_async(ptr, slab.ptr + slot[b], sizes[b], h2d)
                    landed[(b, i)].record(h2d)
                for action in due[i]:
                    event = landed[(action.buffer_id, action.trigger_op)]
                    compute.synchronize()
                    if not event.query():
                        result.late_prefetches += 1
                    compute.wait_event(event)
                fills = [*recomputes[i], *produced[i]]
                for b in fills:
                    ptr = ptr_at(b, i)
                    for low, high, event in pending:
                        if low < ptr + sizes[b] and ptr < high:
                            compute.wait_event(event)
                    fill_pattern(device, ptr, sizes[b], seed=pattern_seed, buffer_id=b,
                                 iteration=expected(b, iteration), stream=compute)
                for b in uses[i]:
                    if b in produced[i] or sizes[b] == 0:
                        continue
                    check = verify_pattern(device, ptr_at(b, i), sizes[b], seed=pattern_seed,
                                           buffer_id=b, iteration=expected(b, iteration),
                                           stream=compute)
                    result.bytes_checked += sizes[b]
                    result.corrupt_bytes += check.mismatches
                if spin_scale > 0 and trace.ops[i].duration_us:
                    spin(device, int(trace.ops[i].duration_us * 1000 * spin_scale),
                         stream=compute)
                done[i].record(compute)
                for b in swap_outs[i]:
                    ptr = ptr_at(b, i)
                    d2h.wait_event(done[i])
                    device.copy_d2h_async(slab.ptr + slot[b], ptr, sizes[b], d2h)
                    out = device.create_event()
                    out.record(d2h)
                    pending.append((ptr, ptr + sizes[b], out))
                    last_out[b] = out
                    if "swap-corrupt" in faults and not corrupted and sizes[b]:
                        corrupted = True
                        d2h.synchronize()
                        host = device.pinned_array(slab)
                        host[slot[b]:slot[b] + min(sizes[b], _CORRUPT_BYTES)] ^= 0xFF
                        del host
            device.synchronize()
    finally:
        try:
            device.synchronize()
        finally:
            if slab is not None:
                device.free_pinned(slab)
            device.release(arena)
    return result


class _SwapCase:
    """A trace, its swapping plan at the scenario's budget, and the trace the plan is for."""

    def __init__(self, trace: Trace, plan: Plan, plan_trace: Trace, size_scale: int,
                 policy: str) -> None:
        self.trace, self.plan, self.plan_trace = trace, plan, plan_trace
        self.size_scale, self.policy = size_scale, policy


def _swap_case(trace: Trace, size_scale: int) -> _SwapCase | None:
    """Plan ``trace`` at :data:`SWAP_BUDGET` with the first policy of
    :data:`SWAP_POLICIES` whose plan swaps, passes the swap validator and suits
    :func:`walk_plan`; ``None`` if none does."""
    from cupool.planning.budget import plan_with_budget

    budget = max(1, int(trace.lower_bound_bytes() * SWAP_BUDGET))
    for policy in SWAP_POLICIES:
        result = plan_with_budget(trace, budget, policy)
        plan = result.plan
        if not result.feasible:
            continue
        if not any(isinstance(a, SwapIn) for a in plan.actions):
            continue
        if not validate_swap_plan(result.trace, plan).valid:
            raise StressError(f"swap scenario: the {policy} plan for {trace.name} at "
                              f"{budget} bytes fails the validator")
        case = _SwapCase(trace, plan, result.trace, size_scale, policy)
        if _walkable(case):
            return case
    return None


def _walkable(case: _SwapCase) -> bool:
    spans = defaultdict(list)
    for r in case.plan.residencies:
        spans[r.buffer_id].append(r)
    entered = {(a.buffer_id, a.trigger_op) for a in case.plan.actions if isinstance(a, SwapIn)}
    for b, rs in spans.items():
        rs.sort(key=lambda r: r.start)
        if case.plan_trace.buffer(b).kind == PERSISTENT and (b, rs[0].start) not in entered \
                and rs[-1].offset != rs[0].offset:
            return False
    return True


def _bundled_case(cache: dict) -> _SwapCase | None:
    if "bundled" not in cache:
        from cupool.data import bundled_traces
        from cupool.io import load_trace

        path = next(p for p in bundled_traces() if p.name.startswith(BUNDLED_TRACE))
        cache["bundled"] = _swap_case(load_trace(path), BUNDLED_SIZE_SCALE)
    return cache["bundled"]


def run_swap_scenario(device, seed: int, *, bundled: bool = False, streams=None,
                      faults=(), runtime_replay: bool = True,
                      cache: dict | None = None) -> ScenarioResult:
    """The ``swap`` scenario (module docstring): plan a small trace at 50% of its lower
    bound and run it with :func:`walk_plan` on ``device``; with ``runtime_replay``
    (default: on the emulated device) replay the same plan with the swap runtime too.
    ``bundled`` uses the bundled ResNet-50 trace instead of :func:`training_trace`.
    ``cache`` keeps the bundled trace's plan between calls."""
    cache = {} if cache is None else cache
    if bundled:
        case = _bundled_case(cache)
    else:
        case = None
        for attempt in range(20):
            case = _swap_case(training_trace(seed + attempt * 7919), 1)
            if case is not None:
                break
    if case is None:
        raise StressError(f"swap scenario (seed {seed}): no policy of {SWAP_POLICIES} gave a "
                          f"swapping plan at {SWAP_BUDGET:.0%} of the lower bound")
    before = _baseline(device)
    try:
        result = walk_plan(device, case.plan_trace, case.plan, size_scale=case.size_scale,
                           seed=seed, streams=streams, faults=faults)
    finally:
        leaked = _measure_leaks(device, None, before)
    result.leaked_blocks += leaked
    result.notes.update(trace=case.trace.name, policy=case.policy)
    if runtime_replay:
        result.add(_runtime_replay(case, seed, device))
    return result


def _runtime_replay(case: _SwapCase, seed: int, device) -> ScenarioResult:
    """The same plan through :func:`cupool.app.replay.replay`: on a paced emulated
    device of its own when ``device`` is emulated (leaks: what that device still holds
    after the replay returned), on ``device`` itself on a GPU (leaks: what it holds beyond
    what it held before)."""
    from cupool.app.replay import ReplaySettings, open_paced_device, replay

    own = getattr(device, "kind", "") == "emulated"
    target = open_paced_device("gen5", case.size_scale, 1.0) if own else device
    before = _baseline(target)
    try:
        settings = ReplaySettings(iterations=SWAP_ITERATIONS, size_scale=case.size_scale,
                                  time_scale=1.0, seed=seed)
        report = replay(case.trace, case.plan.capacity_bytes or case.plan.arena_bytes,
                        settings, device=target, plan=case.plan, plan_trace=case.plan_trace)
        leaked = _measure_leaks(target, None, before)
    finally:
        if own:
            target.close()
    return ScenarioResult(bytes_checked=report["bytes_checked"],
                          corrupt_bytes=report["corrupt_bytes"], leaked_blocks=leaked,
                          late_prefetches=sum(report["late_prefetches"]))


# -- scenario: several streams and threads -----------------------------------------------
def run_streams_scenario(device, seed: int, streams=None, *, faults=(),
                         rounds: int = STREAM_ROUNDS) -> ScenarioResult:
    """The ``streams`` scenario (module docstring): one thread per stream of ``streams``
    (default: :data:`THREADS` new streams), blocks from one shared pool."""
    from cupool.allocator.pool import PlannedPool
    from cupool.kernels import fill_pattern, verify_pattern
    from cupool.kernels.reference import count_mismatches
    from cupool.kernels.reference import fill as host_fill

    streams = streams or [device.create_stream(f"stress-{k}") for k in range(THREADS)]
    before = _baseline(device)
    pool = PlannedPool(device, name=f"stress-streams-{seed}")
    pattern_seed = seed & ((1 << 64) - 1)
    totals = [ScenarioResult() for _ in streams]
    failures: list[BaseException] = []
    start = threading.Barrier(len(streams))

    def worker(index: int, stream) -> None:
        tally = totals[index]
        rng = np.random.default_rng([seed, index])
        size = int(rng.integers(1, 1 << 20))
        blocks, pinned = [], []
        try:
            start.wait()
            # the pool's pointers live only in ``blocks``, so clearing it frees them
            blocks = [pool.malloc(size), pool.malloc(size)]
            pinned = [device.alloc_pinned(size), device.alloc_pinned(size)]
            a, b = (memory.ptr for memory in blocks)
            src, dst = (memory.ptr for memory in pinned)
            for repeat in range(rounds):
                buffer_id = 100 * index + repeat
                view = device.pinned_array(pinned[0])
                host_fill(view, pattern_seed, buffer_id, repeat)
                del view
                device.copy_h2d_async(a, src, size, stream)
                device.copy_d2d_async(b, a, size, stream)
                if "streams-corrupt" in faults and index == 0 and repeat == 0:
                    fill_pattern(device, b, min(size, _CORRUPT_BYTES), seed=pattern_seed,
                                 buffer_id=buffer_id + 1, iteration=repeat, stream=stream)
                check = verify_pattern(device, b, size, seed=pattern_seed,
                                       buffer_id=buffer_id, iteration=repeat, stream=stream)
                tally.bytes_checked += size
                tally.corrupt_bytes += check.mismatches
                fill_pattern(device, a, size, seed=pattern_seed, buffer_id=buffer_id,
                             iteration=repeat + rounds, stream=stream)
                device.copy_d2h_async(dst, a, size, stream)
                stream.synchronize()
                view = device.pinned_array(pinned[1])
                tally.bytes_checked += size
                tally.corrupt_bytes += count_mismatches(view, pattern_seed, buffer_id,
                                                        repeat + rounds)
                del view
        except BaseException as exc:  # reported by the caller, after every thread joined
            failures.append(exc)
            start.abort()
        finally:
            try:
                stream.synchronize()
            except BaseException as exc:
                failures.append(exc)
            for memory in pinned:
                device.free_pinned(memory)
            blocks.clear()

    threads = [threading.Thread(target=worker, args=(k, s), name=f"stress-streams-{k}")
               for k, s in enumerate(streams)]
    result = ScenarioResult()
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for tally in totals:
            result.add(tally)
        result.leaked_blocks = _measure_leaks(device, pool, before)
    real = [f for f in failures if not isinstance(f, threading.BrokenBarrierError)]
    if real:
        raise real[0]
    return result


# -- the run ------------------------------------------------------------------------------
class _Context:
    """What a stress run keeps between rounds: the device, its streams, cached plans, and
    blocks a leak fault keeps alive."""

    def __init__(self, device) -> None:
        self.device = device
        self.pool_stream = device.create_stream("stress-pool")
        self.walk_streams = tuple(device.create_stream(f"stress-walk-{name}")
                                  for name in ("compute", "h2d", "d2h"))
        self.thread_streams = [device.create_stream(f"stress-thread-{k}")
                               for k in range(THREADS)]
        self.cache: dict = {}
        self.kept: list = []


def _check_minutes(minutes) -> float:
    if isinstance(minutes, bool):
        raise InputError(f"minutes (={minutes!r}) must be a number > 0")
    try:
        value = float(minutes)
    except (TypeError, ValueError):
        raise InputError(f"minutes (={minutes!r}) must be a number > 0") from None
    if not np.isfinite(value) or value <= 0:
        raise InputError(f"minutes (={minutes!r}) must be a finite number > 0")
    return value


def run_stress(device: str = "emulated", minutes: float = 2.0, seed: int = 0, *,
               scenarios=SCENARIOS, faults=()) -> StressResult:
    """Run the stress scenarios on a new ``device`` (``"emulated"`` or ``"cuda"``) for
    ``minutes`` (fractions allowed) and return the totals (module docstring).

    Raises :class:`StressError` / :class:`~cupool.errors.InputError` for bad arguments or
    a device that cannot run (before any scenario starts); failures inside a scenario are
    counted in ``errors``, never raised."""
    minutes = _check_minutes(minutes)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"seed (={seed!r}) must be an int >= 0")
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown or not scenarios:
        raise InputError(f"scenarios (={list(scenarios)!r}) must be a non-empty subset of "
                         f"{list(SCENARIOS)}")
    bad_faults = [f for f in faults if f not in FAULTS]
    if bad_faults:
        raise InputError(f"faults (={list(faults)!r}) must be among {list(FAULTS)}")
    opened = open_stress_device(device)
    result = StressResult(device=device)
    started = time.perf_counter()
    deadline = started + minutes * 60.0
    context = None
    try:
        context = _Context(opened)
        with progress.bar(None, "stress", "scenario") as bar:
            round_index = 0
            while round_index == 0 or time.perf_counter() < deadline:
                for name in SCENARIOS:
                    if name not in scenarios:
                        continue
                    if round_index > 0 and time.perf_counter() >= deadline:
                        break
                    _run_one(context, name, seed, round_index, faults, result)
                    bar.update(postfix=f"corrupt {result.corrupt_bytes}, leaked "
                                       f"{result.leaked_blocks}, errors {result.errors}")
                round_index += 1
            result.rounds = round_index
    finally:
        if context is not None:
            context.kept.clear()  # blocks a leak fault kept: the device returns their bytes
        opened.close()
    result.seconds = time.perf_counter() - started
    return result


def _run_one(context: _Context, name: str, seed: int, round_index: int, faults,
             result: StressResult) -> None:
    scenario_seed = int(np.random.SeedSequence([seed, round_index, SCENARIOS.index(name)])
                        .generate_state(1, dtype=np.uint64)[0] >> 1)
    device = context.device
    try:
        if name == "pool":
            outcome = run_pool_scenario(device, scenario_seed, context.pool_stream,
                                        faults=faults, keep=context.kept)
        elif name == "swap":
            outcome = run_swap_scenario(device, scenario_seed, bundled=round_index % 2 == 1,
                                        streams=context.walk_streams, faults=faults,
                                        cache=context.cache)
        else:
            outcome = run_streams_scenario(device, scenario_seed, context.thread_streams,
                                           faults=faults)
    except Exception as exc:  # counted and reported, the run goes on
        result.errors += 1
        if len(result.messages) < _MAX_MESSAGES:
            result.messages.append(f"{name} (round {round_index}): {type(exc).__name__}: "
                                   f"{_one_line(str(exc))}")
        outcome = None
    result.scenarios += 1
    result.by_scenario[name] += 1
    if outcome is not None:
        result.bytes_checked += outcome.bytes_checked
        result.corrupt_bytes += outcome.corrupt_bytes
        result.leaked_blocks += outcome.leaked_blocks
        result.late_prefetches += outcome.late_prefetches


def summary_lines(result: StressResult) -> list[str]:
    """The human summary ``cupool stress`` prints."""
    verdict = "PASS" if result.passed else "FAIL"
    counts = ", ".join(f"{name} {count}" for name, count in result.by_scenario.items())
    lines = [f"cupool stress on {result.device}: {verdict} after {result.seconds:.1f} s, "
             f"{result.scenarios} scenarios in {result.rounds} rounds ({counts})",
             f"  bytes checked    {result.bytes_checked}",
             f"  corrupt bytes    {result.corrupt_bytes}",
             f"  leaked blocks    {result.leaked_blocks}",
             f"  late prefetches  {result.late_prefetches}",
             f"  errors           {result.errors}"]
    lines += [f"  error: {message}" for message in result.messages]
    return lines
