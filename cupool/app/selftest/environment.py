"""What the self-test ran on: the machine, the GPU, its driver and the libraries."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path


def _version(module_name: str) -> str | None:
    try:
        module = __import__(module_name)
    except Exception:  # absent, or broken: reported as absent
        return None
    return str(getattr(module, "__version__", "unknown"))


def _cuda_version(number: int) -> str:
    """CUDA's integer version (``13000``) as text (``"13.0"``)."""
    return f"{number // 1000}.{number % 1000 // 10}"


def _git_commit() -> str | None:
    root = Path(__file__).resolve().parents[3]
    if not (root / ".git").exists():
        return None
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def describe_environment(device) -> dict:
    """Versions and device facts; on ``cuda`` the GPU's name, compute capability and
    memory, and the driver's and the runtime's CUDA versions as CuPy reports them."""
    from cupool.core.version import __version__

    facts = {
        "python": platform.python_version(), "platform": platform.platform(),
        "cupool": __version__, "git_commit": _git_commit(),
        "numpy": _version("numpy"), "cupy": _version("cupy"), "torch": _version("torch"),
        "device_kind": device.kind, "device": device.describe(),
    }
    if device.kind == "cuda":
        import cupy

        runtime = cupy.cuda.runtime
        properties = runtime.getDeviceProperties(int(getattr(device, "device_id", 0)))
        name = properties["name"]
        facts |= {
            "gpu_name": name.decode() if isinstance(name, bytes) else str(name),
            "compute_capability": f"{properties['major']}.{properties['minor']}",
            "gpu_total_bytes": int(properties["totalGlobalMem"]),
            "driver_cuda_version": _cuda_version(runtime.driverGetVersion()),
            "runtime_cuda_version": _cuda_version(runtime.runtimeGetVersion()),
        }
    return facts
