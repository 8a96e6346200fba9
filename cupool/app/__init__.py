"""Application commands: the programs built on the swap engine, each a client of it.

- :mod:`.replay`: :func:`~cupool.app.replay.replay` plans a trace for a budget, validates
  the plan and runs iterations of it with the :class:`~cupool.swap.engine.SwapEngine`,
  feeding the late prefetches it measures back to the planner's feedback between them.
- :mod:`.demo`: :func:`~cupool.app.demo.run_demo`, the main job on the bundled traces
  (every static solver, every budget policy below the lower bound, the engine replaying one
  plan).
- :mod:`.stress`: :func:`~cupool.app.stress.run_stress`, the pool, swaps at half the lower
  bound (the engine's replay beside an independent walker of the same plan) and concurrent
  streams under random load, every byte checked.
- :mod:`.selftest`: :func:`~cupool.app.selftest.run_selftest` proves cupool on a device
  (link, pools, op times, replay, stress, the GPU suite) and records it in two files.

The CLI (:mod:`cupool.cli`) calls these and prints what they return.
"""
