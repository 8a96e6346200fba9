"""The shared device arena: created by the broker, attached by clients.

Two backends with one small surface:

- ``emulated``: a POSIX shared-memory segment (what ``multiprocessing.shared_memory``
  uses), opened directly so that no resource tracker unlinks it behind the broker's back
  when a client exits. Every process really maps the same bytes.
- ``cuda``: one ``cudaMalloc`` on the broker's device, exported with
  ``cudaIpcGetMemHandle``; clients map it with ``cudaIpcOpenMemHandle``. Evicted slots go
  to pinned host memory. (Thin on purpose; tested only on a GPU.)

Broker side (:func:`create_arena`): ``handle()`` (plain dict a client attaches with),
``save(offset, nbytes) -> host copy``, ``load(offset, host)``, ``zero(offset, nbytes)``,
``close()`` (frees / unlinks). Client side (:func:`attach_arena`): ``write(offset, data)``,
``fill(offset, nbytes, value)``, ``read(offset, nbytes)``, ``array(offset, nbytes, dtype)``,
``synchronize()``, ``close()``. Neither side checks bounds: the broker and
:class:`cupool.sharing.client.Region` do.

Visibility between processes. On a GPU a client's ``cudaMemcpy`` from pageable memory and
its ``cudaMemset`` return before the device has finished them, and work queued in one
process's context is not ordered with another's: a job that hands its slice back right
after a fill can have that fill land *after* the broker zeroed the region for the next
job. So a client calls ``synchronize()`` (``cudaDeviceSynchronize``) before it reports an
iteration done or releases its slice, and the broker synchronizes after every zeroing.
The emulated client behaves the same way on purpose: its writes and fills are queued and
reach the shared bytes only at its next ``synchronize()``, ``read`` or ``array`` (its own
later reads see them, as stream order on a GPU guarantees), so a missing
``synchronize()`` shows up as wrong bytes on the emulated device too.
"""

from __future__ import annotations

import contextlib
import mmap
import os

import numpy as np

from cupool.sharing.errors import ArenaError, SharingArgumentError

BACKENDS = ("emulated", "cuda")


def _shm():
    import _posixshmem  # CPython's POSIX shm_open/shm_unlink, as used by multiprocessing

    return _posixshmem


class SharedMemoryArena:
    """Broker-owned shared-memory segment ``name`` of ``nbytes`` bytes, zero-filled."""

    backend = "emulated"

    def __init__(self, name: str, nbytes: int) -> None:
        self.name = name
        self.nbytes = nbytes
        fd = _shm().shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, max(nbytes, 1))
            self._map = mmap.mmap(fd, max(nbytes, 1))
        finally:
            os.close(fd)
        self._bytes = np.frombuffer(self._map, dtype=np.uint8, count=nbytes)

    def handle(self) -> dict:
        return {"backend": self.backend, "name": self.name, "nbytes": self.nbytes}

    def save(self, offset: int, nbytes: int) -> np.ndarray:
        return self._bytes[offset:offset + nbytes].copy()

    def load(self, offset: int, host: np.ndarray) -> None:
        self._bytes[offset:offset + len(host)] = host

    def zero(self, offset: int, nbytes: int) -> None:
        self._bytes[offset:offset + nbytes] = 0

    def read(self, offset: int, nbytes: int) -> bytes:
        return self._bytes[offset:offset + nbytes].tobytes()

    def close(self) -> None:
        if self._map is None:
            return
        self._bytes = None
        self._map.close()
        self._map = None
        unlink_segment(self.name)


def unlink_segment(name: str) -> bool:
    """Remove shared-memory segment ``name`` (a stale one left by a killed broker);
    False when there was none."""
    try:
        _shm().shm_unlink("/" + name)
    except FileNotFoundError:
        return False
    return True


class AttachedSharedMemory:
    """A client's mapping of the broker's segment (see :class:`SharedMemoryArena`);
    writes and fills are queued until the next synchronization point (module docstring)."""

    def __init__(self, handle: dict) -> None:
        fd = _shm().shm_open("/" + handle["name"], os.O_RDWR, 0o600)
        try:
            self._map = mmap.mmap(fd, max(handle["nbytes"], 1))
        finally:
            os.close(fd)
        self._bytes = np.frombuffer(self._map, dtype=np.uint8, count=handle["nbytes"])
        self._queued: list[tuple[int, np.ndarray | int, int]] = []

    def write(self, offset: int, data) -> None:
        view = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
        self._queued.append((offset, view.copy(), view.size))

    def fill(self, offset: int, nbytes: int, value: int) -> None:
        self._queued.append((offset, value, nbytes))

    def synchronize(self) -> None:
        """Apply the queued writes and fills to the shared bytes, in order."""
        queued, self._queued = self._queued, []
        for offset, source, nbytes in queued:
            self._bytes[offset:offset + nbytes] = source

    def read(self, offset: int, nbytes: int) -> bytes:
        self.synchronize()
        return self._bytes[offset:offset + nbytes].tobytes()

    def array(self, offset: int, nbytes: int, dtype) -> np.ndarray:
        self.synchronize()
        dtype = np.dtype(dtype)
        return self._bytes[offset:offset + nbytes - nbytes % dtype.itemsize].view(dtype)

    def close(self) -> None:
        if self._map is None:
            return
        self._queued = []  # the client synchronized before it left; nothing is owed
        self._bytes = None
        with contextlib.suppress(BufferError):  # the caller still holds array views:
            self._map.close()  # the mapping goes with the last of them
        self._map = None


class CudaIpcArena:
    """Broker-owned device allocation exported by CUDA IPC (GPU only)."""

    backend = "cuda"

    def __init__(self, name: str, nbytes: int, device_index: int = 0) -> None:
        import cupy
        from cupy.cuda import runtime

        self.name = name
        self.nbytes = nbytes
        self.device_index = device_index
        self._cupy = cupy
        self._runtime = runtime
        with cupy.cuda.Device(device_index):
            self._ptr = runtime.malloc(max(nbytes, 1))
            runtime.memset(self._ptr, 0, nbytes)
            self._ipc = bytes(runtime.ipcGetMemHandle(self._ptr))

    def handle(self) -> dict:
        return {"backend": self.backend, "name": self.name, "nbytes": self.nbytes,
                "device_index": self.device_index, "ipc_handle": self._ipc}

    def save(self, offset: int, nbytes: int) -> np.ndarray:
        memory = self._cupy.cuda.alloc_pinned_memory(max(nbytes, 1))
        host = np.frombuffer(memory, dtype=np.uint8, count=nbytes)
        with self._cupy.cuda.Device(self.device_index):
            self._runtime.memcpy(host.ctypes.data, self._ptr + offset, nbytes,
                                 self._runtime.memcpyDeviceToHost)
        return host

    def load(self, offset: int, host: np.ndarray) -> None:
        with self._cupy.cuda.Device(self.device_index):
            self._runtime.memcpy(self._ptr + offset, host.ctypes.data, host.nbytes,
                                 self._runtime.memcpyHostToDevice)

    def zero(self, offset: int, nbytes: int) -> None:
        """Zero the bytes and wait until the device has (``cudaMemset`` returns before)."""
        with self._cupy.cuda.Device(self.device_index):
            self._runtime.memset(self._ptr + offset, 0, nbytes)
            self._runtime.deviceSynchronize()

    def read(self, offset: int, nbytes: int) -> bytes:
        return self.save(offset, nbytes).tobytes()

    def close(self) -> None:
        if self._ptr is not None:
            with self._cupy.cuda.Device(self.device_index):
                self._runtime.free(self._ptr)
            self._ptr = None


class AttachedCudaIpc:
    """A client's mapping of the broker's device allocation (GPU only)."""

    def __init__(self, handle: dict) -> None:
        import cupy
        from cupy.cuda import runtime

        self._cupy = cupy
        self._runtime = runtime
        self.device_index = handle["device_index"]
        with cupy.cuda.Device(self.device_index):
            self._ptr = runtime.ipcOpenMemHandle(handle["ipc_handle"])

    def write(self, offset: int, data) -> None:
        host = np.ascontiguousarray(np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8))
        with self._cupy.cuda.Device(self.device_index):
            self._runtime.memcpy(self._ptr + offset, host.ctypes.data, host.nbytes,
                                 self._runtime.memcpyHostToDevice)

    def read(self, offset: int, nbytes: int) -> bytes:
        host = np.empty(nbytes, dtype=np.uint8)
        with self._cupy.cuda.Device(self.device_index):
            self._runtime.memcpy(host.ctypes.data, self._ptr + offset, nbytes,
                                 self._runtime.memcpyDeviceToHost)
        return host.tobytes()

    def fill(self, offset: int, nbytes: int, value: int) -> None:
        with self._cupy.cuda.Device(self.device_index):
            self._runtime.memset(self._ptr + offset, value, nbytes)

    def synchronize(self) -> None:
        """Wait for every piece of work this process queued on the device."""
        with self._cupy.cuda.Device(self.device_index):
            self._runtime.deviceSynchronize()

    def array(self, offset: int, nbytes: int, dtype):
        cupy = self._cupy
        dtype = np.dtype(dtype)
        memory = cupy.cuda.UnownedMemory(self._ptr + offset, nbytes, self, self.device_index)
        return cupy.ndarray((nbytes // dtype.itemsize,), dtype,
                            cupy.cuda.MemoryPointer(memory, 0))

    def close(self) -> None:
        if self._ptr is not None:
            with self._cupy.cuda.Device(self.device_index):
                self._runtime.ipcCloseMemHandle(self._ptr)
            self._ptr = None


def create_arena(backend: str, name: str, nbytes: int, device_index: int = 0):
    """The broker's arena for ``backend`` (``emulated`` or ``cuda``); :class:`ArenaError`
    when the device refuses (no GPU, out of memory, no shared memory)."""
    if backend not in BACKENDS:
        raise SharingArgumentError("create_arena", "backend", backend,
                                   f"must be one of {BACKENDS}")
    try:
        if backend == "emulated":
            return SharedMemoryArena(name, nbytes)
        return CudaIpcArena(name, nbytes, device_index)
    except Exception as error:  # CUDARuntimeError, ImportError, OSError: one typed error
        raise ArenaError(f"{backend}:{device_index}", f"create a {nbytes}-byte",
                         f"{type(error).__name__}: {error}") from None


def attach_arena(handle: dict):
    """A client's view of the arena the broker described in ``handle``."""
    try:
        if handle.get("backend") == "cuda":
            return AttachedCudaIpc(handle)
        return AttachedSharedMemory(handle)
    except Exception as error:
        raise ArenaError(str(handle.get("backend")), f"attach segment {handle.get('name')!r} of",
                         f"{type(error).__name__}: {error}") from None
