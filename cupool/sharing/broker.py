"""The per-device broker: admits jobs, lays out their memory, and time-slices the device.

One broker owns one device arena (see :mod:`cupool.sharing.layout` for the picture). Jobs
are separate processes talking to it over :mod:`cupool.sharing.protocol`. A job *holds the
slice* — the shared temporary region, and the right to touch its persistent slot — for
``slice_iterations`` iterations; then the broker zeroes the temporary bytes the job
declared and grants the slice to the next waiting job, round robin (first come, first
served; a job that asks again goes to the back of the queue)::

    slice:      1         2         3         4
    holder:  [ job a ][ job b ][ job a ][ job b ]
                      ^ switch: zero a's temporary bytes; if b's slot is evicted,
                        copy out the resident slots overlapping it and copy b's back in

Persistent slots never move: when all fit (``exclusive``), a switch copies no persistent
byte. When they do not, a slot overlapping the incoming job's is *evicted* (copied to host
memory) and the incoming one *restored* at its own offset; both are logged and counted.

Robustness:
- a client that dies (its socket closes — the OS guarantees it on process exit) loses
  its slice and its slot: the broker zeroes what it could touch and schedules the next job.
  A job that is alive but hung keeps its slice: revoking a live process's slice would let
  its late writes land in the next job's memory, so death is the only revocation;
- one broker per device: an exclusive ``flock`` on ``<runtime_dir>/cupool-<device>.lock``
  (released by the OS when the broker dies); a new broker unlinks the segment a killed
  one left behind, and uses a new segment name and a new random ``epoch``, so a client of
  the old broker can never write into the new arena;
- every grant carries ``(epoch, grant)``; requests with anything else are refused.

Statistics (``stats()``): one flat dict of ints and floats, keys
``<group>.<name>`` — ``jobs.{admitted,refused,active,reclaimed}``,
``slices.{granted,revoked}``, ``switches`` (grants to another job than the last holder),
``evictions``, ``restores``, ``bytes.{persistent_out,persistent_in,temporary_zeroed,
temporary_out,temporary_in}`` and ``switch_seconds.{total,max}`` (from the end of one slice
to the grant of the next, for switches only). ``events()`` lists the recent events as
plain dicts (``{"event": "evict", "job": ..., "bytes": ...}``).
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import random
import socket
import threading
import time
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge

from cupool.sharing import protocol
from cupool.sharing.config import BrokerConfig, parse_device, write_key
from cupool.sharing.errors import (
    AdmissionError,
    BrokerRunningError,
    ProtocolError,
    SharingArgumentError,
    SharingError,
    StaleGrantError,
)
from cupool.sharing.layout import NAIVE, RESIDENT, JobNeeds, Slot, place_slot, slots_overlap
from cupool.sharing.memory import create_arena, unlink_segment

HANDSHAKE_TIMEOUT_S = 5.0
"""Seconds a new connection has to authenticate before the broker drops it."""

STAT_KEYS = (
    "jobs.admitted", "jobs.refused", "jobs.active", "jobs.reclaimed",
    "slices.granted", "slices.revoked", "switches", "evictions", "restores",
    "bytes.persistent_out", "bytes.persistent_in", "bytes.temporary_zeroed",
    "bytes.temporary_out", "bytes.temporary_in", "switch_seconds.total", "switch_seconds.max",
)


class _Job:
    """The broker's record of one connected job. Guarded by ``Broker._cond``."""

    def __init__(self, needs: JobNeeds, slot: Slot, conn, send_lock) -> None:
        self.needs = needs
        self.slot = slot
        self.conn = conn
        self.send_lock = send_lock
        self.resident = False
        self.host_image = None  # persistent bytes while evicted (None: all zero)
        self.temp_image = None  # naive policy: temporary bytes saved at a switch
        self.grant = 0  # the live grant number, 0 when not holding the slice
        self.iterations_left = 0
        self.acquire_seq = None  # seq of the pending acquire, None when not queued


class Broker:
    """A broker for one device; ``start()`` returns once it accepts clients."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.geometry = config.geometry
        self.epoch = random.SystemRandom().getrandbits(63) or 1
        backend, self.device_index = parse_device(config.device)
        self.backend = backend
        self._cond = threading.Condition()
        self._jobs: dict[str, _Job] = {}
        self._queue: collections.deque[str] = collections.deque()
        self._holder: str | None = None
        self._last_holder: str | None = None
        self._temp_owner: str | None = None  # naive policy: whose bytes the region holds
        self._grant_counter = 0
        self._handoff = None  # (seconds, bytes) spent ending the last slice
        self._stats = dict.fromkeys(STAT_KEYS, 0)
        self._stats["switch_seconds.total"] = 0.0
        self._stats["switch_seconds.max"] = 0.0
        self._events: collections.deque[dict] = collections.deque(maxlen=10_000)
        self._conns: list = []
        self._lock_fd = None
        self._arena = None
        self._server = None
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()
        self._started = False

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> Broker:
        if self._started:
            raise SharingArgumentError("Broker.start", "state", "started", "must be called once")
        self._started = True
        paths = self.config.paths
        self._take_lock(paths["lock"])
        try:
            self.segment = f"cupool-{os.getuid()}-{self.backend}{self.device_index}-{self.epoch:x}"
            self._arena = create_arena(self.backend, self.segment, self.geometry.capacity_bytes,
                                       self.device_index)
            os.ftruncate(self._lock_fd, 0)
            os.pwrite(self._lock_fd, f"pid={os.getpid()} segment={self.segment}\n".encode(), 0)
            self._authkey = self.config.authkey or write_key(paths["key"])
            with contextlib.suppress(FileNotFoundError):
                os.unlink(paths["address"])  # stale: we hold the device lock
            self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._server.bind(paths["address"])
            os.chmod(paths["address"], 0o600)
            self._server.listen(64)
        except BaseException:
            self._release_resources()
            raise
        self.address = paths["address"]
        threading.Thread(target=self._accept_loop, name="cupool-broker-accept",
                         daemon=True).start()
        self._log("start", epoch=self.epoch, capacity=self.geometry.capacity_bytes,
                  persistent_area=self.geometry.persistent_area_bytes,
                  temporary_region=self.geometry.temporary_region_bytes)
        return self

    def serve_forever(self) -> None:
        if not self._started:
            self.start()
        self._stopped.wait()

    def stop(self) -> None:
        """Close every connection, free the arena, release the device lock. Idempotent; a
        second caller waits until the first one has finished."""
        with self._stop_lock:
            with self._cond:
                if self._stopped.is_set() or not self._started:
                    return
                self._stopped.set()
                conns = list(self._conns)
            with contextlib.suppress(OSError):
                self._server.shutdown(socket.SHUT_RDWR)  # wakes accept()
            for conn in conns:
                _shutdown(conn)
            with self._cond:
                self._release_resources()

    def _release_resources(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
            with contextlib.suppress(OSError):
                os.unlink(self.config.paths["address"])
        if self._arena is not None:
            self._arena.close()
            self._arena = None
        if self._lock_fd is not None:
            os.ftruncate(self._lock_fd, 0)
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _take_lock(self, path: str) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown owner"
            os.close(fd)
            raise BrokerRunningError(self.config.device, path, owner) from None
        previous = os.pread(fd, 200, 0).decode(errors="replace")
        for word in previous.split():
            if word.startswith("segment="):
                unlink_segment(word[len("segment="):])  # left by a broker that was killed
        self._lock_fd = fd

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the broker stopped (True) or ``timeout_s`` passed (False)."""
        return self._stopped.wait(timeout_s)

    # ---------------------------------------------------------------- inspection
    def stats(self) -> dict:
        with self._cond:
            return dict(self._stats, **{"jobs.active": len(self._jobs)})

    def events(self) -> list[dict]:
        with self._cond:
            return list(self._events)

    def jobs(self) -> list[dict]:
        with self._cond:
            return [{"job": name, "persistent_offset": j.slot.offset,
                     "persistent_bytes": j.needs.persistent_bytes,
                     "temporary_bytes": j.needs.temporary_bytes, "resident": j.resident,
                     "holding": self._holder == name, "waiting": name in self._queue}
                    for name, j in self._jobs.items()]

    def read_arena(self, offset: int, nbytes: int) -> bytes:
        """Raw arena bytes (for tests and integrity checks inside the broker process)."""
        with self._cond:
            return self._arena.read(offset, nbytes)

    def _log(self, event: str, **fields) -> None:
        self._events.append({"event": event, "time": time.time(), **fields})

    # ---------------------------------------------------------------- connections
    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                sock, _ = self._server.accept()
            except OSError:  # shut down by stop()
                return
            threading.Thread(target=self._handshake, args=(sock,), name="cupool-broker-client",
                             daemon=True).start()

    def _handshake(self, sock) -> None:
        """Authenticate a new connection (HMAC challenge both ways, as
        ``multiprocessing.connection.Listener`` does) in its own thread, so a client that
        stalls cannot hold up others; it has ``HANDSHAKE_TIMEOUT_S`` to complete."""
        conn = Connection(sock.detach())
        timer = threading.Timer(HANDSHAKE_TIMEOUT_S, _shutdown, (conn,))
        timer.start()
        try:
            deliver_challenge(conn, self._authkey)
            answer_challenge(conn, self._authkey)
        except Exception:  # wrong key, garbage, timeout: drop it, keep serving
            conn.close()
            return
        finally:
            timer.cancel()
        with self._cond:
            if self._stopped.is_set():
                conn.close()
                return
            self._conns.append(conn)
        self._serve(conn)

    def _serve(self, conn) -> None:
        send_lock = threading.Lock()
        job = None
        try:
            while True:
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    return
                except Exception:  # unpicklable garbage: drop the client
                    return
                seq = message.get("seq") if isinstance(message, dict) else None
                try:
                    protocol.check_request(message)
                    job, answer = self._dispatch(conn, send_lock, job, message)
                except SharingError as error:
                    answer = protocol.error_reply(seq, error)
                if answer is not None and not _send(conn, send_lock, answer):
                    return
                if isinstance(message, dict) and message.get("op") == "shutdown":
                    threading.Thread(target=self.stop, daemon=True).start()
        finally:
            if job is not None:
                with self._cond:
                    if not self._stopped.is_set():  # else the arena is going away anyway
                        self._drop(job, "disconnected")
            with self._cond:
                if conn in self._conns:
                    self._conns.remove(conn)
            conn.close()

    def _dispatch(self, conn, send_lock, job, message):
        """Handle one request; returns ``(job, reply or None)`` (``None``: replied later)."""
        op, seq = message["op"], message["seq"]
        if self._stopped.is_set():
            raise ProtocolError(f"{op} refused: the broker is stopping")
        if op == "shutdown":
            return job, protocol.reply(seq)
        if op == "stats":
            return job, protocol.reply(seq, stats=self.stats(), events=self.events(),
                                       jobs=self.jobs())
        if op == "hello":
            if job is not None:
                raise ProtocolError(f"hello on a connection already registered as job {job!r}")
            return self._hello(conn, send_lock, message)
        if job is None:
            raise ProtocolError(f"{op} before hello")
        with self._cond:
            record = self._jobs.get(job)
            if record is None or self._stopped.is_set():
                raise ProtocolError(f"job {job!r} is not connected (reclaimed or stopping)")
            if message.get("epoch") != self.epoch:
                raise StaleGrantError(job, message.get("epoch"), message.get("grant", 0),
                                      self.epoch, record.grant)
            if op in ("iteration_done", "release") and (
                    message.get("grant") != record.grant or record.grant == 0):
                raise StaleGrantError(job, message.get("epoch"), message.get("grant"),
                                      self.epoch, record.grant)
            if op == "acquire":
                if record.acquire_seq is not None or self._holder == job:
                    raise ProtocolError(f"job {job!r} already holds or waits for the slice")
                record.acquire_seq = seq
                self._queue.append(job)
                self._schedule()
                return job, None
            if op == "iteration_done":
                record.iterations_left -= 1
                over = record.iterations_left <= 0
                if over:
                    self._end_slice(record, "slice over")
                    self._schedule()
                return job, protocol.reply(seq, slice_over=over)
            if op == "release":
                self._end_slice(record, "released")
                self._schedule()
                return job, protocol.reply(seq)
            if op == "cancel":
                cancelled = job in self._queue
                if cancelled:
                    self._queue.remove(job)
                    record.acquire_seq = None
                elif self._holder == job:  # the grant crossed the cancel: take it back
                    self._end_slice(record, "cancelled")
                    self._schedule()
                return job, protocol.reply(seq, cancelled=cancelled)
            # bye
            self._drop(job, "left")
            return None, protocol.reply(seq)

    def _hello(self, conn, send_lock, message):
        seq = message["seq"]
        with self._cond:
            if self._stopped.is_set():
                raise ProtocolError("hello refused: the broker is stopping")
            try:
                needs = JobNeeds(message.get("job"), message.get("persistent_bytes"),
                                 message.get("temporary_bytes"))
                if needs.job in self._jobs:
                    raise SharingArgumentError("hello", "job", needs.job,
                                               "must differ from every connected job's name")
                slot = place_slot(self.geometry, needs, [j.slot for j in self._jobs.values()],
                                  self.config.policy)
            except AdmissionError as error:
                self._stats["jobs.refused"] += 1
                self._log("refuse", job=error.job, reason=str(error))
                raise
            record = _Job(needs, slot, conn, send_lock)
            a = self.geometry.alignment
            exclusive = not any(slots_overlap(slot, j.slot, a) for j in self._jobs.values())
            if not any(j.resident and slots_overlap(slot, j.slot, a) for j in self._jobs.values()):
                self._arena.zero(slot.offset, slot.size)
                record.resident = True
            self._jobs[needs.job] = record
            self._stats["jobs.admitted"] += 1
            self._log("admit", job=needs.job, persistent_offset=slot.offset,
                      persistent_bytes=slot.size, temporary_bytes=needs.temporary_bytes,
                      exclusive=exclusive, resident=record.resident)
            return needs.job, protocol.reply(
                seq, epoch=self.epoch, arena=self._arena.handle(), policy=self.config.policy,
                slice_iterations=self.config.slice_iterations, exclusive=exclusive,
                persistent={"offset": slot.offset, "size": slot.size},
                temporary={"offset": self.geometry.temporary_offset,
                           "size": needs.temporary_bytes})

    # ---------------------------------------------------------------- scheduling
    def _schedule(self) -> None:
        """Grant the slice to the next queued job while it is free. Holds ``_cond``."""
        while self._holder is None and self._queue:
            name = self._queue.popleft()
            record = self._jobs[name]
            started = time.perf_counter()
            moved = self._make_resident(record)
            self._grant_counter += 1
            record.grant = self._grant_counter
            record.iterations_left = self.config.slice_iterations
            self._holder = name
            seconds = time.perf_counter() - started
            if self._last_holder is not None and self._last_holder != name:
                end_seconds, end_bytes = self._handoff or (0.0, 0)
                total = seconds + end_seconds
                self._stats["switches"] += 1
                self._stats["switch_seconds.total"] += total
                self._stats["switch_seconds.max"] = max(self._stats["switch_seconds.max"], total)
                self._log("switch", previous=self._last_holder, job=name, seconds=total,
                          persistent_bytes_moved=moved["persistent"],
                          temporary_bytes_moved=moved["temporary"],
                          temporary_bytes_zeroed=end_bytes)
            self._stats["slices.granted"] += 1
            seq, record.acquire_seq = record.acquire_seq, None
            answer = protocol.reply(seq, grant=record.grant, epoch=self.epoch,
                                    iterations=record.iterations_left)
            if not _send(record.conn, record.send_lock, answer):
                self._drop(name, "disconnected")

    def _make_resident(self, record: _Job) -> dict:
        """Evict the resident slots overlapping ``record``'s, restore it; under ``naive``
        also swap the temporary region. Returns the bytes copied by kind."""
        moved = {"persistent": 0, "temporary": 0}
        a = self.geometry.alignment
        if not record.resident:
            for other in self._jobs.values():
                if other is not record and other.resident and slots_overlap(
                        other.slot, record.slot, a):
                    other.host_image = self._arena.save(other.slot.offset, other.slot.size)
                    other.resident = False
                    moved["persistent"] += other.slot.size
                    self._stats["evictions"] += 1
                    self._stats["bytes.persistent_out"] += other.slot.size
                    self._log("evict", job=other.needs.job, bytes=other.slot.size,
                              reason=f"slot overlaps {record.needs.job!r}'s")
            if record.host_image is None:
                self._arena.zero(record.slot.offset, record.slot.size)
            else:
                self._arena.load(record.slot.offset, record.host_image)
                moved["persistent"] += record.slot.size
                self._stats["bytes.persistent_in"] += record.slot.size
            record.host_image = None
            record.resident = True
            self._stats["restores"] += 1
            self._log("restore", job=record.needs.job, bytes=record.slot.size)
        if self.config.policy == NAIVE and self._temp_owner != record.needs.job:
            offset = self.geometry.temporary_offset
            owner = self._jobs.get(self._temp_owner)
            if owner is not None:
                owner.temp_image = self._arena.save(offset, owner.needs.temporary_bytes)
                moved["temporary"] += owner.needs.temporary_bytes
                self._stats["bytes.temporary_out"] += owner.needs.temporary_bytes
            if record.temp_image is None:
                self._arena.zero(offset, record.needs.temporary_bytes)
            else:
                self._arena.load(offset, record.temp_image)
                moved["temporary"] += record.needs.temporary_bytes
                self._stats["bytes.temporary_in"] += record.needs.temporary_bytes
                record.temp_image = None
            self._temp_owner = record.needs.job
        return moved

    def _end_slice(self, record: _Job, reason: str) -> None:
        """The holder's slice ends: zero its temporary bytes (``resident`` policy)."""
        started = time.perf_counter()
        zeroed = 0
        if self.config.policy == RESIDENT:
            zeroed = record.needs.temporary_bytes
            self._arena.zero(self.geometry.temporary_offset, zeroed)
            self._stats["bytes.temporary_zeroed"] += zeroed
        else:
            self._temp_owner = record.needs.job
        record.grant = 0
        record.iterations_left = 0
        self._holder = None
        self._last_holder = record.needs.job
        self._handoff = (time.perf_counter() - started, zeroed)
        self._log("slice_end", job=record.needs.job, reason=reason, temporary_bytes_zeroed=zeroed)

    def _drop(self, name: str, reason: str) -> None:
        """Job ``name`` leaves (or died): revoke its slice, zero and free what it could
        touch. Idempotent. Holds ``_cond``."""
        record = self._jobs.get(name)
        if record is None:
            return
        if self._holder == name:
            self._end_slice(record, "revoked: " + reason)
            self._stats["slices.revoked"] += 1
            self._log("revoke", job=name, reason=reason)
        if self._temp_owner == name:
            self._arena.zero(self.geometry.temporary_offset, record.needs.temporary_bytes)
            self._temp_owner = None
        if name in self._queue:
            self._queue.remove(name)
        if record.resident:
            self._arena.zero(record.slot.offset, record.slot.size)
        del self._jobs[name]
        if self._last_holder == name:
            self._last_holder = None
        if reason == "disconnected":
            self._stats["jobs.reclaimed"] += 1
        self._log("reclaim" if reason == "disconnected" else "leave", job=name,
                  persistent_bytes=record.slot.size)
        self._schedule()


def _send(conn, send_lock, message) -> bool:
    with send_lock:
        try:
            conn.send(message)
        except (OSError, EOFError, ValueError):
            return False
    return True


def _shutdown(conn) -> None:
    """Wake a thread blocked in ``conn.recv()`` (closing the fd alone does not)."""
    with contextlib.suppress(OSError, ValueError):
        sock = socket.socket(fileno=os.dup(conn.fileno()))
        sock.shutdown(socket.SHUT_RDWR)
        sock.close()
