"""The swap runtime: a swapping plan run on a device, every residency served by a pool.

:mod:`.handles` (tensor handles and ``h.use()``), :mod:`.copy_engine` (D2H/H2D streams),
:mod:`.staging` (pinned staging), :mod:`.checks` (stream-ordered pattern checks on either
backend), :mod:`.executor` (one iteration of a swapping plan, its residencies served by a
:class:`~cupool.allocator.PlannedPool`; late-prefetch feedback), :mod:`.replay` and
:mod:`.passive`.

The executor and replay import the pool (a ``cupy.cuda.MemoryPool``, so CuPy) when they
start one; handles, the copy engine and staging do not need CuPy.
"""
