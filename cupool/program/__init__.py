"""Programs under a budget: a user's own repeating CuPy/NumPy program, run in less device
memory than it needs.

:class:`~cupool.program.session.Session` is the front door (``cupool.Session``): persistent
state registered once, each iteration declared as ops over tensors
(``with session.iteration() as it: it.op(fn, *inputs, out=spec)``), the first iteration run
passively and measured, later ones run from a plan by the swap engine. Modules, lowest
first:

- :mod:`.errors`: typed, picklable errors naming the op and the tensor;
- :mod:`.tensors`: :class:`~cupool.program.tensors.Spec`, tensor handles, fetched values,
  :func:`~cupool.program.tensors.array_module`;
- :mod:`.program`: the declared ops of an iteration and the trace made from them;
- :mod:`.transfer`, :mod:`.calls`: the session's own copies and op timing; calling an op,
  checked;
- :mod:`.recorder`: the passive iteration (LRU eviction, durations measured);
- :mod:`.planner`, :mod:`.runner`: the plan, and planned iterations on the swap engine;
- :mod:`.overhead`: what the engine adds per op and per iteration beyond the ops'
  callables, measured once when a session opens;
- :mod:`.synthetic`: a recorded trace as a program of pattern-checking ops (what
  ``cupool replay`` runs through the same runner);
- :mod:`.iteration`, :mod:`.session`: the user's API;
- :mod:`.eager`: the same API running every op at once on plain arrays (the program
  without cupool, for comparisons).
"""

from cupool.program.eager import EagerSession
from cupool.program.errors import (
    BudgetTooSmallError,
    EngineFailedError,
    NotReadyError,
    OpFailedError,
    OpResultError,
    PlanningFailedError,
    ProgramChangedError,
    ProgramError,
    SessionClosedError,
    SpecError,
    TensorReleasedError,
    TensorScopeError,
    UndeclaredWriteError,
)
from cupool.program.session import Session, StepReport
from cupool.program.tensors import Fetch, Spec, Tensor, array_module, spec

__all__ = ["BudgetTooSmallError", "EagerSession", "EngineFailedError", "Fetch", "NotReadyError",
           "OpFailedError", "OpResultError", "PlanningFailedError", "ProgramChangedError",
           "ProgramError", "Session", "SessionClosedError", "Spec", "SpecError", "StepReport",
           "Tensor", "TensorReleasedError", "TensorScopeError", "UndeclaredWriteError",
           "array_module", "spec"]
