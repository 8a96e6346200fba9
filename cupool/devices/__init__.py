"""Devices: where cupool's memory, streams and copies live.

``open_device(kind)`` returns a :class:`~cupool.devices.protocol.Device`:

- ``"emulated"``: host memory and worker threads (:mod:`cupool.devices.emulated`);
  runs everywhere, and is what every test and the runtime use without a GPU.
- ``"cuda"``: a GPU through CuPy (:mod:`cupool.devices.cuda`).
- ``"auto"``: ``cuda`` when a GPU is usable — CuPy imports and
  ``cupy.cuda.runtime.getDeviceCount()`` returns > 0 without raising — else
  ``emulated``. The device's ``reason`` attribute says which and why, and the choice
  is logged on the ``cupool.devices`` logger at INFO.

Options go to the backend's constructor (``capacity``, ``h2d_gbps``, ``d2h_gbps``,
``d2d_gbps``, ``latency_us``, ``close_timeout``, ``name`` for emulated; ``device_id``,
``blocking_sync``, ``name`` for cuda). With ``"auto"``, options that only the backend
not chosen accepts are ignored (and named in ``reason``), so
``open_device("auto", h2d_gbps=25)`` means "pace at 25 GB/s if emulated".
"""

from __future__ import annotations

import inspect
import logging

from cupool.devices.errors import DeviceOptionError, DeviceUnavailableError
from cupool.devices.memory import Memory
from cupool.devices.protocol import Device, Event, Stream

__all__ = ["KINDS", "Device", "Event", "Memory", "Stream", "describe", "open_device",
           "probe_cuda"]

KINDS = ("auto", "emulated", "cuda")

_log = logging.getLogger("cupool.devices")


def probe_cuda() -> tuple[bool, str]:
    """``(usable, reason)``: whether a GPU is usable through CuPy, and why (one line).

    Never raises: a missing or broken CuPy and a missing driver are reasons.
    """
    try:
        import cupy
    except Exception as exc:  # ImportError, or a CUDA library that fails to load
        return False, f"cupy is not importable ({type(exc).__name__}: {exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return False, f"cupy {cupy.__version__} finds no usable GPU ({exc})"
    if count <= 0:
        return False, f"cupy {cupy.__version__} reports {count} GPUs"
    return True, f"cupy {cupy.__version__} sees {count} GPU(s)"


def _backend(kind: str) -> type[Device]:
    if kind == "emulated":
        from cupool.devices.emulated import EmulatedDevice
        return EmulatedDevice
    from cupool.devices.cuda import CudaDevice
    return CudaDevice


def _accepted(kind: str) -> tuple[str, ...]:
    parameters = inspect.signature(_backend(kind).__init__).parameters
    return tuple(name for name in parameters if name != "self")


def open_device(kind: str = "auto", **options) -> Device:
    """Open a device of ``kind`` (``"auto"``, ``"emulated"`` or ``"cuda"``).

    Raises :class:`DeviceUnavailableError` for an unknown kind or when ``"cuda"`` is
    asked for and no GPU is usable, :class:`DeviceOptionError` for an option the
    backend does not take.
    """
    if kind not in KINDS:
        raise DeviceUnavailableError(str(kind), f"unknown device kind; expected one of "
                                                f"{', '.join(KINDS)}")
    if kind == "auto":
        usable, why = probe_cuda()
        chosen = "cuda" if usable else "emulated"
        other = "emulated" if usable else "cuda"
        mine, theirs = _accepted(chosen), _accepted(other)
        for option in options:
            if option not in mine and option not in theirs:
                raise DeviceOptionError("auto", option, tuple(sorted({*mine, *theirs})))
        ignored = sorted(option for option in options if option not in mine)
        options = {k: v for k, v in options.items() if k in mine}
        reason = f"auto chose {chosen}: {why}"
        if ignored:
            reason += f"; ignored {other}-only options {ignored}"
    else:
        chosen = kind
        mine = _accepted(chosen)
        for option in options:
            if option not in mine:
                raise DeviceOptionError(kind, option, mine)
        reason = f"{kind} was requested"
    device = _backend(chosen)(**options)
    device.reason = reason
    _log.info("opened %s device %r (%s)", chosen, device.name, reason)
    return device


def describe() -> dict:
    """What ``open_device("auto")`` would choose here, and why, without opening it:
    ``{"auto_kind", "reason", "cuda_usable", "kinds"}``."""
    usable, why = probe_cuda()
    return {"auto_kind": "cuda" if usable else "emulated", "reason": why,
            "cuda_usable": usable, "kinds": list(KINDS)}
