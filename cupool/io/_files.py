"""Reading bytes (gzip detected by content) and writing files: atomically where the path is
a regular file, through symbolic links, directly to devices, FIFOs and descriptors."""

from __future__ import annotations

import contextlib
import errno
import gzip
import os
import re
import stat
import tempfile
import zlib
from pathlib import Path

from cupool.errors import InputError, OutputError

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


def write_atomic(path: str | os.PathLike, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path``; every plan, trace, result and picture cupool writes goes
    through here. Paths ending in ``.gz`` are gzip-compressed.

    What ``path`` is decides how:

    - a regular file, or nothing yet: a temporary file in the same directory, flushed to
      disk and renamed over it, so a reader never sees half a file and an existing file is
      replaced only by a complete one. The file gets ``mode`` when given (a key file: 0600),
      else an existing file keeps its mode and a new one gets 0644.
    - a symbolic link: written through to its target, the same way (the temporary file in
      the target's directory); the link stays.
    - a character or block device, a FIFO, or a descriptor link (``/dev/stdout``,
      ``/proc/self/fd/N``): opened and written directly, never replaced (one of this
      process's descriptors is written where its next write would go).

    Anything that fails (a missing or read-only directory, a full disk, a short write, a
    directory in the way) is an :class:`OutputError` naming ``path`` and the errno, and
    leaves no temporary file behind."""
    shown = str(path)
    if Path(path).suffix == ".gz":
        data = gzip.compress(data, mtime=0)
    try:
        target, descriptor = _follow_links(Path(path))
        status = None if descriptor else _stat_or_none(target)
    except OSError as exc:
        raise OutputError(shown, exc.errno, exc.strerror or str(exc)) from None
    if descriptor or (status is not None and _is_special(status.st_mode)):
        _write_directly(shown, target, data, descriptor)
    elif status is not None and stat.S_ISDIR(status.st_mode):
        raise OutputError(shown, errno.EISDIR, os.strerror(errno.EISDIR))
    else:
        if mode is None:
            mode = 0o644 if status is None else stat.S_IMODE(status.st_mode)
        _replace(shown, target, data, mode)


def is_regular_output(path: str | os.PathLike) -> bool:
    """Whether :func:`write_atomic` writes ``path`` as a regular file (so that what was
    written can be read back from it), not as a device, FIFO or descriptor."""
    try:
        target, descriptor = _follow_links(Path(path))
        return not descriptor and stat.S_ISREG(os.stat(target).st_mode)
    except OSError:
        return False


def _follow_links(path: Path) -> tuple[Path, bool]:
    """The path the bytes go to once every symbolic link is followed (its directory with
    every link resolved too), and whether the chain ended at a descriptor link: a link in a
    process's ``fd`` directory names an open file, not a path, and is written through as
    it is."""
    current = Path(os.path.realpath(path.parent)) / path.name
    for _ in range(_MAX_LINKS):
        if _DESCRIPTOR_DIR.fullmatch(str(current.parent)):
            return current, True
        if not current.is_symlink():
            return current, False
        joined = current.parent / os.readlink(current)  # an absolute link replaces the parent
        current = Path(os.path.realpath(joined.parent)) / joined.name
    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))


_MAX_LINKS = 40  # Linux's own limit on links followed in one path
_DESCRIPTOR_DIR = re.compile(r"/proc/[^/]+(/task/[^/]+)?/fd|/dev/fd")


def _stat_or_none(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def _is_special(st_mode: int) -> bool:
    return (stat.S_ISCHR(st_mode) or stat.S_ISBLK(st_mode) or stat.S_ISFIFO(st_mode)
            or stat.S_ISSOCK(st_mode))


def _write_directly(shown: str, target: Path, data: bytes, descriptor: bool) -> None:
    try:
        fd = _open_directly(target, descriptor)
    except OSError as exc:
        raise OutputError(shown, exc.errno, exc.strerror or str(exc)) from None
    try:
        _write_all(shown, fd, data)
    finally:
        os.close(fd)


def _open_directly(target: Path, descriptor: bool) -> int:
    """A descriptor for writing ``target`` in place. One of this process's own descriptors
    (``/dev/stdout``) is duplicated, so the bytes land where its next write would, as a
    shell's ``>`` and ``>>`` both expect; another process's is opened for appending."""
    own = {"self", "thread-self", str(os.getpid())}
    if descriptor and target.name.isdigit() and target.parts[2] in own:
        return os.dup(int(target.name))
    flags = os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC | (os.O_APPEND if descriptor else 0)
    return os.open(target, flags)


def _replace(shown: str, target: Path, data: bytes, mode: int) -> None:
    directory = target.parent
    try:
        # mkstemp creates 0600, so a key file is never readable by others, even briefly
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno == errno.ENOENT and not directory.is_dir():
            reason = "the directory to write into does not exist"
        raise OutputError(shown, exc.errno, reason) from None
    try:
        try:
            _write_all(shown, fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        _remove_quietly(tmp)
        raise OutputError(shown, exc.errno, exc.strerror or str(exc)) from None
    except BaseException:  # an OutputError from a write, a KeyboardInterrupt
        _remove_quietly(tmp)
        raise


def _write_all(shown: str, fd: int, data: bytes) -> None:
    """All of ``data`` to ``fd``; a write that takes nothing is a short write."""
    view = memoryview(data)
    written = 0
    while written < len(data):
        try:
            count = os.write(fd, view[written:])
        except OSError as exc:
            raise OutputError(shown, exc.errno, exc.strerror or str(exc)) from None
        if count <= 0:
            raise OutputError(shown, None, f"wrote {written} of {len(data)} bytes")
        written += count


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
