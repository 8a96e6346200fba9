"""One mixed-integer program solved by SciPy's HiGHS for the overhead lower bound: the
solver's proven bound on its optimum.

The bound's programs (:mod:`cupool.sim.op_alone_lp`, :mod:`cupool.sim.peaks`) relax whole
buffers to fractions; where a few large buffers decide the answer, their switches are
stated 0 or 1 instead. Every valid plan still meets such a program, so the least ``T`` it
admits is still a bound; HiGHS' branch and bound proves a bound on that least ``T``
(``mip_dual_bound``: the optimum when it finishes, the best it proved when its time runs
out), which is what is used.
"""

from __future__ import annotations

import contextlib
import os
import sys

import numpy as np


@contextlib.contextmanager
def _stdout_muted():
    """File descriptor 1 pointed at the null device for the duration: HiGHS' branch and
    bound prints diagnostic lines from C++ straight to it, whatever its options say."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        yield
        return
    try:
        os.dup2(null, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)


def milp_dual_bound(objective, matrix, rhs, lower, upper, integral,
                    seconds: float, node_limit: int | None = None) -> float | None:
    """The proven lower bound on ``min objective @ x`` subject to ``matrix @ x <= rhs``,
    ``lower <= x <= upper`` and ``x[integral]`` integer, found within ``seconds`` (and
    ``node_limit`` branch-and-bound nodes, when given); ``None`` when HiGHS proves none (no
    solution, or an error).

    HiGHS' answers on these programs, whose rows mix bytes (up to 1e9) and microseconds,
    are not all to be trusted: it has called slots programs of the near-budget shapes
    infeasible that a valid plan's waits meet, and with every row divided by its largest
    coefficient it called 19,872 us optimal where a solution of 13,529 us meets every row
    exactly (solved as stated, HiGHS answers 13,529 us, with that solution). So programs
    are solved as stated, without presolve or scaling, and an infeasible answer gives no
    bound (the safe reading). The slots program (:mod:`cupool.sim.slots`) states its rows
    of bytes in MiB, which changes no number's value (a power of two) but keeps HiGHS'
    absolute tolerances meaningful: stated in bytes, its optimum on two near-budget
    programs was above the waits of a solution meeting every row as stated in bytes."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    with _stdout_muted():
        result = milp(objective, constraints=LinearConstraint(matrix, -np.inf, np.asarray(rhs)),
                      integrality=np.asarray(integral, dtype=np.float64),
                      bounds=Bounds(lower, upper),
                      options={"time_limit": seconds, "presolve": False,
                               **({} if node_limit is None else {"node_limit": node_limit})})
    dual = result.get("mip_dual_bound")
    # SciPy reports HiGHS' node limit as an unrecognized status (4); its bound stands
    stopped = node_limit is not None and result.status == 4 and "limit" in result.message
    if (result.status not in (0, 1) and not stopped) or dual is None or not np.isfinite(dual):
        return None
    return float(dual)


__all__ = ["milp_dual_bound"]
