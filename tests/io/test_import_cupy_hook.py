"""CuPy DebugPrintHook importer: a real log, devices, detection by content, malformed lines."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from cupool.errors import TraceFormatError
from cupool.io import convert, load_trace
from cupool.io.cupy_hook import parse_hook_log
from tests.conftest import tiny_document

DATA = Path(__file__).resolve().parents[1] / "data"


def spans(trace):
    return [(b.size, b.start, b.end) for b in trace.buffers]


def line(hook, device=0, size=8, ptr=16, pmem="0x1", **extra):
    entry = {"hook": hook, "device_id": device, "mem_size": size, "mem_ptr": ptr}
    if hook == "malloc":
        entry["size"] = size
    if hook != "alloc" and pmem is not None:
        entry["pmem_id"] = pmem
    entry.update(extra)
    return json.dumps(entry, separators=(",", ":"))


def test_real_log():
    trace = load_trace(DATA / "cupy_debug_print.jsonl")
    assert [op.name for op in trace.ops] == ["malloc", "malloc", "free", "free", "malloc",
                                             "free"]
    assert spans(trace) == [(1024, 0, 2), (2048, 0, 3), (3072, 1, 5), (512, 4, 6)]
    assert [b.uses for b in trace.buffers] == [(0, 1), (0, 2), (1, 4), (4, 5)]
    assert trace.name == "cupy_debug_print"


def test_live_debug_print_hook_run():
    cupy = pytest.importorskip("cupy")
    from cupy.cuda.memory_hooks import DebugPrintHook

    from cupool.allocator import PlannedPool

    pool = PlannedPool(device="emulated", capacity="64MiB")
    previous = cupy.cuda.get_allocator()
    cupy.cuda.set_allocator(pool.malloc)
    out = io.StringIO()
    try:
        with DebugPrintHook(file=out):
            a = cupy.cuda.alloc(100)
            b = cupy.cuda.alloc(5000)
            del a
            c = cupy.cuda.alloc(700)
            del b
    finally:
        cupy.cuda.set_allocator(previous)
    assert c.mem.size == 1024
    trace = parse_hook_log(out.getvalue())
    assert spans(trace) == [(512, 0, 2), (5120, 1, 4), (1024, 3, 5)]


def test_pairs_by_pmem_id_else_by_pointer_and_devices():
    text = "\n".join([
        line("alloc", size=512), line("malloc", pmem="0xa"), line("malloc", ptr=32, pmem=None),
        line("malloc", device=1, size=64), line("free", pmem="0xa"),
        line("free", ptr=32, pmem=None), "",
    ])
    assert spans(parse_hook_log(text)) == [(8, 0, 2), (8, 1, 3)]
    assert spans(parse_hook_log(text, device=1)) == [(64, 0, 1)]
    with pytest.raises(TraceFormatError, match=r"device \(=3\).*some: 0, 1"):
        parse_hook_log(text, device=3)


def test_detected_by_content_whatever_the_name(tmp_path):
    (tmp_path / "trace.json").write_bytes((DATA / "cupy_debug_print.jsonl").read_bytes())
    (tmp_path / "plan.csv").write_text(" " + line("malloc") + "\n")
    assert len(load_trace(tmp_path / "trace.json").buffers) == 4
    assert spans(load_trace(tmp_path / "plan.csv")) == [(8, 0, 1)]
    # a one-line trace v1 document is still trace v1
    (tmp_path / "one.jsonl").write_text(json.dumps(tiny_document()))
    assert load_trace(tmp_path / "one.jsonl").name == "tiny"


def test_convert(tmp_path):
    trace = convert(DATA / "cupy_debug_print.jsonl", tmp_path / "t.json")
    assert load_trace(tmp_path / "t.json") == trace


@pytest.mark.parametrize(("text", "message"), [
    (line("malloc") + "\n{oops\n", "line 2: invalid JSON"),
    (line("malloc") + "\n[1]\n", r"line 2: expected a JSON object, got '\[1\]'"),
    (line("malloc") + '\n{"hook":"realloc"}\n', r"line 2: field 'hook' \(='realloc'\)"),
    (line("malloc").replace('"mem_size":8', '"mem_size":-8'),
     r"line 1: malloc field 'mem_size' \(=-8\)"),
    (line("malloc").replace('"size":8,', ""), r"line 1: malloc field 'size' \(=None\)"),
    (line("free", pmem=7), r"line 1: field 'pmem_id' \(=7\) must be a string"),
    (line("malloc") + "\n" + line("malloc"), r"line 2: malloc of block '0x1' that is still "
                                             r"out \(malloc on line 1\)"),
    (line("malloc") + "\n" + line("free", size=16),
     r"line 2: free of block '0x1' with mem_size \(=16\) differs"),
    (line("alloc"), "no malloc or free lines"),
    (line("malloc", size=0), "no blocks of more than 0 bytes"),
])
def test_malformed_lines(text, message):
    with pytest.raises(TraceFormatError, match=message):
        parse_hook_log(text)
