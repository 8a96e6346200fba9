"""One runner per self-test step: ``runner(context) -> (status, result, message)``.

The :class:`Context` holds what steps share: the options, the device the in-process steps
use (opened on first need, closed at the end), and the link measured by the ``link`` step,
which the ``replay`` step uses as its cost model on a GPU (so the simulator it is compared
with knows the real link, not a preset).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cupool.app.selftest.options import EMULATED_LINK_SCALE, SelftestOptions

PASS, FAIL, ERROR, NOT_RUN = "pass", "fail", "error", "not_run"
NO_GPU_SKIP = "needs a usable GPU"
"""What the GPU suite's skips say when they find no GPU (``tests/gpu/conftest.py``)."""


class Context:
    """Shared state of one self-test run (module docstring)."""

    def __init__(self, options: SelftestOptions) -> None:
        self.options = options
        self.link: dict | None = None
        self.errors: list[str] = []
        self._device = None

    @property
    def on_gpu(self) -> bool:
        return self.options.device == "cuda"

    def device(self):
        """The device of the in-process steps: the GPU, or a large unpaced emulated one."""
        if self._device is None:
            from cupool.devices import open_device

            if self.on_gpu:
                self._device = open_device("cuda")
            else:
                self._device = open_device("emulated", capacity="64GiB", name="selftest")
        return self._device

    def close(self) -> None:
        if self._device is not None:
            self._device.close()
            self._device = None


def _bundled(names) -> list:
    """The bundled traces whose file names contain one of ``names`` (all when ``None``),
    loaded; a name matching none is an error naming what exists."""
    from cupool.data import bundled_traces
    from cupool.errors import InputError
    from cupool.io import load_trace

    paths = bundled_traces()
    if names is None:
        return [load_trace(path) for path in paths]
    chosen = []
    for name in names:
        matches = [path for path in paths if name in path.name]
        if not matches:
            raise InputError(f"no bundled trace matches {name!r}; bundled: "
                             f"{', '.join(p.name for p in paths)}")
        chosen.append(load_trace(matches[0]))
    return chosen


def run_environment(context: Context):
    from cupool.app.selftest.environment import describe_environment

    return PASS, describe_environment(context.device()), ""


def run_link(context: Context):
    from cupool.app.selftest.link import compare_with_presets, measure_link

    if context.on_gpu:
        measured = measure_link(context.device())
    else:
        from cupool.devices import open_device
        from cupool.sim.cost import DEFAULT_LATENCY_US, LINK_PRESETS

        gbps = LINK_PRESETS["gen5"] / EMULATED_LINK_SCALE
        with open_device("emulated", capacity="64MiB", h2d_gbps=gbps, d2h_gbps=gbps,
                         latency_us=DEFAULT_LATENCY_US, name="selftest-link") as paced:
            measured = measure_link(paced, scale=EMULATED_LINK_SCALE, repeats=3)
    context.link = compare_with_presets(measured)
    return PASS, context.link, ""


def run_pool(context: Context):
    from cupool.app.selftest.allocators import compare_pools

    rows = [compare_pools(trace, context.device(), rounds=context.options.pool_rounds)
            for trace in _bundled(context.options.pool_traces)]
    return PASS, rows, ""


def run_ops(context: Context):
    from cupool.app.selftest.ops import measure_model

    try:
        import torch
    except ImportError:
        return NOT_RUN, None, "PyTorch is not installed (the capture extra)"
    model = context.options.op_model
    if context.on_gpu:
        if not torch.cuda.is_available():
            return NOT_RUN, None, f"torch {torch.__version__} sees no GPU (a CPU build?)"
        model = model or ("resnet50", "train", 32)
        return PASS, measure_model(*model, device="cuda"), ""
    model = model or ("resnet50", "train", 2)
    return PASS, measure_model(*model, device="cpu", small=True), ""


def _replay_link(context: Context) -> str | float:
    """The link the replay plans and simulates with: on a GPU the slower measured
    direction's fitted bandwidth when the ``link`` step ran, else the gen5 preset."""
    if context.on_gpu and context.link is not None:
        return min(row["gbps"] for row in context.link["directions"].values())
    return "gen5"


def run_replay(context: Context):
    from cupool.app.selftest.steps import replay_step

    link = _replay_link(context)
    rows = []
    for trace in _bundled(context.options.replay_traces):
        for budget in context.options.replay_budgets:
            rows.append(replay_step(trace, budget, context.options.device,
                                    iterations=context.options.replay_iterations, link=link))
    corrupt = sum(row["corrupt_bytes"] for row in rows)
    if corrupt:
        return FAIL, rows, f"{corrupt} corrupt bytes"
    return PASS, rows, ""


def run_programs(context: Context):
    from cupool.app.examples import example_dirs, find_example
    from cupool.app.selftest.programs import PROGRAM_EXAMPLES, program_step

    missing = [name for name in PROGRAM_EXAMPLES if find_example(name) is None]
    if missing:
        places = " or ".join(str(d) for d in example_dirs())
        return NOT_RUN, None, (f"the example programs {missing} are not in {places} "
                               f"(run the self-test from a checkout)")
    rows = [program_step(name, budget, context.options.device,
                         steps=context.options.program_steps)
            for name in PROGRAM_EXAMPLES for budget in context.options.replay_budgets]
    failed = [f"{row['example']} at {row['budget']}" for row in rows if not row["passed"]]
    if failed:
        return FAIL, rows, (f"{', '.join(failed)}: parameters differ from the run without "
                            f"cupool or the device peak exceeded the budget")
    return PASS, rows, ""


def run_stress(context: Context):
    from cupool.app.selftest.steps import run_stress_step

    result = run_stress_step(context.options.device, context.options.stress_minutes,
                             context.options.seed)
    if result["passed"]:
        return PASS, result, ""
    return FAIL, result, (f"{result['corrupt_bytes']} corrupt bytes, {result['leaked_blocks']}"
                          f" leaked blocks, {result['errors']} errors")


def run_gpu_tests(context: Context):
    from cupool.app.selftest.steps import run_test_suite

    if not context.on_gpu:
        return NOT_RUN, None, "the GPU test suite needs the cuda device"
    tests = context.options.tests_dir or Path(__file__).resolve().parents[3] / "tests"
    result = run_test_suite(tests, timeout_s=context.options.test_timeout_s,
                            junit_out=Path(context.options.out_dir) / "gpu_tests.xml")
    if not result["ran"]:
        return NOT_RUN, result, result["reason"]
    if result["failed"] or result["errors"]:
        return FAIL, result, f"{result['failed']} failed, {result['errors']} errors"
    blind = sum(count for reason, count in result["skip_reasons"].items()
                if NO_GPU_SKIP in reason)
    if blind:
        return FAIL, result, f"{blind} GPU tests skipped for want of a GPU: they did not see it"
    return PASS, result, ""


RUNNERS: dict[str, Callable[[Context], tuple]] = {
    "environment": run_environment, "link": run_link, "pool": run_pool, "ops": run_ops,
    "replay": run_replay, "programs": run_programs, "stress": run_stress,
    "gpu_tests": run_gpu_tests,
}
