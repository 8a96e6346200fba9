"""Where the pool's bytes are: its device reservations, its three regions, and its frees.

:class:`Regions` holds every reservation the pool makes on its device and hands blocks out
of them:

- the **persistent region** and the **fallback region**, two
  :class:`~cupool.allocator.arena.BestFitArena` grown by one exact-size reservation when
  nothing fits (:meth:`Regions.persistent_ticket`, :meth:`Regions.fallback_ticket`);
- the **planned arena** of the active plan (:meth:`Regions.install_arena`), and the
  *retired* arenas of earlier plans, released when their last block is freed.

A reservation that would pass the limit, or that the device refuses, escalates as CuPy's
pool does (release empty segments, retry; ``gc.collect()``, drain the frees, release,
retry) and then raises :class:`~cupool.allocator.errors.PoolOutOfMemoryError` with
:meth:`Regions.report`.

**Frees.** A dying block queues its ticket on :attr:`Regions.pending` without the lock
(:class:`~cupool.allocator.blocks.Block`); :meth:`Regions.drain` returns the queued blocks
to their regions. Everything here is guarded by the pool's lock except ``pending``.
"""

from __future__ import annotations

import collections
import gc

from cupool.allocator.arena import BestFitArena, LiveBlock, PlannedArena
from cupool.allocator.blocks import thread_hooks
from cupool.allocator.errors import CapacityError, PoolOutOfMemoryError
from cupool.allocator.plan_files import PoolPlan
from cupool.allocator.recording import RecordLog
from cupool.allocator.stats import PoolCounters
from cupool.allocator.tickets import FALLBACK_BLOCK, PERSISTENT_BLOCK, PLANNED_BLOCK, Ticket
from cupool.core.units import format_bytes
from cupool.devices.errors import DeviceOutOfMemoryError

__all__ = ["Regions"]


class Regions:
    """The pool's reservations and regions (module docstring).

    Args:
        device: the open :class:`~cupool.devices.protocol.Device` every reservation comes
            from (not owned: the pool closes it, if it opened it).
        name: the pool's name, for reports.
        counters: the pool's statistics; the regions keep the byte gauges, ``mallocs``
            of the fallback and persistent regions and the reservation counters.
        mode_of: returns the pool's mode, for reports.
    """

    def __init__(self, device, name: str, counters: PoolCounters, mode_of) -> None:
        self.device = device
        self.device_id = int(getattr(device, "device_id", 0))
        self.name = name
        self.counters = counters
        self._mode_of = mode_of
        _free, self.device_total = device.mem_info()
        self.limit = 0  # 0: no limit but the device's
        self.pending: collections.deque[Ticket] = collections.deque()
        self.release_ticket = self.pending.append  # Ticket.release: dying blocks call it
        self.fallback = BestFitArena("fallback")
        self.persistent = BestFitArena("persistent")
        self.arena: PlannedArena | None = None  # the active plan's arena
        self.last_arena: PlannedArena | None = None  # the last one installed (for save)
        self.retired: list[PlannedArena] = []  # earlier plans' arenas with live blocks

    # -- frees --------------------------------------------------------------------------
    def drain(self) -> None:
        """Process queued frees."""
        pending = self.pending
        if pending:
            counters = self.counters
            while pending:
                ticket = pending.popleft()
                counters.allocated_bytes_current -= ticket.size
                self.free_ticket(ticket)

    def free_ticket(self, ticket: Ticket) -> None:
        """Return a freed block to its region (the caller has taken its size off
        ``allocated_bytes``)."""
        kind, region = ticket.kind, ticket.region
        if kind == PLANNED_BLOCK:
            if region.free(ticket.slot):  # the last live block of a retired arena
                self.retired.remove(region)
                self.release(region.memory)
                region.close_tickets()
        elif kind == FALLBACK_BLOCK:
            region.free(ticket.ptr)
            self.counters.fallback_bytes_current -= ticket.size
            if ticket.record is not None:
                ticket.record.free(ticket.slot)
        else:
            region.free(ticket.ptr)
            self.counters.persistent_bytes_current -= ticket.size

    # -- blocks of the best-fit regions ----------------------------------------------------
    def fallback_ticket(self, size: int, log: RecordLog | None = None) -> Ticket:
        """The ticket of a new block of the fallback region; with ``log``, the block is
        the log's next allocation (the caller logs it once this returns)."""
        fallback = self.fallback
        ptr = self._take(fallback, size, "fallback region")
        counters = self.counters
        counters.fallback_mallocs += 1
        counters.add("fallback_bytes", size)
        counters.add("allocated_bytes", size)
        slot = -1 if log is None else len(log.sizes)
        return Ticket(self.release_ticket, FALLBACK_BLOCK, size, slot, fallback, ptr, log)

    def persistent_ticket(self, size: int) -> Ticket:
        """The ticket of a new block of the persistent region."""
        persistent = self.persistent
        ptr = self._take(persistent, size, "persistent region")
        counters = self.counters
        counters.persistent_allocations += 1
        counters.add("persistent_bytes", size)
        counters.add("allocated_bytes", size)
        return Ticket(self.release_ticket, PERSISTENT_BLOCK, size, -1, persistent, ptr)

    def _take(self, arena: BestFitArena, size: int, what: str) -> int:
        """Best fit in ``arena``, growing it by one exact-size segment when nothing fits."""
        ptr = arena.alloc(size)
        if ptr is None:
            arena.add_segment(self.reserve(size, what))
            ptr = arena.alloc(size)
        return ptr

    # -- planned arenas ---------------------------------------------------------------------
    def install_arena(self, pool_plan: PoolPlan) -> PlannedArena:
        """Reserve the plan's arena (after releasing empty segments) and make it the
        active one. :class:`PoolOutOfMemoryError` when it cannot be reserved."""
        self.release_empty()
        plan = pool_plan.plan
        memory = self.reserve(plan.arena_bytes, "planned arena") if plan.arena_bytes else None
        arena = PlannedArena(plan, pool_plan.trace, pool_plan.recording, memory,
                             self.release_ticket)
        self.arena = self.last_arena = arena
        self.counters.add("arena_bytes", arena.reserved_bytes)
        return arena

    def reuse_arena(self, pool_plan: PoolPlan) -> bool:
        """Serve ``pool_plan`` from the active arena's reservation, when that arena has no
        live block and exactly the plan's size (its bytes stay where they are); False,
        changing nothing, otherwise."""
        active = self.arena
        if active is None or active.memory is None or active.live_count() \
                or active.reserved_bytes != pool_plan.plan.arena_bytes:
            return False
        memory = active.memory
        active.memory = None  # handed over: retiring the old plan releases nothing
        active.retire()
        active.close_tickets()
        self.arena = self.last_arena = PlannedArena(pool_plan.plan, pool_plan.trace,
                                                    pool_plan.recording, memory,
                                                    self.release_ticket)
        return True

    def retire_arena(self) -> None:
        """Retire the active arena, if any: released now if none of its blocks is live,
        else when the last one is freed."""
        arena, self.arena = self.arena, None
        if arena is None:
            return
        self.counters.arena_bytes_current -= arena.reserved_bytes
        if arena.retire():
            self.release(arena.memory)
            arena.close_tickets()
        else:
            self.retired.append(arena)

    # -- device reservations ----------------------------------------------------------------
    def check_capacity(self, what: str, size: int) -> int:
        """``size`` as a capacity or limit; :class:`CapacityError` when it is larger than
        the device's total memory."""
        if size > self.device_total:
            raise CapacityError(what, size, self.device_total, self.device.name)
        return size

    def reserve(self, size: int, what: str):
        """Reserve ``size`` bytes for ``what``, escalating like CuPy before giving up."""
        for attempt in range(3):
            if attempt == 1:
                self.release_empty()
            elif attempt == 2:
                gc.collect()
                self.drain()
                self.release_empty()
            reserved = self.counters.reserved_bytes_current
            if self.limit and reserved + size > self.limit:
                continue
            try:
                memory = self._device_reserve(size)
            except DeviceOutOfMemoryError:
                continue
            return memory
        raise self.out_of_memory(size, what)

    def out_of_memory(self, size: int, what: str) -> PoolOutOfMemoryError:
        """The error for ``size`` bytes for ``what`` that cannot be had (counted)."""
        self.counters.oom_errors += 1
        return PoolOutOfMemoryError(size, self.counters.reserved_bytes_current, self.limit,
                                    self.report(size, what))

    def _device_reserve(self, size: int):
        device_id = self.device_id
        hooks = thread_hooks()
        if hooks:
            for hook in hooks.values():
                hook.alloc_preprocess(device_id=device_id, mem_size=size)
        memory = None
        try:
            memory = self.device.reserve(size)
        finally:
            if hooks:
                for hook in hooks.values():
                    hook.alloc_postprocess(device_id=device_id, mem_size=size,
                                           mem_ptr=memory.ptr if memory is not None else 0)
        self.counters.add("reserved_bytes", size)
        self.counters.device_reservations += 1
        return memory

    def release(self, memory) -> None:
        """Give one reservation back to the device (``None``: nothing)."""
        if memory is None:
            return
        self.device.release(memory)
        self.counters.reserved_bytes_current -= memory.size
        self.counters.device_releases += 1

    def release_empty(self) -> None:
        """Give back every fallback and persistent segment with no live block."""
        for arena in (self.fallback, self.persistent):
            for segment in arena.take_empty_segments():
                self.release(segment)

    # -- accounts -----------------------------------------------------------------------------
    def live_count(self) -> int:
        """The number of live blocks (drain first)."""
        arenas = [*([self.arena] if self.arena else []), *self.retired]
        return (self.fallback.live_count + self.persistent.live_count
                + sum(arena.live_count() for arena in arenas))

    def live_blocks(self) -> list[LiveBlock]:
        """Every live block (drain first)."""
        live = [*self.fallback.live_blocks(), *self.persistent.live_blocks()]
        for arena in [*([self.arena] if self.arena else []), *self.retired]:
            live += arena.live_blocks()
        return live

    def report(self, size: int, what: str) -> str:
        """A readable account of the pool when ``size`` bytes for ``what`` cannot be had."""
        counters = self.counters
        try:
            free, total = self.device.mem_info()
            device = f"{free} of {total} bytes free"
        except Exception as exc:  # a broken device must not hide the OOM itself
            device = f"mem_info failed: {exc}"
        arena = self.arena
        fallback, persistent = self.fallback.stats(), self.persistent.stats()
        lines = [
            f"PlannedPool {self.name!r} on device {self.device.name!r}: cannot reserve "
            f"{size} bytes ({format_bytes(size)}) for the {what}",
            f"  mode {self._mode_of()}; limit {self.limit or 'none'}; device: {device}",
            f"  reserved {counters.reserved_bytes_current} bytes: planned arena "
            f"{arena.reserved_bytes if arena else 0}, retired arenas "
            f"{sum(a.reserved_bytes for a in self.retired)}, fallback "
            f"{fallback.segment_bytes} ({fallback.allocated_bytes} in use, largest free range "
            f"{fallback.largest_free_range}), persistent {persistent.segment_bytes} "
            f"({persistent.allocated_bytes} in use, largest free range "
            f"{persistent.largest_free_range})",
        ]
        live = self.live_blocks()
        lines.append(f"  live blocks: {len(live)} holding {sum(b.size for b in live)} bytes; "
                     f"largest:")
        for block in sorted(live, key=lambda b: -b.size)[:10]:
            where = f" slot {block.slot}" if block.slot >= 0 else ""
            lines.append(f"    {block.size:>14} B  {block.kind:<10}{where} at {block.ptr:#x}")
        return "\n".join(lines)
