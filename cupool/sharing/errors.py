"""Typed, picklable errors of the sharing layer, each quoting the numbers.

    CupoolError
      SharingError                 anything the broker or a client refuses or fails to do
        SharingArgumentError       a bad argument (also an ``ArgumentError``)
        AdmissionError             a job that cannot fit on the device even alone
        BrokerUnreachableError     no broker answers at the address
        BrokerRunningError         a second broker for a device that already has one
        BrokerGoneError            the broker went away (died or restarted) under a client
        StaleGrantError            a request carries another broker's epoch or an old grant
        RegionAccessError          a region used outside its grant (no slice held, client closed)
        RegionBoundsError          an access outside the bytes a job declared
        SliceTimeoutError          no slice was granted within the caller's timeout
        ArenaError                 the device arena cannot be created or attached
        ProtocolError              a message of another protocol version or an unknown kind

Every class takes its fields as constructor arguments and pickles with them, and the
broker sends errors to clients as plain ``{"type": name, "args": [...]}`` that
:func:`error_from_wire` turns back into the same class.
"""

from __future__ import annotations

from cupool.errors import ArgumentError, CupoolError


class SharingError(CupoolError):
    """Base class of every error the sharing layer raises on purpose."""

    def __init__(self, *args) -> None:
        self._args = args
        super().__init__(self._text(*args))

    def _text(self, *args) -> str:
        return str(args[0]) if args else self.__class__.__name__

    def to_wire(self) -> dict:
        """The plain form the broker sends: ``{"type": class name, "args": [...]}``."""
        return {"type": self.__class__.__name__, "args": list(self._args)}


class SharingArgumentError(SharingError, ArgumentError):
    """A call got a bad argument: ``"BrokerConfig(slice_iterations=0): ... must be >= 1"``."""

    def __init__(self, operation: str, field: str, value: object, rule: str) -> None:
        ArgumentError.__init__(self, operation, field, value, rule)
        self._args = (operation, field, value, rule)


class AdmissionError(SharingError):
    """Job ``job`` cannot run on this device even alone: its persistent bytes must fit the
    persistent area and its temporary bytes the shared temporary region."""

    def __init__(self, job: str, persistent_bytes: int, temporary_bytes: int,
                 persistent_area_bytes: int, temporary_region_bytes: int) -> None:
        self.job = job
        self.persistent_bytes = persistent_bytes
        self.temporary_bytes = temporary_bytes
        self.persistent_area_bytes = persistent_area_bytes
        self.temporary_region_bytes = temporary_region_bytes
        super().__init__(job, persistent_bytes, temporary_bytes, persistent_area_bytes,
                         temporary_region_bytes)

    def _text(self, job, persistent, temporary, area, region) -> str:
        problems = []
        if persistent > area:
            problems.append(f"persistent_bytes (={persistent}) > persistent area ({area} B)")
        if temporary > region:
            problems.append(f"temporary_bytes (={temporary}) > temporary region ({region} B)")
        return f"job {job!r} refused: " + "; ".join(problems or ["does not fit"])


class BrokerUnreachableError(SharingError):
    """No broker answers at ``address`` (not started, stopped, wrong key): ``reason`` says why."""

    def __init__(self, address: str, reason: str) -> None:
        self.address = address
        self.reason = reason
        super().__init__(address, reason)

    def _text(self, address, reason) -> str:
        return f"no cupool broker reachable at {address!r}: {reason}"


class BrokerRunningError(SharingError):
    """A broker for ``device`` already holds ``lock_path`` (owner ``owner``)."""

    def __init__(self, device: str, lock_path: str, owner: str) -> None:
        self.device = device
        self.lock_path = lock_path
        self.owner = owner
        super().__init__(device, lock_path, owner)

    def _text(self, device, lock_path, owner) -> str:
        return (f"device {device!r} already has a broker ({owner}); lock {lock_path!r} is held; "
                "expected one broker per device")


class BrokerGoneError(SharingError):
    """The broker of epoch ``epoch`` at ``address`` went away while the client used it; the
    client's grants and region views are void (its last writes may be lost, nobody else's
    memory was touched)."""

    def __init__(self, address: str, epoch: int, reason: str) -> None:
        self.address = address
        self.epoch = epoch
        self.reason = reason
        super().__init__(address, epoch, reason)

    def _text(self, address, epoch, reason) -> str:
        return (f"broker at {address!r} (epoch {epoch}) went away: {reason}; "
                "grants and regions of this client are void, reconnect")


class StaleGrantError(SharingError):
    """A request named grant ``grant`` of epoch ``epoch``; the broker is at ``current_epoch``
    and holds ``current_grant`` for this job (``0``: none)."""

    def __init__(self, job: str, epoch: int, grant: int, current_epoch: int,
                 current_grant: int) -> None:
        self.job = job
        self.epoch = epoch
        self.grant = grant
        self.current_epoch = current_epoch
        self.current_grant = current_grant
        super().__init__(job, epoch, grant, current_epoch, current_grant)

    def _text(self, job, epoch, grant, current_epoch, current_grant) -> str:
        return (f"job {job!r}: grant {grant} of epoch {epoch} is stale; expected grant "
                f"{current_grant} of epoch {current_epoch}")


class RegionAccessError(SharingError):
    """Region ``region`` of job ``job`` used when it may not be: ``reason`` says why."""

    def __init__(self, job: str, region: str, reason: str) -> None:
        self.job = job
        self.region = region
        self.reason = reason
        super().__init__(job, region, reason)

    def _text(self, job, region, reason) -> str:
        return f"job {job!r}: {region} region refused: {reason}"


class RegionBoundsError(SharingError):
    """An access of ``nbytes`` at ``offset`` in a region of ``size`` bytes (outside it)."""

    def __init__(self, job: str, region: str, offset: int, nbytes: int, size: int) -> None:
        self.job = job
        self.region = region
        self.offset = offset
        self.nbytes = nbytes
        self.size = size
        super().__init__(job, region, offset, nbytes, size)

    def _text(self, job, region, offset, nbytes, size) -> str:
        return (f"job {job!r}: {region} access [offset={offset}, nbytes={nbytes}) is outside "
                f"the region; expected 0 <= offset and offset + nbytes <= {size}")


class SliceTimeoutError(SharingError):
    """Job ``job`` was not granted a slice within ``timeout_s`` seconds."""

    def __init__(self, job: str, timeout_s: float) -> None:
        self.job = job
        self.timeout_s = timeout_s
        super().__init__(job, timeout_s)

    def _text(self, job, timeout_s) -> str:
        return f"job {job!r}: no slice granted within timeout_s (={timeout_s}) seconds"


class ArenaError(SharingError):
    """The arena of ``device`` could not be created or attached (``operation``: "create a
    1024-byte", "attach segment 'x' of"); ``reason`` says why."""

    def __init__(self, device: str, operation: str, reason: str) -> None:
        self.device = device
        self.operation = operation
        self.reason = reason
        super().__init__(device, operation, reason)

    def _text(self, device, operation, reason) -> str:
        return f"cannot {operation} arena on {device!r}: {reason}"


class ProtocolError(SharingError):
    """A message broke the protocol (version, kind or field): ``detail`` says which."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(detail)

    def _text(self, detail) -> str:
        return f"sharing protocol: {detail}"


_WIRE_TYPES = {cls.__name__: cls for cls in (
    SharingArgumentError, AdmissionError, BrokerUnreachableError, BrokerRunningError,
    BrokerGoneError, StaleGrantError, RegionAccessError, RegionBoundsError,
    SliceTimeoutError, ArenaError, ProtocolError)}


def error_from_wire(wire: dict) -> SharingError:
    """The error a broker sent as :meth:`SharingError.to_wire`; unknown kinds become
    :class:`ProtocolError` rather than being trusted."""
    cls = _WIRE_TYPES.get(wire.get("type")) if isinstance(wire, dict) else None
    args = wire.get("args") if isinstance(wire, dict) else None
    if cls is None or not isinstance(args, list):
        return ProtocolError(f"unknown error from broker: {wire!r}")
    try:
        return cls(*args)
    except TypeError:
        return ProtocolError(f"malformed {cls.__name__} from broker: {args!r}")
