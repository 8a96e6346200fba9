"""Where an output path leads decides how it is written: regular files and missing paths are
replaced atomically, symbolic links are written through to their target, devices, FIFOs and
descriptors are written in place; every failure is one OutputError naming the path and the
errno, with nothing half-written and no temporary file left."""

from __future__ import annotations

import errno
import os
import pickle
import stat
import threading
from pathlib import Path

import pytest

import cupool.io._files as files
from cupool.errors import InputError, OutputError
from cupool.io import is_regular_output, write_atomic

DATA = b'{"plan": 1}\n' * 1000


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_a_regular_file_is_replaced_whole_and_keeps_its_mode(tmp_path):
    path = tmp_path / "plan.json"
    path.write_bytes(b"old")
    path.chmod(0o640)
    old_inode = path.stat().st_ino
    write_atomic(path, DATA)
    assert path.read_bytes() == DATA and stat.S_IMODE(path.stat().st_mode) == 0o640
    assert path.stat().st_ino != old_inode  # renamed over, not rewritten in place
    assert listing(tmp_path) == ["plan.json"] and is_regular_output(path)


def test_a_missing_path_is_created_with_mode_0644_or_the_mode_asked(tmp_path):
    write_atomic(tmp_path / "new.json", DATA)
    write_atomic(tmp_path / "key", b"secret", mode=0o600)
    assert (tmp_path / "new.json").read_bytes() == DATA
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "key").stat().st_mode) == 0o600
    assert listing(tmp_path) == ["key", "new.json"]


def test_a_symlink_is_written_through_to_its_target_in_another_directory(tmp_path):
    (tmp_path / "links").mkdir()
    (tmp_path / "store").mkdir()
    target = tmp_path / "store" / "plan.json"
    target.write_bytes(b"old")
    link = tmp_path / "links" / "plan.json"
    link.symlink_to("../store/plan.json")
    chain = tmp_path / "links" / "again.json"
    chain.symlink_to("plan.json")
    write_atomic(chain, DATA)
    assert link.is_symlink() and chain.is_symlink() and not target.is_symlink()
    assert target.read_bytes() == DATA
    assert listing(tmp_path / "links") == ["again.json", "plan.json"]
    assert listing(tmp_path / "store") == ["plan.json"]


def test_a_dangling_symlink_creates_its_target(tmp_path):
    (tmp_path / "out.json").symlink_to("made.json")
    write_atomic(tmp_path / "out.json", DATA)
    assert (tmp_path / "out.json").is_symlink() and (tmp_path / "made.json").read_bytes() == DATA


def test_a_symlink_loop_is_an_output_error(tmp_path):
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(OutputError) as caught:
        write_atomic(tmp_path / "a", DATA)
    assert caught.value.errno == errno.ELOOP and "ELOOP" in str(caught.value)


def test_a_fifo_is_written_in_place_to_its_reader(tmp_path):
    fifo = tmp_path / "plan.fifo"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_atomic(fifo, DATA)
    reader.join(timeout=10)
    assert received == [DATA]
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and listing(tmp_path) == ["plan.fifo"]
    assert not is_regular_output(fifo)


def test_a_character_device_is_written_in_place():
    if not os.path.exists("/dev/null"):
        pytest.skip("no /dev/null")
    write_atomic("/dev/null", DATA)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and not is_regular_output("/dev/null")


def test_a_full_device_is_an_output_error_naming_the_path_and_enospc():
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with pytest.raises(OutputError) as caught:
        write_atomic("/dev/full", DATA)
    error = caught.value
    assert isinstance(error, InputError) and error.errno == errno.ENOSPC
    assert str(error).startswith("/dev/full: cannot write here") and "ENOSPC" in str(error)
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_dev_stdout_is_written_to_this_process_descriptor(capfd):
    if not os.path.islink("/dev/stdout"):
        pytest.skip("no /dev/stdout link")
    os.write(1, b"before\n")
    write_atomic("/dev/stdout", DATA)
    os.write(1, b"after\n")
    assert capfd.readouterr().out == "before\n" + DATA.decode() + "after\n"
    assert os.path.islink("/dev/stdout") and not is_regular_output("/dev/stdout")


def test_a_missing_directory_is_an_output_error_and_creates_nothing(tmp_path):
    with pytest.raises(OutputError, match="directory to write into does not exist") as caught:
        write_atomic(tmp_path / "missing" / "plan.json", DATA)
    assert caught.value.errno == errno.ENOENT and str(tmp_path / "missing") in str(caught.value)
    assert listing(tmp_path) == []


def test_a_directory_in_the_way_is_an_output_error(tmp_path):
    (tmp_path / "plan.json").mkdir()
    with pytest.raises(OutputError) as caught:
        write_atomic(tmp_path / "plan.json", DATA)
    assert caught.value.errno == errno.EISDIR and listing(tmp_path / "plan.json") == []


def test_a_read_only_directory_is_an_output_error_and_the_old_file_stays(tmp_path):
    path = tmp_path / "plan.json"
    path.write_bytes(b"old")
    tmp_path.chmod(0o555)
    try:
        probe = tmp_path / "probe"
        try:
            probe.write_bytes(b"")
        except PermissionError:
            pass
        else:  # root writes into read-only directories anyway
            probe.unlink()
            pytest.skip("this user can write into a read-only directory")
        with pytest.raises(OutputError) as caught:
            write_atomic(path, DATA)
        assert caught.value.errno == errno.EACCES and str(path) in str(caught.value)
    finally:
        tmp_path.chmod(0o755)
    assert path.read_bytes() == b"old" and listing(tmp_path) == ["plan.json"]


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS], ids=["no permission", "read-only"])
def test_a_directory_the_os_refuses_is_an_output_error(tmp_path, monkeypatch, code):
    # as a read-only directory or file system answers any user, root included
    def refuse(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    path = tmp_path / "plan.json"
    path.write_bytes(b"old")
    monkeypatch.setattr(files.tempfile, "mkstemp", refuse)
    with pytest.raises(OutputError) as caught:
        write_atomic(path, DATA)
    assert caught.value.errno == code and errno.errorcode[code] in str(caught.value)
    assert path.read_bytes() == b"old" and listing(tmp_path) == ["plan.json"]


def _failing_write(monkeypatch, after_bytes, fail):
    """os.write in the writer takes ``after_bytes`` bytes, then ``fail()`` decides."""
    real_write = os.write
    taken = [0]

    def write(fd, data):
        if taken[0] >= after_bytes:
            return fail()
        count = real_write(fd, bytes(data[:after_bytes - taken[0]]))
        taken[0] += count
        return count

    monkeypatch.setattr(files.os, "write", write)


def _raise(error):
    raise error


@pytest.mark.parametrize(("fail", "errno_value", "words"), [
    (lambda: 0, None, f"wrote 4096 of {len(DATA)} bytes"),
    (lambda: _raise(OSError(errno.ENOSPC, "No space left on device")), errno.ENOSPC, "ENOSPC"),
    (lambda: _raise(OSError(errno.EIO, "Input/output error")), errno.EIO, "EIO"),
], ids=["short write", "disk full", "io error"])
def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch, fail,
                                                             errno_value, words):
    path = tmp_path / "plan.json"
    path.write_bytes(b"old")
    _failing_write(monkeypatch, 4096, fail)
    with pytest.raises(OutputError) as caught:
        write_atomic(path, DATA)
    assert caught.value.errno == errno_value and words in str(caught.value)
    assert str(caught.value).startswith(f"{path}: cannot write here")
    assert path.read_bytes() == b"old" and listing(tmp_path) == ["plan.json"]


def test_an_interrupt_while_writing_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "plan.json"
    path.write_bytes(b"old")
    _failing_write(monkeypatch, 100, lambda: _raise(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        write_atomic(path, DATA)
    assert path.read_bytes() == b"old" and listing(tmp_path) == ["plan.json"]


def test_output_errors_pickle_with_their_fields():
    error = OutputError("/dev/full", errno.ENOSPC, "No space left on device")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is OutputError and str(again) == str(error)
    assert (again.path, again.errno, again.reason) == ("/dev/full", errno.ENOSPC,
                                                      "No space left on device")
    assert str(again) == "/dev/full: cannot write here (No space left on device, ENOSPC)"
    short = pickle.loads(pickle.dumps(OutputError("p", None, "wrote 1 of 2 bytes")))
    assert short.errno is None and str(short) == "p: cannot write here (wrote 1 of 2 bytes)"


def test_the_broker_key_is_written_0600(tmp_path):
    from cupool.sharing.config import write_key

    key = write_key(str(tmp_path / "key"))
    assert (tmp_path / "key").read_bytes() == key and len(key) == 32
    assert stat.S_IMODE((tmp_path / "key").stat().st_mode) == 0o600
    assert listing(tmp_path) == ["key"]
