"""A job's side of a time-shared device: connect, then run iterations inside slices.

::

    with SharingClient("resnet", persistent_bytes=8 << 20, temporary_bytes=4 << 20) as job:
        with job.iteration() as grant:          # waits for the slice (round robin)
            grant.persistent.write(0, weights)  # the job's own slot, bounds-checked
            scratch = grant.temporary.array(np.float32)
            ...
        # after slice_iterations iterations the slice ends: the temporary bytes are zeroed
        # and the next job runs; the persistent bytes stay where they are

A job sees only its two regions. :class:`Region` checks every access against the bytes
the job declared (:class:`RegionBoundsError`) and against the grant: outside a slice,
after the broker went away, or after ``close()``, any access raises
(:class:`RegionAccessError`, :class:`BrokerGoneError`) — the broker may be evicting the
slot or another job may own the temporary region then. Arrays from :meth:`Region.array`
are views, bounds-safe by construction, and must not be kept past the ``with`` block.
"""

from __future__ import annotations

import contextlib
import operator
from multiprocessing.connection import Client

import numpy as np

from cupool.sharing import protocol
from cupool.sharing.config import broker_paths, read_key
from cupool.sharing.errors import (
    BrokerGoneError,
    BrokerUnreachableError,
    ProtocolError,
    RegionAccessError,
    RegionBoundsError,
    SharingArgumentError,
    SliceTimeoutError,
    StaleGrantError,
    error_from_wire,
)
from cupool.sharing.layout import JobNeeds
from cupool.sharing.memory import attach_arena


class Region:
    """``size`` bytes of the arena that belong to one job (``name`` is ``"persistent"`` or
    ``"temporary"``). Offsets are relative to the region."""

    def __init__(self, client: SharingClient, name: str, offset: int, size: int) -> None:
        self._client = client
        self.name = name
        self._offset = offset
        self.size = size

    def _check(self, offset: int, nbytes: int) -> tuple[int, int]:
        self._client._check_access(self.name)
        try:
            offset, nbytes = operator.index(offset), operator.index(nbytes)
        except TypeError:
            raise SharingArgumentError(f"Region({self.name}).access", "offset", offset,
                                       "and nbytes must be integers") from None
        if offset < 0 or nbytes < 0 or offset + nbytes > self.size:
            raise RegionBoundsError(self._client.job, self.name, offset, nbytes, self.size)
        return offset, nbytes

    def write(self, offset: int, data) -> None:
        """Copy ``data`` (bytes-like, any contiguous buffer) to ``[offset, offset + len)``."""
        offset, _ = self._check(offset, memoryview(data).nbytes)
        self._client._arena.write(self._offset + offset, data)

    def read(self, offset: int = 0, nbytes: int | None = None) -> bytes:
        """``nbytes`` bytes from ``offset`` (default: to the end of the region)."""
        offset, nbytes = self._check(offset, self.size - offset if nbytes is None else nbytes)
        return self._client._arena.read(self._offset + offset, nbytes)

    def fill(self, value: int = 0) -> None:
        """Set every byte of the region to ``value`` (0..255)."""
        if not isinstance(value, int) or not 0 <= value <= 255:
            raise SharingArgumentError("Region.fill", "value", value, "must be an int in [0, 255]")
        self._check(0, self.size)
        self._client._arena.fill(self._offset, self.size, value)

    def array(self, dtype=np.uint8):
        """The region as a 1-D array of ``dtype`` (a NumPy view on the emulated device, a
        CuPy array on CUDA); valid only inside the current grant."""
        self._check(0, self.size)
        return self._client._arena.array(self._offset, self.size, dtype)


class Grant:
    """The right to use the device for one slice: ``grant`` (a number growing with every
    slice) of broker ``epoch``, for ``iterations`` iterations."""

    def __init__(self, client: SharingClient, epoch: int, grant: int, iterations: int) -> None:
        self.epoch = epoch
        self.grant = grant
        self.iterations = iterations
        self.active = True
        self.persistent = client.persistent
        self.temporary = client.temporary


class SharingClient:
    """One job of a time-shared device (one per process and device).

    ``persistent_bytes`` / ``temporary_bytes``: what the job declares (see
    :func:`cupool.sharing.needs_from_trace` to measure them from a trace).
    ``device`` and ``runtime_dir`` find the broker (see :func:`broker_paths`); ``authkey``
    defaults to the broker's key file. ``reply_timeout_s`` bounds every wait for a reply
    except the wait for a slice. Raises :class:`BrokerUnreachableError` when no broker
    answers and :class:`AdmissionError` when the job can never fit.
    """

    def __init__(self, job: str, persistent_bytes: int, temporary_bytes: int, *,
                 device: str = "emulated:0", runtime_dir: str | None = None,
                 authkey: bytes | None = None, reply_timeout_s: float = 30.0) -> None:
        self.needs = JobNeeds(job, persistent_bytes, temporary_bytes)
        self.job = job
        self.reply_timeout_s = reply_timeout_s
        paths = broker_paths(device, runtime_dir)
        self.address = paths["address"]
        self.epoch = 0
        self._seq = 0
        self._grant: Grant | None = None
        self._gone: BrokerGoneError | None = None
        self._closed = False
        self._arena = None
        key = authkey if authkey is not None else read_key(paths["key"], self.address)
        try:
            self._conn = Client(self.address, "AF_UNIX", authkey=key)
        except Exception as error:  # no socket, refused, AuthenticationError (wrong key)
            raise BrokerUnreachableError(self.address, f"{type(error).__name__}: {error}") from None
        try:
            hello = self._call("hello", job=job, persistent_bytes=persistent_bytes,
                               temporary_bytes=temporary_bytes)
            self._arena = attach_arena(hello["arena"])
        except BaseException:  # the broker reclaims the job when the socket closes
            with contextlib.suppress(OSError):
                self._conn.close()
            raise
        self.epoch = hello["epoch"]
        self.policy = hello["policy"]
        self.slice_iterations = hello["slice_iterations"]
        self.exclusive = hello["exclusive"]
        self.layout = {"persistent": hello["persistent"], "temporary": hello["temporary"]}
        self.persistent = Region(self, "persistent", hello["persistent"]["offset"],
                                 hello["persistent"]["size"])
        self.temporary = Region(self, "temporary", hello["temporary"]["offset"],
                                hello["temporary"]["size"])

    @classmethod
    def for_needs(cls, needs: JobNeeds, **options) -> SharingClient:
        return cls(needs.job, needs.persistent_bytes, needs.temporary_bytes, **options)

    # ---------------------------------------------------------------- requests
    def _fail(self, reason: str):
        self._gone = BrokerGoneError(self.address, self.epoch, reason)
        if self._grant is not None:
            self._grant.active = False
            self._grant = None
        with contextlib.suppress(OSError):
            self._conn.close()
        raise self._gone

    def _usable(self) -> None:
        if self._gone is not None:
            raise self._gone
        if self._closed:
            raise RegionAccessError(self.job, "every", "the client is closed")

    def _send(self, op: str, **fields) -> int:
        self._usable()
        self._seq += 1
        try:
            self._conn.send(protocol.request(op, self._seq, **fields))
        except (OSError, EOFError, ValueError) as error:
            self._fail(f"send failed ({type(error).__name__})")
        return self._seq

    def _receive(self, seq: int, timeout_s: float | None) -> dict | None:
        """The reply to ``seq`` (``None`` on timeout); replies to other requests are
        dropped (a grant that crossed a cancel)."""
        while True:
            try:
                if not self._conn.poll(timeout_s):
                    return None
                message = self._conn.recv()
            except (OSError, EOFError) as error:
                self._fail(f"connection closed ({type(error).__name__})")
            protocol.check_reply(message)
            if message.get("seq") == seq:
                return message

    def _call(self, op: str, **fields) -> dict:
        seq = self._send(op, **fields)
        message = self._receive(seq, self.reply_timeout_s)
        if message is None:
            self._fail(f"no reply to {op!r} within {self.reply_timeout_s} s")
        return _unwrap(message)

    # ---------------------------------------------------------------- slices
    @property
    def holding(self) -> bool:
        """True while this job holds the slice."""
        return self._grant is not None and self._grant.active

    def acquire(self, timeout_s: float | None = None) -> Grant:
        """Wait for the slice (``timeout_s`` None: as long as it takes)."""
        if self.holding:
            return self._grant
        seq = self._send("acquire", epoch=self.epoch)
        message = self._receive(seq, timeout_s)
        if message is None:
            cancel = self._send("cancel", epoch=self.epoch)
            if self._receive(cancel, self.reply_timeout_s) is None:
                self._fail(f"no reply to 'cancel' within {self.reply_timeout_s} s")
            raise SliceTimeoutError(self.job, timeout_s)
        granted = _unwrap(message)
        if granted["epoch"] != self.epoch:
            raise StaleGrantError(self.job, granted["epoch"], granted["grant"], self.epoch, 0)
        self._grant = Grant(self, granted["epoch"], granted["grant"], granted["iterations"])
        return self._grant

    def iteration_done(self) -> bool:
        """Report the end of one iteration; True when that ended the slice."""
        grant = self._held("iteration_done")
        self._arena.synchronize()  # the job's device work is done before the broker hears
        over = self._call("iteration_done", epoch=grant.epoch, grant=grant.grant)["slice_over"]
        if over:
            grant.active = False
            self._grant = None
        return over

    def release(self) -> None:
        """End the slice now (the temporary bytes are zeroed)."""
        grant = self._held("release")
        self._arena.synchronize()
        grant.active = False
        self._grant = None
        self._call("release", epoch=grant.epoch, grant=grant.grant)

    @contextlib.contextmanager
    def iteration(self, timeout_s: float | None = None):
        """One iteration inside a slice: acquire the slice if not held, yield the
        :class:`Grant`, report the iteration done. On an exception the slice is released."""
        grant = self.acquire(timeout_s)
        try:
            yield grant
        except BaseException:
            if self.holding:
                with contextlib.suppress(Exception):
                    self.release()
            raise
        self.iteration_done()

    def _held(self, operation: str) -> Grant:
        self._usable()
        if not self.holding:
            raise RegionAccessError(self.job, "temporary", f"{operation} without holding a slice")
        return self._grant

    def _check_access(self, region: str) -> None:
        self._usable()
        if not self.holding:
            raise RegionAccessError(self.job, region,
                                    "the job does not hold a slice (use 'with client.iteration()')")

    # ---------------------------------------------------------------- misc
    def stats(self) -> dict:
        """The broker's ``{"stats", "events", "jobs"}`` (see :mod:`cupool.sharing.broker`)."""
        answer = self._call("stats")
        return {"stats": answer["stats"], "events": answer["events"], "jobs": answer["jobs"]}

    def close(self) -> None:
        """Leave: the broker zeroes and frees this job's regions. Idempotent; never raises
        because the broker is gone."""
        if self._closed:
            return
        if self._arena is not None:  # finish the job's device work before the broker frees
            with contextlib.suppress(Exception):
                self._arena.synchronize()
        if self._gone is None:
            with contextlib.suppress(BrokerGoneError, ProtocolError):
                self._call("bye", epoch=self.epoch)
        self._closed = True
        if self._grant is not None:
            self._grant.active = False
            self._grant = None
        with contextlib.suppress(OSError):
            self._conn.close()
        if self._arena is not None:
            self._arena.close()

    def __enter__(self) -> SharingClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _unwrap(message: dict) -> dict:
    if not message["ok"]:
        raise error_from_wire(message.get("error"))
    return message


def broker_request(op: str, device: str = "emulated:0", runtime_dir: str | None = None,
                   authkey: bytes | None = None, timeout_s: float = 10.0) -> dict:
    """Send ``stats`` or ``shutdown`` to a broker without joining as a job."""
    if op not in ("stats", "shutdown"):
        raise SharingArgumentError("broker_request", "op", op, "must be 'stats' or 'shutdown'")
    paths = broker_paths(device, runtime_dir)
    key = authkey if authkey is not None else read_key(paths["key"], paths["address"])
    try:
        conn = Client(paths["address"], "AF_UNIX", authkey=key)
    except Exception as error:
        raise BrokerUnreachableError(paths["address"], f"{type(error).__name__}: {error}") from None
    with conn:
        try:
            conn.send(protocol.request(op, 1))
            if not conn.poll(timeout_s):
                raise BrokerUnreachableError(paths["address"], f"no reply within {timeout_s} s")
            message = conn.recv()
        except (OSError, EOFError) as error:
            raise BrokerUnreachableError(paths["address"], f"{type(error).__name__}") from None
    protocol.check_reply(message)
    return _unwrap(message)
