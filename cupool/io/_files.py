"""Reading bytes (gzip detected by content) and writing files atomically."""

from __future__ import annotations

import contextlib
import gzip
import os
import tempfile
import zlib
from pathlib import Path

from cupool.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"


def read_bytes(path: str | os.PathLike) -> bytes:
    """The file's bytes, gunzipped when they start with the gzip magic (whatever the name)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError("no such file", path=str(path)) from None
    except IsADirectoryError:
        raise InputError("is a directory, expected a file", path=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", path=str(path)) from None
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(f"corrupt gzip data ({exc})", path=str(path)) from None
    return data


def choose_device(weights: dict[int, int], device: int | None, fail, missing: str,
                  present: str) -> int:
    """The device an importer reads: ``device`` if given, else the one with the largest
    weight (events, blocks), the lowest index on a tie. When the given one has none,
    ``fail`` gets "device (=3) has no <missing>; devices with <present>: 0, 1"."""
    if device is None:
        return max(sorted(weights), key=lambda d: weights[d])
    if device not in weights:
        fail(f"device (={device!r}) has no {missing}; devices with {present}: "
             f"{', '.join(map(str, sorted(weights)))}")
    return device


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename, so a reader never
    sees half a file and an existing file is replaced only by a complete one. Paths ending
    in ``.gz`` are gzip-compressed."""
    path = Path(path)
    if path.suffix == ".gz":
        data = gzip.compress(data, mtime=0)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise InputError("the directory to write into does not exist", path=str(path))
    # mkstemp creates 0600; a written trace or plan should be readable like any other file
    # (an existing file keeps its mode). A place that cannot be written (no permission, a
    # full disk, a path under /proc) is an InputError naming the path, never a traceback.
    try:
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise InputError(f"cannot write here ({exc.strerror})", path=str(path)) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        _remove_quietly(tmp)
        raise InputError(f"cannot write here ({exc.strerror})", path=str(path)) from None
    except BaseException:
        _remove_quietly(tmp)
        raise


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
