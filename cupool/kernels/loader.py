"""Compile the ``.cu`` sources with NVRTC through CuPy, once per GPU, and hand out kernels.

:data:`SOURCES` maps each source file to the ``extern "C" __global__`` functions it
defines (the tests check the list against the files, so a renamed kernel cannot go
unnoticed). Functions are ``extern "C"``, so their names are not mangled and no
``name_expressions`` are needed.

A module is compiled the first time one of its kernels is asked for on a GPU
(``cupy.RawModule(code=...)``, NVRTC, for that GPU's architecture) and kept in a cache
keyed by ``(device_id, file)``; CuPy also keeps compiled binaries in its on-disk cache
(``~/.cupy/kernel_cache``), so later processes skip NVRTC. The cache is guarded by one
lock; compiling twice in a race is prevented, not merely harmless.

Failures are typed: no NVRTC → :class:`KernelToolchainError` saying what to install;
a GPU older than :data:`MIN_COMPUTE_CAPABILITY`, or one NVRTC cannot target →
:class:`KernelArchitectureError`; anything else NVRTC rejects → :class:`KernelError`.
CuPy is imported lazily, through the device (``device.cupy``).
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

from cupool.kernels.errors import KernelArchitectureError, KernelError, KernelToolchainError

__all__ = ["CUPY_NAMES", "KERNEL_DIR", "MIN_COMPUTE_CAPABILITY", "NVRTC_INSTALL",
           "NVRTC_OPTIONS", "SOURCES", "clear_cache", "function_source", "get_function",
           "read_source", "source_function_names"]

KERNEL_DIR = Path(__file__).resolve().parent
"""Where the ``.cu`` files live (shipped as package data)."""

SOURCES: dict[str, tuple[str, ...]] = {
    "pattern.cu": ("cupool_pattern_fill", "cupool_pattern_verify"),
    "spin.cu": ("cupool_spin_ns", "cupool_spin_cycles"),
    "gather.cu": ("cupool_gather",),
}

MIN_COMPUTE_CAPABILITY = 70
"""Oldest architecture served, as ``10 * major + minor`` (Volta, 7.0). The kernels use
only ``__shfl_down_sync``, 64-bit ``atomicAdd``/``atomicMin``, ``clock64`` and
``%globaltimer``; CI compiles them for sm_80 and sm_90, and CUDA 13's NVRTC no longer
targets anything older than 7.5, which NVRTC then reports."""

NVRTC_OPTIONS = ("--std=c++14",)

NVRTC_INSTALL = ("NVRTC, the CUDA runtime compiler: `pip install \"cupy-cuda13x[ctk]\"` "
                 "(`cupy-cuda12x[ctk]` for CUDA 12), or a CUDA Toolkit whose libnvrtc is on "
                 "the library path (LD_LIBRARY_PATH / CUDA_PATH)")

CUPY_NAMES = (
    "cupy.RawModule", "cupy.RawModule.get_function", "cupy.cuda.Device",
    "cupy.cuda.Device.compute_capability", "cupy.cuda.compiler.CompileException",
    "cupy.cuda.using_allocator", "cupy.get_default_memory_pool", "cupy.cuda.Stream",
    "cupy.cuda.driver.CUDADriverError", "cupy.cuda.runtime.CUDARuntimeError",
    "cupy.cuda.runtime.deviceGetAttribute", "cupy.cuda.runtime.cudaDevAttrClockRate",
    "cupy.array", "cupy.asarray", "cupy.uint64", "cupy.ndarray.get", "cupy.ndarray.data",
)
"""Every CuPy name the kernels package uses; an unmarked test checks each exists in the
installed CuPy, since the GPU path cannot run in CI."""

_EXTERN_C = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(')

_lock = threading.Lock()  # guards _modules and _functions
_modules: dict[tuple[int, str], object] = {}
_functions: dict[tuple[int, str], object] = {}


def read_source(file: str) -> str:
    """The text of kernel source ``file`` (a key of :data:`SOURCES`)."""
    return (KERNEL_DIR / file).read_text(encoding="utf-8")


def source_function_names(text: str) -> tuple[str, ...]:
    """The ``extern "C" __global__ void`` function names in CUDA source ``text``, in order."""
    return tuple(_EXTERN_C.findall(text))


def function_source(function: str) -> str:
    """The source file defining kernel ``function``; :class:`KernelError` if none does."""
    for file, names in SOURCES.items():
        if function in names:
            return file
    raise KernelError(f"unknown kernel {function!r}; known kernels: "
                      f"{', '.join(n for names in SOURCES.values() for n in names)}")


def _is_missing_nvrtc(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}".lower()
    return "nvrtc" in text and any(word in text for word in (
        "load", "not found", "cannot open", "no such file", "undefined symbol", "failed"))


def _compile(device, file: str):
    """Compile ``file`` for ``device`` (with that GPU current) and load it."""
    cupy = device.cupy
    gpu = cupy.cuda.Device(device.device_id)
    with gpu:
        capability = str(gpu.compute_capability)
        if int(capability) < MIN_COMPUTE_CAPABILITY:
            raise KernelArchitectureError(
                device.name, capability,
                f"needs compute capability >= {MIN_COMPUTE_CAPABILITY // 10}."
                f"{MIN_COMPUTE_CAPABILITY % 10}")
        try:
            module = cupy.RawModule(code=read_source(file), options=NVRTC_OPTIONS)
            functions = {name: module.get_function(name) for name in SOURCES[file]}
        except cupy.cuda.compiler.CompileException as exc:
            text = str(exc)
            if "arch" in text.lower():
                raise KernelArchitectureError(device.name, capability,
                                              f"NVRTC cannot target it: {text}") from exc
            raise KernelError(f"NVRTC rejected {file} for device {device.name!r} "
                              f"(compute capability {capability}): {text}") from exc
        except (ImportError, OSError, RuntimeError) as exc:
            if _is_missing_nvrtc(exc):
                raise KernelToolchainError("NVRTC", NVRTC_INSTALL,
                                           f"{type(exc).__name__}: {exc}") from exc
            raise KernelError(f"loading {file} on device {device.name!r} (compute capability "
                              f"{capability}) failed: {type(exc).__name__}: {exc}") from exc
    return module, functions


def get_function(device, function: str):
    """The ``cupy.RawKernel`` for kernel ``function`` on CUDA device ``device`` (a
    :class:`~cupool.devices.cuda.CudaDevice`), compiling its source on first use."""
    file = function_source(function)
    cache_key = (device.device_id, function)
    with _lock:
        kernel = _functions.get(cache_key)
        if kernel is None:
            module, functions = _compile(device, file)
            _modules[(device.device_id, file)] = module
            for name, compiled in functions.items():
                _functions[(device.device_id, name)] = compiled
            kernel = functions[function]
    return kernel


def clear_cache() -> None:
    """Forget compiled modules (CuPy's on-disk cache is untouched); for tests."""
    with _lock:
        _modules.clear()
        _functions.clear()
