"""The fault matrix's other clients of the device: ``PlannedPool`` driven by CuPy and a
replayed trace (``cupool.app.replay``) and the same plan run by the stress test's
independent walker (``cupool.app.stress.independent_walker``), each on a
:class:`~cupool.devices.faults.FaultyDevice` with one fault per cell, and the broker of a
time-shared device (``cupool.sharing``), whose arena is not a ``Device``: its cells are
the faults its jobs meet (:func:`broker_cell`).

``bench/faults.py`` runs these cells after the session's and writes them in the same
results file (key ``client_cells``). Each cell records:

- ``outcome``: ``continued`` (the faulted iteration raised a typed error naming what
  failed, or absorbed the fault, and every later iteration was served with its bytes
  intact), ``refused`` (every later iteration refused with a typed error), ``WRONG``
  (anything else); `` (not hit)`` appended when the fault never fired (the point makes
  no such call, which the cell shows);
- ``error``: the faulted iteration's error (a warning the pool logged instead, for a plan
  it could not install: ``"logged: ..."``), ``later_errors`` the later iterations';
- ``leaked_device_bytes``/``leaked_pinned_bytes``: held on the device once the client
  closed; ``busy_streams``: streams with work left after the faulted iteration;
- ``over_limit_bytes``: device bytes reserved above the client's limit (the pool's
  capacity, the replay's budget at its scale) at the worst moment, another process's
  bytes excluded;
- ``corrupt_bytes``: bytes found not to hold what was written (the pool's arrays and its
  persistent array; the replay's pattern checks), over every iteration that ran;
- ``detail``: what the client says about itself after (the pool's mode).
"""

from __future__ import annotations

import gc
import logging
import time
from dataclasses import dataclass, field

import numpy as np

KIB = 1024
POOL_LIMIT = 96 * KIB
POOL_ITERATIONS = 4  # 0 records (and installs the plan at its end), 1.. are planned
POOL_SIZES = (8 * KIB, 16 * KIB, 4 * KIB, 12 * KIB)  # one iteration's allocations
PERSISTENT_BYTES = 8 * KIB


@dataclass
class ClientCell:
    client: str
    point: str
    outcome: str
    error: str | None
    later_errors: list = field(default_factory=list)
    leaked_device_bytes: int = 0
    leaked_pinned_bytes: int = 0
    busy_streams: int = 0
    over_limit_bytes: int = 0
    corrupt_bytes: int = 0
    detail: str = ""
    seconds: float = 0.0


def good(cell: ClientCell) -> bool:
    """The matrix's targets for one cell of a client."""
    return (cell.outcome.split(" (")[0] in ("continued", "refused")
            and cell.leaked_device_bytes == 0 and cell.leaked_pinned_bytes == 0
            and cell.busy_streams == 0 and cell.over_limit_bytes == 0
            and cell.corrupt_bytes == 0)


def _typed(exc: BaseException) -> str:
    """``"Type: message"``, marked ``UNTYPED`` unless cupool raised it on purpose (its
    errors, and the pool's out of memory, which is CuPy's own type)."""
    from cupool.allocator.errors import PoolOutOfMemoryError
    from cupool.errors import CupoolError

    lines = f"{type(exc).__name__}: {exc}".splitlines()
    text = lines[0] if len(lines) == 1 or not isinstance(exc, PoolOutOfMemoryError) \
        else f"{lines[0]} {lines[1].strip()}"  # the report's first line: for what
    return text if isinstance(exc, CupoolError | PoolOutOfMemoryError) else f"UNTYPED {text}"


def _outcome(error: str | None, later: list, iterations_after: int, hit: bool) -> str:
    typed = all(not e.startswith("UNTYPED") for e in [error or "", *later])
    if typed and not later:
        outcome = "continued"
    elif typed and error is not None and len(later) == iterations_after:
        outcome = "refused"
    else:
        outcome = "WRONG"
    return outcome if hit else f"{outcome} (not hit)"


# -- PlannedPool ----------------------------------------------------------------------------
@dataclass(frozen=True)
class PoolPoint:
    """A fault for the pool: ``reserve`` calls ``nth``.. (``times`` of them: the pool
    retries a refused reservation twice, so 3 refuse it for good) counted from the start
    of iteration ``iteration``; or ``occupy``: another process takes all free device memory
    before that iteration (``"during"``: inside it, after its allocations, so the plan
    installed at its end finds none). ``diverge``: the iteration's first allocation is
    larger than planned (served off the plan, from a new fallback reservation).
    ``replan``: ``pool.replan()`` before that iteration, which records again.

    Whatever the point, a pool found ``"unplanned"`` (its plan not installed) after an
    iteration is told to ``replan()`` once, as its user would."""

    label: str
    iteration: int
    nth: int = 0
    times: int = 3
    occupy: str = ""
    diverge: bool = False
    replan: bool = False


def pool_points() -> list:
    """The pool's points; the arena is the recording's last reservation (after one
    fallback segment per allocation size the recording could not serve from freed
    bytes: counted in a clean run, :func:`pool_reservations`)."""
    arena = pool_reservations()
    return [
        PoolPoint("recording: first fallback reservation refused", 0, 1),
        PoolPoint("recording: a fallback reservation refused once (retried)", 0, 2, times=1),
        PoolPoint("install: the planned arena's reservation refused", 0, arena),
        PoolPoint("re-planning: the new arena's reservation refused", 2, arena,
                  replan=True),
        PoolPoint("planned: first malloc (from the arena: no reservation)", 1, 1),
        PoolPoint("planned: first malloc off the plan, its reservation refused", 1, 1,
                  diverge=True),
        PoolPoint("between iterations: memory taken before the recording", 0,
                  occupy="before"),
        PoolPoint("during the recording: memory taken before the plan is installed", 0,
                  occupy="during"),
        PoolPoint("between iterations: memory taken before a planned iteration", 1,
                  occupy="before"),
    ]


def _pool_iteration(pool, empty, value: int, diverge: bool, occupy) -> int:
    """One iteration: allocate, fill and check the arrays; the corrupt bytes found."""
    from cupool.devices.memory import host_view

    arrays, corrupt = [], 0
    with pool.iteration():
        for k, size in enumerate(POOL_SIZES):
            array = empty(size + (4 * KIB if diverge and k == 0 else 0))
            host_view(array.data.ptr, array.nbytes)[:] = (value + k) & 0xFF
            arrays.append(array)
            if k == 1:
                arrays.pop(0)  # the first one dies early: its bytes can be reused
        if occupy is not None:
            occupy()
        for k, array in enumerate(arrays, start=len(POOL_SIZES) - len(arrays)):
            corrupt += int(np.count_nonzero(host_view(array.data.ptr, array.nbytes)
                                            != (value + k) & 0xFF))
        del array
        arrays.clear()
    return corrupt


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record) -> None:
        self.messages.append(record.getMessage().splitlines()[0])


def pool_reservations() -> int:
    """The device reservations of a clean recording iteration (its last: the arena)."""
    from cupool.devices.faults import FaultyDevice

    with FaultyDevice(capacity=1 << 20) as device:
        return _run_pool(device, None)["reservations"][0]


def _run_pool(device, point: PoolPoint | None) -> dict:
    """The pool's iterations on ``device`` with ``point``'s fault; what a cell records."""
    import cupy

    from cupool.allocator import PlannedPool
    from cupool.devices.faults import Fault
    from cupool.devices.memory import host_view

    def empty(nbytes: int):
        return cupy.empty(nbytes, dtype=np.uint8)

    pool = PlannedPool(device, capacity=POOL_LIMIT)
    previous = cupy.cuda.get_allocator()
    cupy.cuda.set_allocator(pool.malloc)
    warnings = _Warnings()
    logger = logging.getLogger("cupool.allocator")
    logger.addHandler(warnings)
    found = {"error": None, "later": [], "corrupt": 0, "busy": 0, "reservations": []}
    replanned = False
    try:
        weights = empty(PERSISTENT_BYTES)
        host_view(weights.data.ptr, weights.nbytes)[:] = 7
        for it in range(POOL_ITERATIONS):
            hit = point is not None and it == point.iteration
            if (hit and point.replan) or (pool.mode == "unplanned" and not replanned):
                pool.replan()
                replanned = pool.mode == "record"
            device.arm(*([Fault("reserve", point.nth, point.times)]
                         if hit and point.nth else []))
            if hit and point.occupy == "before":
                device.occupy(device.mem_info()[0])
            during = (lambda: device.occupy(device.mem_info()[0])) \
                if hit and point.occupy == "during" else None
            try:
                found["corrupt"] += _pool_iteration(pool, empty, 16 * it, hit and point.diverge,
                                                    during)
            except Exception as exc:
                if hit:
                    found["error"] = _typed(exc)
                else:
                    found["later"].append(_typed(exc))
            found["reservations"].append(device.counts["reserve"])
            if hit:
                if found["error"] is None and warnings.messages:
                    found["error"] = "logged: " + warnings.messages[0]
                found["busy"] = device.pending_work()
                device.disarm()
                device.vacate()
            found["corrupt"] += int(np.count_nonzero(
                host_view(weights.data.ptr, weights.nbytes) != 7))
        found["mode"] = pool.mode
        found["stats"] = pool.memory_stats()
        del weights
        gc.collect()
        pool.free_all_blocks()
        pool.close()
    finally:
        cupy.cuda.set_allocator(previous)
        logger.removeHandler(warnings)
    return found


def pool_cell(point: PoolPoint) -> ClientCell:
    """One cell of the pool (module docstring)."""
    from cupool.devices.faults import FaultyDevice

    began = time.perf_counter()
    with FaultyDevice(capacity=1 << 20) as device:
        try:
            found = _run_pool(device, point)
        except Exception as exc:  # the pool itself broke: the cell says so
            found = {"error": None, "later": [f"pool: {_typed(exc)}"], "corrupt": 0,
                     "busy": 0, "mode": "?", "stats": {}}
        stats = device.stats()
        hit = bool(point.occupy) or bool(device.injected)
    stats_pool = found["stats"]
    detail = (f"mode {found['mode']}; plans {stats_pool.get('plans')}, plan failures "
              f"{stats_pool.get('plan_failures')}, planned iterations "
              f"{stats_pool.get('planned_iterations')}")
    return ClientCell(
        "PlannedPool", point.label,
        _outcome(found["error"], found["later"], POOL_ITERATIONS - 1 - point.iteration, hit),
        found["error"], found["later"], stats["reserved_bytes.current"],
        stats["pinned_bytes.current"], found["busy"],
        max(0, stats["reserved_bytes.peak"] - POOL_LIMIT), found["corrupt"], detail,
        round(time.perf_counter() - began, 3))


# -- replay -----------------------------------------------------------------------------------
REPLAY_TRACE = "resnet50_train_b32_fp32.trace.json.gz"
REPLAY_BUDGET = 0.7  # of the trace's lower bound


@dataclass(frozen=True)
class ReplayPoint:
    """A fault for a replay of :data:`REPLAY_TRACE` (2 iterations): ``operation``'s calls
    ``nth``.. (``times`` of them) of the run (``stage`` as in
    :class:`~cupool.devices.faults.Fault`)."""

    label: str
    operation: str
    nth: int
    stage: str = "enqueue"
    times: int = 1


def _replay_setup():
    """``(trace, plan, planned trace, settings)``: a capuchin plan at 70%, replayed
    unpaced at 1/4096 of the sizes (the test suite's small settings)."""
    from cupool.app.replay import ReplaySettings
    from cupool.data import DATA_DIR
    from cupool.io import load_trace
    from cupool.planning.budget import plan_with_budget

    trace = load_trace(DATA_DIR / "traces" / REPLAY_TRACE)
    result = plan_with_budget(trace, int(trace.lower_bound_bytes() * REPLAY_BUDGET),
                              "capuchin")
    settings = ReplaySettings(iterations=2, size_scale=4096, time_scale=1.0, feedback=False)
    return trace, result.plan, result.trace, settings


def _replay_once(device, setup) -> dict:
    from cupool.app.replay import replay

    trace, plan, planned, settings = setup
    return replay(trace, f"{REPLAY_BUDGET:.0%}", settings, device=device, plan=plan,
                  plan_trace=planned)


def _walk_once(device, setup) -> dict:
    """The same plan run by the stress test's independent walker (the device protocol and
    the kernels only: its pattern checks synchronize their stream)."""
    from cupool.app.stress.independent_walker import WalkSettings, walk_plan

    _trace, plan, planned, settings = setup
    result = walk_plan(device, planned, plan,
                       WalkSettings(iterations=settings.iterations,
                                    size_scale=settings.size_scale))
    return {"corrupt_bytes": result.corrupt_bytes}


RUNS = {"replay": (_replay_once, ("copy_h2d", "copy_d2h", "launch", "record", "wait_event")),
        "walker": (_walk_once, ("wait_event", "stream_synchronize"))}
"""Per client of the replay's setup: how it runs, and the operations whose calls fail in
its second iteration."""
RUN_STAGE = ("copy_h2d", "copy_d2h", "launch")  # also failed on their stream


def replay_points(setup, client: str = "replay") -> tuple:
    """``(points, clean)``: ``client``'s points (:data:`RUNS`), aimed at three quarters of
    a clean run's calls of each operation (the middle of its second iteration), and the
    clean run's device statistics (its reserved peak is the cells' limit)."""
    from cupool.devices.faults import FaultyDevice

    run, operations = RUNS[client]
    with FaultyDevice(capacity=1 << 30) as device:
        device.arm()
        run(device, setup)
        counts, clean = dict(device.counts), device.stats()
    found = []
    if client == "replay":
        found += [ReplayPoint("start: the arena's reservation refused", "reserve", 1, times=3),
                  ReplayPoint("start: the pinned staging refused", "alloc_pinned", 1)]
    for operation in operations:
        nth = max(1, counts.get(operation, 0) * 3 // 4)
        found.append(ReplayPoint(f"iteration 2: {operation} #{nth} of {counts[operation]}",
                                 operation, nth))
        if operation in RUN_STAGE:
            found.append(ReplayPoint(f"iteration 2: {operation} #{nth} failing on its stream",
                                     operation, nth, "run"))
    return found, clean


def replay_cell(point: ReplayPoint, setup, clean: dict, client: str = "replay") -> ClientCell:
    """One cell of ``client`` (:data:`RUNS`): the faulted run must raise a typed error
    naming the failure and leave nothing behind; a second run on the same device (fault
    disarmed) must be byte exact. Limit: the clean run's reserved peak."""
    from cupool.devices.faults import Fault, FaultyDevice

    run = RUNS[client][0]
    began = time.perf_counter()
    error, later, corrupt = None, [], 0
    with FaultyDevice(capacity=1 << 30) as device:
        device.arm(Fault(point.operation, point.nth, point.times, point.stage))
        try:
            corrupt += run(device, setup)["corrupt_bytes"]
        except Exception as exc:
            error = _typed(exc)
        busy = device.pending_work()
        held = device.stats()
        device.disarm()
        try:
            corrupt += run(device, setup)["corrupt_bytes"]
        except Exception as exc:
            later.append(_typed(exc))
        stats = device.stats()
        hit = bool(device.injected)
    named = error is None or "injected fault" in error or "out of memory" in error.lower()
    outcome = _outcome(error, later, 1, hit)
    if not named:
        outcome = "WRONG"
    return ClientCell(
        client, point.label, outcome, error, later,
        held["reserved_bytes.current"] + stats["reserved_bytes.current"],
        held["pinned_bytes.current"] + stats["pinned_bytes.current"], busy,
        max(0, stats["reserved_bytes.peak"] - clean["reserved_bytes.peak"]), corrupt,
        "", round(time.perf_counter() - began, 3))


def replay_cells(client: str = "replay") -> list:
    setup = _replay_setup()
    points, clean = replay_points(setup, client)
    return [(point, lambda point, setup=setup: replay_cell(point, setup, clean, client))
            for point in points]


def walker_cells() -> list:
    return replay_cells("walker")


# -- the broker -------------------------------------------------------------------------------
BROKER_CAPACITY = 64 * KIB
BROKER_TEMPORARY = 8 * KIB
BROKER_POINTS = ("joining: a job that does not fit is refused",
                 "mid-iteration: the client's device fails a launch")


def broker_cell(label: str) -> ClientCell:
    """One broker cell. The broker (:mod:`cupool.sharing`) holds one arena of its own
    (shared memory here, CUDA IPC on a GPU), not a :class:`~cupool.devices.protocol.Device`,
    so its faults are a job's: jobs ``a`` and ``b`` hold persistent bytes; at the point,
    job ``c`` asks for more than the device has (refused when it joins), or job ``a``'s
    compute on its own :class:`~cupool.devices.faults.FaultyDevice` fails a launch in the
    middle of its slice. Then both jobs run an iteration each. ``corrupt_bytes``: persistent
    bytes not as the jobs wrote them, and temporary bytes not zeroed when the slice
    ended; ``leaked_device_bytes``: arena bytes not zero once every job left (the broker
    zeroes what a job leaves) plus every job still listed."""
    import shutil
    import tempfile

    from cupool.devices.faults import Fault, FaultyDevice
    from cupool.sharing import Broker, BrokerConfig, SharingClient

    began = time.perf_counter()
    runtime_dir = tempfile.mkdtemp(prefix="cpf", dir="/tmp")  # AF_UNIX paths are short
    broker = Broker(BrokerConfig(capacity_bytes=BROKER_CAPACITY,
                                 temporary_bytes=BROKER_TEMPORARY,
                                 runtime_dir=runtime_dir)).start()
    error, later, corrupt, left, hit = None, [], 0, 0, False
    try:
        def join(job: str, persistent: int) -> SharingClient:
            return SharingClient(job, persistent, 4 * KIB, runtime_dir=runtime_dir,
                                 reply_timeout_s=10.0)

        jobs = {"a": join("a", 4 * KIB), "b": join("b", 4 * KIB)}
        for value, client in enumerate(jobs.values(), start=1):
            with client.iteration() as grant:
                grant.persistent.fill(value)
        with FaultyDevice(capacity=1 << 20) as device:
            try:
                if label == BROKER_POINTS[0]:
                    hit = True
                    join("c", BROKER_CAPACITY).close()
                else:
                    device.arm(Fault("launch", 1))
                    with jobs["a"].iteration() as grant:
                        grant.temporary.fill(0xEE)
                        device.launch(device.default_stream, lambda: None)
                        grant.persistent.fill(0xEE)  # not reached
            except Exception as exc:
                error = _typed(exc)
            hit = hit or bool(device.injected)
            temporary = jobs["a"].layout["temporary"]
            corrupt += sum(broker.read_arena(temporary["offset"], temporary["size"]))
        for value, client in enumerate(jobs.values(), start=1):
            try:
                with client.iteration() as grant:
                    corrupt += int(np.count_nonzero(grant.persistent.array() != value))
            except Exception as exc:
                later.append(_typed(exc))
        for client in jobs.values():
            client.close()
        left = sum(1 for b in broker.read_arena(0, BROKER_CAPACITY) if b) + len(broker.jobs())
    finally:
        broker.stop()
        shutil.rmtree(runtime_dir, ignore_errors=True)
    named = error is not None and ("injected fault (launch call 1" in error
                                   or "AdmissionError" in error)
    outcome = _outcome(error, later, 2, hit) if named else "WRONG"
    return ClientCell("broker", label, outcome, error, later, left, 0, 0, 0, corrupt, "",
                      round(time.perf_counter() - began, 3))


def broker_cells() -> list:
    return [(label, broker_cell) for label in BROKER_POINTS]


def pool_cells() -> list:
    return [(point, pool_cell) for point in pool_points()]


def client_matrix(only: str = "") -> list:
    cells = []
    for client, points_and_runs in (("PlannedPool", pool_cells), ("replay", replay_cells),
                                    ("walker", walker_cells), ("broker", broker_cells)):
        if only and only not in client:
            continue
        for point, run in points_and_runs():
            cell = run(point)
            cells.append(cell)
            print(f"{client:12s} {cell.point:60s} {cell.outcome:20s} leaked "
                  f"{cell.leaked_device_bytes}/{cell.leaked_pinned_bytes} B corrupt "
                  f"{cell.corrupt_bytes} over {cell.over_limit_bytes} B "
                  f"{'ok' if good(cell) else 'MISS'}", flush=True)
    return cells
