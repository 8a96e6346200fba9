"""How a device's broker runs and where it lives: :class:`BrokerConfig`, the socket, lock
and key files of a device (:func:`broker_paths`), and the shared key in its file.

Both sides read this module: the broker (:mod:`cupool.sharing.broker`) to bind, lock and
write the key; a client (:mod:`cupool.sharing.client`) to find the socket and read the key.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field

from cupool.sharing.errors import BrokerUnreachableError, SharingArgumentError
from cupool.sharing.layout import POLICIES, RESIDENT, Geometry
from cupool.sharing.memory import BACKENDS


def default_runtime_dir() -> str:
    """``$CUPOOL_RUNTIME_DIR``, else the system temporary directory."""
    return os.environ.get("CUPOOL_RUNTIME_DIR") or tempfile.gettempdir()


def parse_device(device: str) -> tuple[str, int]:
    """``"emulated:0"`` → ``("emulated", 0)``; :class:`SharingArgumentError` otherwise."""
    backend, _, index = str(device).partition(":")
    if backend not in BACKENDS or not index.isdigit():
        raise SharingArgumentError("parse_device", "device", device,
                                   f"must be '<backend>:<index>' with backend in {BACKENDS}")
    return backend, int(index)


def broker_paths(device: str, runtime_dir: str | None = None) -> dict:
    """The socket ``address``, ``lock`` file and ``key`` file of ``device``'s broker."""
    backend, index = parse_device(device)
    name = f"cupool-{os.getuid()}-{backend}{index}"
    base = os.path.join(runtime_dir or default_runtime_dir(), name)
    return {"address": base + ".sock", "lock": base + ".lock", "key": base + ".key"}


@dataclass(frozen=True)
class BrokerConfig:
    """How a broker runs.

    capacity_bytes: size of the device arena the broker reserves.
    temporary_bytes: size of the shared temporary region (the largest temporary need it
      admits); :meth:`Geometry.for_jobs` derives both from a set of jobs.
    device: ``"emulated:<i>"`` (shared memory) or ``"cuda:<i>"`` (CUDA IPC).
    gap_bytes, alignment: between and of persistent slots (alignment a power of two).
    slice_iterations: iterations per time slice (>= 1).
    policy: ``"resident"`` (slots stay on the device) or ``"naive"`` (the baseline: every
      switch swaps the whole footprint of both jobs).
    runtime_dir: where the socket, lock and key files live (default
      :func:`default_runtime_dir`).
    authkey: shared secret of the socket; ``None``: a random key written to the key file
      (mode 0600), which clients of the same user read.
    """

    capacity_bytes: int
    temporary_bytes: int
    device: str = "emulated:0"
    gap_bytes: int = 0
    alignment: int = 512
    slice_iterations: int = 1
    policy: str = RESIDENT
    runtime_dir: str | None = None
    authkey: bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        parse_device(self.device)
        self.geometry  # noqa: B018 (validates the sizes)
        if not isinstance(self.slice_iterations, int) or self.slice_iterations < 1:
            raise SharingArgumentError("BrokerConfig", "slice_iterations", self.slice_iterations,
                                       "must be an int >= 1")
        if self.policy not in POLICIES:
            raise SharingArgumentError("BrokerConfig", "policy", self.policy,
                                       f"must be one of {POLICIES}")

    @property
    def geometry(self) -> Geometry:
        return Geometry(self.capacity_bytes, self.temporary_bytes, self.gap_bytes, self.alignment)

    @property
    def paths(self) -> dict:
        return broker_paths(self.device, self.runtime_dir)


def write_key(path: str) -> bytes:
    """A new random key, written to ``path`` (mode 0600, from the start) by an atomic rename."""
    from cupool.io import write_atomic

    key = os.urandom(32)
    write_atomic(path, key, mode=0o600)
    return key


def read_key(path: str, address: str) -> bytes:
    """The key in ``path``; :class:`BrokerUnreachableError` (naming ``address``) when it
    cannot be read."""
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as error:
        raise BrokerUnreachableError(address, f"cannot read key file {path!r}: "
                                     f"{error.strerror}") from None
