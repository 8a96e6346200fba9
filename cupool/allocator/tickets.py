"""Tickets: what the pool knows about one block it handed out.

A :class:`Ticket` is the ``owner`` of its block's memory (a
:class:`~cupool.allocator.blocks.Block`). When the block dies, its finaliser passes the
ticket to ``ticket.release`` (the pool's free queue, a ``deque.append``); the pool takes
it from the queue under its lock and returns the block to ``ticket.region``. Nothing else
is needed to free a block, so the ticket carries it all::

    malloc ──► Ticket(release, kind, size, slot, region, ptr, record) ──► Block(ptr, owner=ticket)
    block dies ──► ticket.release(ticket) ──► queue ──► pool (locked): ticket.region gets ptr back

Who makes them:

- a **planned** slot's ticket is made once, when its plan is installed, and handed out
  again in every planned iteration: an arena has at most one live block per slot (see
  :class:`~cupool.allocator.arena.PlannedArena`), so ``(region, slot)`` names the block;
- **fallback** and **persistent** tickets are made per block.

Speed. A slotted class costs the planned path what a 7-tuple read by constant index
would. The planned ``malloc`` reads ``ptr`` and ``release`` of the ticket it serves and
the free path ``size``, ``region`` and ``slot`` of each queued one; CPython specialises
reads of ``__slots__`` attributes, so four of them cost what four constant-index tuple
reads do (17.7 ns against 21.5 ns, CPython 3.11). One exception:
``ticket.release(ticket)`` is a method-call lookup that the interpreter does not
specialise for a slot (42 ns against 35 ns for ``ticket[0](ticket)``), so the hot callers
read the attribute first, ``release = ticket.release; release(ticket)`` (37 ns). Making a
ticket costs ~145 ns against ~32 ns for a tuple: planned tickets are made once per plan,
and fallback and persistent blocks, which pay it, log a recorded block into two lists
instead of a new list per block and keep their state off the ``MemoryPool`` subclass
(see :mod:`cupool.allocator.modes`), which more than pays for it.
"""

from __future__ import annotations

__all__ = ["FALLBACK_BLOCK", "PERSISTENT_BLOCK", "PLANNED_BLOCK", "Ticket"]

PLANNED_BLOCK, FALLBACK_BLOCK, PERSISTENT_BLOCK = 0, 1, 2
"""Block kinds (``Ticket.kind``): ints, compared on the free path."""


class Ticket:
    """One block handed out (see the module docstring).

    Attributes:
        release: called with the ticket when the block dies (the pool's free queue's
            ``append``; it must never take the pool's lock).
        kind: :data:`PLANNED_BLOCK`, :data:`FALLBACK_BLOCK` or :data:`PERSISTENT_BLOCK`.
        size: the block's rounded size in bytes (a multiple of 512).
        slot: the block's allocation index in its iteration: its slot in a plan for a
            planned block, its index in ``record`` for a recorded one; -1 otherwise.
        region: the :class:`~cupool.allocator.arena.PlannedArena` or
            :class:`~cupool.allocator.arena.BestFitArena` the bytes came from.
        ptr: the block's device address.
        record: for a block allocated while recording, the
            :class:`~cupool.allocator.recording.RecordLog` of its iteration (its free is
            logged there); else ``None``.
    """

    __slots__ = ("kind", "ptr", "record", "region", "release", "size", "slot")

    def __init__(self, release, kind: int, size: int, slot: int, region, ptr: int,
                 record=None) -> None:
        self.release = release
        self.kind = kind
        self.size = size
        self.slot = slot
        self.region = region
        self.ptr = ptr
        self.record = record

    def __repr__(self) -> str:
        kind = ("planned", "fallback", "persistent")[self.kind]
        return f"<Ticket {kind} {self.size} B at {self.ptr:#x} slot {self.slot}>"
