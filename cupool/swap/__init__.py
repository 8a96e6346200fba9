"""The swap engine: runs a repeating workload under a swapping plan, on a device, checked.

Driven at op boundaries (``begin_iteration``, ``before_op(i)``, the op's own work,
``after_op(i)``, ``end_iteration``), so a replayed trace and a program of Python callables
run on the same engine. Modules, lowest first:

- :mod:`.errors`: the typed, picklable errors of everything below;
- :mod:`.handles`: :class:`~cupool.swap.handles.TensorHandle`, one buffer's bytes and a
  checked ``with h.use(intent)``;
- :mod:`.staging`: pinned host slots carved from one reservation;
- :mod:`.copy_engine`: swap-outs and swap-ins on their own D2H and H2D streams;
- :mod:`.checks`: stream-ordered work of an op (pattern fills and checks, callables, spins);
- :mod:`.layout`: a swapping plan as the static plan a ``PlannedPool`` serves, at a scale;
- :mod:`.schedule`: a swapping plan indexed by op (what happens at each boundary);
- :mod:`.iteration`: the named per-iteration state, the op frame and the iteration result;
- :mod:`.patterns`: the replay's op body (patterns written and verified, durations spent);
- :mod:`.engine`: :class:`~cupool.swap.engine.SwapEngine`, the iteration driver;
- :mod:`.passive`: the passive first iteration (no plan, LRU swapping, measured).

Applications built on the engine live in :mod:`cupool.app`; the feedback that moves late
swap-ins' triggers between iterations is planning's
(:func:`~cupool.planning.budget.feedback.adjust_triggers`). Nothing here imports CuPy at
import time (the pool the engine serves residencies from does, when an engine is made).
"""
