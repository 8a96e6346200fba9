"""The stress run's device: opened with every kernel compiled up front, and the leaks a
scenario leaves on it, measured."""

from __future__ import annotations

from cupool.app.stress.config import DEVICES, EMULATED_CAPACITY
from cupool.app.stress.errors import StressError

DRIVER_HINT = ("install an NVIDIA driver recent enough for the installed CuPy's CUDA "
               "version (check with `nvidia-smi`), or run with --device emulated")


def open_stress_device(kind: str):
    """Open the device for a stress run: ``"emulated"`` (:data:`EMULATED_CAPACITY`
    bytes, unpaced) or ``"cuda"`` (GPU 0, every kernel compiled up front). Raises
    :class:`StressError` with one line saying what is missing: no usable GPU (no driver,
    a driver too old, no device), no NVRTC (and what to install), or a GPU architecture
    the kernels do not support."""
    from cupool.devices import open_device, probe_cuda

    if kind not in DEVICES:
        raise StressError(f"device (={kind!r}) must be one of {', '.join(DEVICES)}")
    if kind == "emulated":
        return open_device("emulated", capacity=EMULATED_CAPACITY, name="stress")
    usable, why = probe_cuda()
    if not usable:
        raise StressError(f"--device cuda needs a usable GPU: {one_line(why)}; {DRIVER_HINT}")
    device = open_device("cuda")
    try:
        from cupool.kernels.errors import KernelError
        from cupool.kernels.loader import SOURCES, get_function

        for names in SOURCES.values():
            for name in names:
                get_function(device, name)
    except KernelError as exc:
        device.close()
        raise StressError(f"--device cuda: {one_line(str(exc))}") from exc
    return device


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) made one space."""
    return " ".join(str(text).split())


def baseline(device) -> dict:
    """What ``device`` holds before a scenario (its statistics), for :func:`measure_leaks`."""
    return device.stats()


def measure_leaks(device, pool, before: dict) -> int:
    """Leaked blocks after a scenario dropped everything: pool blocks still live, plus
    device reservations beyond ``before`` once the pool is closed, plus one if pinned
    bytes are left (the device counts pinned bytes, not blocks)."""
    leaked = 0
    if pool is not None:
        leaked = len(pool.live_blocks())
        if leaked == 0:
            pool.close()
    after = device.stats()
    if leaked == 0:
        leaked += max(0, after["reservations.current"] - before["reservations.current"])
    if after["pinned_bytes.current"] > before["pinned_bytes.current"]:
        leaked += 1
    return leaked
