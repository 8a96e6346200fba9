"""Baselines: faithful models of the allocators cupool competes with, and a driver that
runs a trace's allocations through one of them.

- ``"cupy"``: :class:`~cupool.baselines.cupy_pool.CupyMemoryPool`, CuPy's default
  ``cupy.cuda.MemoryPool`` (512 B rounding, exact best fit, split anything, merge on free).
- ``"torch"``: :class:`~cupool.baselines.torch_caching.TorchCachingAllocator`, PyTorch's
  CUDA caching allocator with default settings (2 MiB small segments, 20 MiB large ones,
  split rules per pool).

Each model is pure Python (no CuPy, no torch), deterministic, and hands out model device
addresses, so that live blocks can be checked for overlap. Module docstrings list every
rule with the function of the framework source it comes from.

:func:`allocate_trace` runs one trace iteration through a model, in the trace's own order
(half-open lifetimes ``[start, end)``)::

    op:              0        1        2
    persistent p:  [=========================)   allocated before everything, by id
    buffer a:      [=================)           start=0, end=2
    buffer b:               [================)   start=1, end=3
    buffer c:                        [=======)   start=2, end=3: freed a first, then c

At each op ``t``: first free every buffer with ``end == t`` (right after op ``t-1``), then
allocate every buffer with ``start == t`` in id order; persistent buffers are allocated
before op 0, ahead of the temporaries. Buffers ending at ``num_ops`` are freed at the end.
Nothing is ever returned to the device (no ``free_all_blocks`` / ``empty_cache``).

The result is one flat dict:

- ``policy``, ``trace``: names; ``buffers``, ``ops``: counts
- ``lower_bound_bytes``: :meth:`Trace.lower_bound_bytes` (peak live bytes)
- ``peak_reserved_bytes``: most bytes cudaMalloc'd at once (the baseline's footprint)
- ``peak_allocated_bytes``: most bytes handed out at once (rounded block sizes)
- ``num_device_mallocs``: cudaMalloc calls
- ``ratio``: ``peak_reserved_bytes / lower_bound_bytes`` (1.0 for an empty trace)
- ``reserved_bytes_per_op``, ``allocated_bytes_per_op``: lists of ``ops`` ints, the bytes
  while op ``t`` runs (after its allocations), for plots
"""

from __future__ import annotations

from cupool.baselines._segments import SegmentAllocator
from cupool.baselines.cupy_pool import CupyMemoryPool
from cupool.baselines.torch_caching import TorchCachingAllocator
from cupool.core.vocabulary import PERSISTENT, Trace
from cupool.errors import InputError

#: Policy name -> allocator class.
POLICIES: dict[str, type[SegmentAllocator]] = {
    CupyMemoryPool.name: CupyMemoryPool,
    TorchCachingAllocator.name: TorchCachingAllocator,
}


def make_allocator(policy: str) -> SegmentAllocator:
    """A fresh allocator model for a policy name (``"cupy"`` or ``"torch"``)."""
    try:
        return POLICIES[policy]()
    except KeyError:
        raise InputError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}",
                         where="baseline policy") from None


def allocate_trace(trace: Trace, policy: str | SegmentAllocator) -> dict:
    """Run ``trace``'s allocations through ``policy`` (a name or a fresh allocator);
    return the statistics described in the module docstring."""
    allocator = make_allocator(policy) if isinstance(policy, str) else policy
    num_ops = trace.num_ops
    order = sorted(trace.buffers, key=lambda b: (b.kind != PERSISTENT, b.start, b.id))
    allocations: list[list] = [[] for _ in range(num_ops + 1)]
    frees: list[list] = [[] for _ in range(num_ops + 1)]
    for buffer in order:
        allocations[0 if buffer.kind == PERSISTENT else buffer.start].append(buffer)
        frees[buffer.end].append(buffer)
    handles: dict[int, int] = {}
    reserved_per_op, allocated_per_op = [], []
    for op in range(num_ops + 1):
        for buffer in frees[op]:
            allocator.free(handles.pop(buffer.id))
        for buffer in allocations[op]:
            handles[buffer.id] = allocator.malloc(buffer.size)
        if op < num_ops:
            reserved_per_op.append(allocator.reserved_bytes)
            allocated_per_op.append(allocator.allocated_bytes)
    lower_bound = trace.lower_bound_bytes()
    return {
        "policy": allocator.name, "trace": trace.name,
        "buffers": len(trace.buffers), "ops": num_ops,
        "lower_bound_bytes": lower_bound,
        "peak_reserved_bytes": allocator.peak_reserved_bytes,
        "peak_allocated_bytes": allocator.peak_allocated_bytes,
        "num_device_mallocs": allocator.num_device_mallocs,
        "ratio": allocator.peak_reserved_bytes / lower_bound if lower_bound else 1.0,
        "reserved_bytes_per_op": reserved_per_op,
        "allocated_bytes_per_op": allocated_per_op,
    }


__all__ = ["POLICIES", "CupyMemoryPool", "TorchCachingAllocator", "allocate_trace",
           "make_allocator"]
