"""The swap engine: runs a repeating workload under a swapping plan, on a device, checked.

- :mod:`.handles`: :class:`~cupool.swap.handles.TensorHandle`, one buffer's bytes and a
  checked ``with h.use(intent)``;
- :mod:`.staging`: pinned host slots carved from one reservation;
- :mod:`.copy_engine`: swap-outs and swap-ins on their own D2H and H2D streams;
- :mod:`.checks`: stream-ordered work of an op (pattern fills and checks, callables, spins);
- :mod:`.passive`: the passive first iteration (no plan, LRU swapping, measured);
- :mod:`.errors`: the typed errors of all of the above.

Nothing here imports CuPy at import time.
"""
