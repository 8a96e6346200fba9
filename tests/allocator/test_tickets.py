"""Tickets: slotted, and everything a free needs is on the ticket."""

from __future__ import annotations

import collections

import pytest

from cupool.allocator.tickets import FALLBACK_BLOCK, PLANNED_BLOCK, Ticket


def test_a_ticket_is_slotted_and_names_its_block():
    queue = collections.deque()
    ticket = Ticket(queue.append, FALLBACK_BLOCK, 1024, -1, "region", 0x1000)
    assert not hasattr(ticket, "__dict__")
    with pytest.raises(AttributeError):
        ticket.offset = 0  # not a field
    assert (ticket.kind, ticket.size, ticket.slot, ticket.ptr, ticket.record) == (
        FALLBACK_BLOCK, 1024, -1, 0x1000, None)
    assert repr(ticket) == "<Ticket fallback 1024 B at 0x1000 slot -1>"
    ticket.release(ticket)  # what a dying block does
    assert list(queue) == [ticket]


def test_the_finaliser_queues_the_ticket():
    pytest.importorskip("cupy")
    from cupool.allocator.blocks import pointer

    queue = collections.deque()
    ticket = Ticket(queue.append, PLANNED_BLOCK, 512, 3, "arena", 0x2000)
    memory = pointer(ticket, 512, 0)
    assert (memory.ptr, memory.mem.size) == (0x2000, 512)
    view = memory + 256
    del memory
    assert not queue  # the view keeps the block alive
    del view
    assert list(queue) == [ticket]
