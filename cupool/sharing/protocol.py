"""The broker's message protocol: plain dicts over an authenticated local socket.

Transport: :mod:`multiprocessing.connection` framing (pickled dicts) on an ``AF_UNIX``
socket, after its HMAC challenge on the shared ``authkey`` in both directions. Every
message carries ``"v"`` (:data:`VERSION`); the broker answers a message of another
version with a :class:`ProtocolError`.

Requests (client → broker), each with a client-chosen ``"seq"``:

==================  ====================================================================
``op``              fields → reply fields
==================  ====================================================================
``hello``           ``job, persistent_bytes, temporary_bytes`` → ``epoch, arena`` (attach
                    handle), ``persistent`` / ``temporary`` (``{"offset", "size"}``),
                    ``exclusive`` (slot overlaps no other), ``policy``, ``slice_iterations``
``acquire``         ``epoch`` → (when granted, maybe much later) ``grant, iterations``
``iteration_done``  ``epoch, grant`` → ``slice_over`` (True: slice ended, temp zeroed)
``release``         ``epoch, grant`` → ``{}`` (slice ended early)
``cancel``          ``epoch`` → ``cancelled`` (a queued acquire withdrawn)
``stats``           → ``stats`` (flat dict, see :mod:`cupool.sharing.broker`), ``events``,
                    ``jobs``
``bye``             ``epoch`` → ``{}``; the job leaves and its regions are reclaimed
``shutdown``        → ``{}``; the broker stops
==================  ====================================================================

Replies (broker → client): ``{"v", "seq", "ok": True, ...}`` or ``{"v", "seq", "ok":
False, "error": {"type", "args"}}`` (see :func:`cupool.sharing.errors.error_from_wire`).
``epoch`` is the broker's random 63-bit start identifier and ``grant`` a number that
grows with every slice: a request with a foreign epoch or an old grant is refused
(:class:`StaleGrantError`), so nothing is ever done on a stale authority.
"""

from __future__ import annotations

from cupool.sharing.errors import ProtocolError

VERSION = 1
OPS = ("hello", "acquire", "iteration_done", "release", "cancel", "stats", "bye", "shutdown")


def request(op: str, seq: int, **fields) -> dict:
    return {"v": VERSION, "op": op, "seq": seq, **fields}


def reply(seq: int, **fields) -> dict:
    return {"v": VERSION, "seq": seq, "ok": True, **fields}


def error_reply(seq, error) -> dict:
    return {"v": VERSION, "seq": seq, "ok": False, "error": error.to_wire()}


def check_request(message) -> None:
    """Raise :class:`ProtocolError` unless ``message`` is a request of this version."""
    if not isinstance(message, dict):
        raise ProtocolError(f"expected a dict message, got {type(message).__name__}")
    if message.get("v") != VERSION:
        raise ProtocolError(f"message version (={message.get('v')!r}) must be {VERSION}")
    if message.get("op") not in OPS:
        raise ProtocolError(f"op (={message.get('op')!r}) must be one of {', '.join(OPS)}")
    if not isinstance(message.get("seq"), int):
        raise ProtocolError(f"seq (={message.get('seq')!r}) must be an int")


def check_reply(message) -> None:
    if not isinstance(message, dict) or message.get("v") != VERSION or "ok" not in message:
        raise ProtocolError(f"expected a version-{VERSION} reply, got {message!r:.200}")
