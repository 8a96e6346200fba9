"""The self-test's ``programs`` step: the checkout's example programs trained within a
budget, against the same programs without cupool.

Each example of ``examples/`` that trains a model through :class:`cupool.Session`
(``mlp_sgd.py``, ``gpt_decoder.py``) runs ``steps`` steps at each budget on the device
(CuPy arrays on a GPU, NumPy views of emulated memory otherwise), then again with
:class:`cupool.EagerSession` on the same array library (every op at once on plain arrays:
the program without cupool). A row passes when every parameter and every loss is bitwise
the same and the pool's device high-water mark stayed within the budget in every step;
the loss falling and the iteration times (against the simulator's prediction for the
recorded trace and the plan) are reported beside; the steady time is the mean from the
second planned step on (before it: the warm-up, the recording and the first planned
step).

The examples are files of the checkout, not of the package: the step is ``not_run`` where
there is no ``examples/`` directory beside ``cupool/``.
"""

from __future__ import annotations

import os
import statistics

from cupool.app.examples import EXAMPLES_DIR, load_example

PROGRAM_EXAMPLES = ("mlp_sgd", "gpt_decoder")


def program_step(name: str, budget: str, device_kind: str, steps: int = 6) -> dict:
    """Train example ``name`` for ``steps`` steps within ``budget`` on ``device_kind`` and
    without cupool; one flat dict (module docstring)."""
    import numpy as np

    from cupool.program import EagerSession, Session
    from cupool.sim.simulator import simulate

    if device_kind == "cuda":  # reproducible cuBLAS results whichever stream runs them
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    module = load_example(name)
    with Session(budget, device=device_kind) as session:
        losses, params = module.train(session, steps)
        reports = session.reports
        xp = session.xp
        simulated = (simulate(session.planned.trace, session.plan, session.cost,
                              validate=False).iteration_us if session.plan else None)
        row = {"example": name, "budget": budget, "device": device_kind, "steps": steps,
               "budget_bytes": session.budget_bytes, "peak_bytes": session.peak_bytes,
               "plan_reason": session.plan_reason}
    with EagerSession(xp) as eager:
        reference_losses, reference = module.train(eager, steps)
    planned = [i for i, r in enumerate(reports) if r.mode == "planned"]
    steady = [r.iteration_us for r in reports[planned[0] + 1:]] if planned else []
    row |= {
        "modes": [r.mode for r in reports],
        "losses": losses, "loss_decreased": losses[-1] < losses[0],
        "losses_identical": losses == reference_losses,
        "params_identical": all(np.array_equal(params[k], v) for k, v in reference.items()),
        "device_peak_bytes": [r.device_peak_bytes for r in reports],
        "within_budget": all(r.device_peak_bytes <= r.budget_bytes for r in reports),
        "late_prefetches": [r.late_prefetches for r in reports],
        "iteration_us": [r.iteration_us for r in reports],
        "steady_us": statistics.fmean(steady) if steady else None,
        "sim_iteration_us": simulated,
    }
    row["passed"] = row["params_identical"] and row["losses_identical"] and \
        row["within_budget"]
    return row


__all__ = ["EXAMPLES_DIR", "PROGRAM_EXAMPLES", "load_example", "program_step"]
