"""``cupool selftest``: one command that proves cupool on a device, recorded in two files.

:func:`run_selftest` runs these steps in order, each timed and each written to
``<out>/selftest_<device>.json`` and ``.md`` as soon as it ends (a crash midway leaves the
steps before it on disk):

=============  ==========================================================================
``environment``  device, driver, CUDA, CuPy, NumPy, PyTorch versions (:mod:`.environment`)
``link``         pinned H2D/D2H bandwidth and per-copy latency against the cost model's
                 presets (:mod:`.link`)
``pool``         ``PlannedPool`` beside CuPy's ``MemoryPool`` on the ``cupy.empty`` loop of
                 every bundled trace: µs per malloc+free, reserved bytes (:mod:`.allocators`)
``ops``          measured op durations of a model step against the capture's estimates
                 (:mod:`.ops`)
``replay``       bundled traces at several budgets through the swap runtime: measured
                 iteration time against the simulator, late prefetches, corrupt bytes
``programs``     the example programs (``examples/mlp_sgd.py``, ``gpt_decoder.py``) trained
                 through ``cupool.Session`` at the replay budgets: parameters bitwise those
                 of the run without cupool, device peak within the budget
                 (:mod:`.programs`)
``stress``       ``cupool stress`` for some minutes: corrupt bytes, leaks, errors
``gpu_tests``    the GPU test suite (``pytest -m gpu``): pass, fail and skip counts
=============  ==========================================================================

Every step ends with a status: ``pass``, ``fail`` (a correctness check failed: a failed
test, a corrupt byte, a leaked block, an error counted by a check), ``error`` (the step
itself raised; the message says what) or ``not_run`` (with the reason). Speed and timing
targets (replay within 15% of the simulator, the pool's cost within 1.5× of CuPy's, link
presets within 10%) are listed apart in ``targets``: they say how well the models fit,
not whether a byte went wrong.

On ``"cuda"`` everything runs on the GPU at full size; on ``"emulated"`` the same steps run
on the emulated device (replay paced and scaled, the link paced like a preset, the model
step on the CPU, no GPU suite), which is how the harness itself is tested without a GPU.
"""

from __future__ import annotations

import datetime
import time
import traceback
from dataclasses import dataclass, field

from cupool.app.selftest import runners
from cupool.app.selftest.options import (
    DEFAULT_BUDGETS,
    DEFAULT_REPLAY_TRACES,
    DEVICES,
    EMULATED_LINK_SCALE,
    STEP_NAMES,
    SelftestOptions,
)
from cupool.app.selftest.report import targets, write_report
from cupool.errors import CupoolError, InputError


class SelftestUnavailableError(CupoolError):
    """The device asked for cannot run the self-test (no usable GPU); one line why."""


@dataclass
class StepRecord:
    """One step's outcome: ``status`` (module docstring), ``seconds``, ``result`` (the
    step's own flat dict or list of dicts), ``message`` (for ``error`` and ``not_run``)."""

    name: str
    status: str
    seconds: float
    result: object = None
    message: str = ""


@dataclass
class SelftestReport:
    """The whole run: when, where, every step, and the targets derived from them."""

    device: str
    started: str
    steps: list[StepRecord] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(step.status in ("pass", "not_run") for step in self.steps)

    @property
    def verdict(self) -> str:
        """``PASS`` or ``FAIL``, saying how many of the steps ran when not all of them did
        (a run of a few steps, or one with steps ``not_run``, proves less)."""
        word = "PASS" if self.passed else "FAIL"
        ran = sum(1 for step in self.steps if step.status != "not_run")
        if ran == len(STEP_NAMES):
            return word
        return f"{word} ({ran} of {len(STEP_NAMES)} steps run)"

    def document(self) -> dict:
        return {"selftest": 1, "device": self.device, "started": self.started,
                "passed": self.passed, "verdict": self.verdict,
                "steps": {s.name: {"status": s.status, "seconds": round(s.seconds, 3),
                                   "message": s.message, "result": s.result}
                          for s in self.steps},
                "targets": targets(self)}


def check_device(kind: str) -> None:
    """Raise :class:`SelftestUnavailableError` (one line) when ``kind`` cannot run here."""
    if kind not in DEVICES:
        raise InputError(f"device (={kind!r}) must be one of {', '.join(DEVICES)}")
    if kind == "cuda":
        from cupool.devices import probe_cuda

        usable, why = probe_cuda()
        if not usable:
            raise SelftestUnavailableError(
                f"selftest --device cuda needs a usable GPU and there is none: "
                f"{' '.join(why.split())}")


def run_selftest(options: SelftestOptions, *, log=None) -> SelftestReport:
    """Run the steps of ``options`` (module docstring); ``log(line)`` hears progress."""
    check_device(options.device)
    say = log or (lambda line: None)
    report = SelftestReport(device=options.device,
                            started=datetime.datetime.now(datetime.timezone.utc)
                            .isoformat(timespec="seconds"))
    context = runners.Context(options)
    try:
        for name in options.steps:
            say(f"selftest: {name} ...")
            started = time.perf_counter()
            try:
                status, result, message = runners.RUNNERS[name](context)
            except Exception as exc:  # the step broke: recorded, the next step runs
                status, result = "error", None
                message = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
                context.errors.append(traceback.format_exc(limit=8))
            step = StepRecord(name, status, time.perf_counter() - started, result, message)
            report.steps.append(step)
            write_report(report, options.out_dir)
            say(f"selftest: {name} {status} in {step.seconds:.1f} s"
                + (f" ({message})" if message else ""))
    finally:
        context.close()
    return report


__all__ = ["DEFAULT_BUDGETS", "DEFAULT_REPLAY_TRACES", "DEVICES", "EMULATED_LINK_SCALE",
           "STEP_NAMES", "SelftestOptions", "SelftestReport", "SelftestUnavailableError",
           "StepRecord", "check_device", "run_selftest"]
