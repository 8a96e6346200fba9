"""The CUDA adapter: behaviour on a GPU (marked ``gpu``, skipped here) and, everywhere,
that every CuPy name it calls exists in the installed CuPy with the arity it uses.

No machine of this project has a GPU, so the adapter's code never runs in CI; what can
be proved without one is proved here:

- the adapter touches exactly the CuPy names listed in ``CUPY_CALLS`` (read from its
  source with ``ast``) and passes each the listed number of arguments;
- each listed name exists in the installed CuPy, and each call's arity is accepted.
  Python-visible signatures are checked with ``inspect.signature``. Cython builtins
  (``cupy.cuda.runtime.*``) have no signature object, so two independent pieces of
  evidence are used: the signature Cython embeds in the docstring's first line, and
  calling with one argument too many, which Cython rejects with a ``TypeError`` that
  states the expected count *before* running the function body (so nothing touches
  the missing driver). A name with no evidence fails the test rather than passing.
"""

from __future__ import annotations

import ast
import inspect
import logging
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from test_devices_emulated import SCENARIOS

import cupool.devices.cuda as cuda_module
from cupool.devices import open_device, probe_cuda
from cupool.devices.cuda import CUPY_CALLS, CupyCall
from cupool.devices.errors import DeviceUnavailableError, StreamTaskError

CUDA_SOURCE = Path(cuda_module.__file__)

# How cuda.py reaches CuPy (see the CUPY_CALLS docstring): attribute → dotted prefix.
MARKER_ATTRIBUTES = {"_cupy": "cupy", "_cuda": "cupy.cuda", "_rt": "cupy.cuda.runtime",
                     "_cupy_stream": "cupy.cuda.Stream", "_cupy_event": "cupy.cuda.Event"}
MARKER_NAMES = {"cuda_error": "cupy.cuda.runtime.CUDARuntimeError"}


# -- (a) on a GPU -----------------------------------------------------------------------------
@pytest.fixture
def cuda_device():
    usable, reason = probe_cuda()
    if not usable:
        pytest.skip(f"needs a usable GPU: {reason}")
    from cupool.devices.cuda import CudaDevice
    with CudaDevice() as dev:
        yield dev


@pytest.mark.gpu
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
def test_scenario_on_gpu(cuda_device, scenario):
    scenario(cuda_device)


@pytest.mark.gpu
def test_gpu_memory_info_and_callback_failures(cuda_device):
    free, total = cuda_device.mem_info()
    assert 0 < free <= total
    memory = cuda_device.reserve(1 << 20)
    assert cuda_device.stats()["reserved_bytes.current"] == 1 << 20
    cuda_device.release(memory)
    stream = cuda_device.create_stream("failing")
    ran = threading.Event()

    def broken() -> None:
        raise ValueError("boom")

    cuda_device.host_callback(stream, broken)
    cuda_device.host_callback(stream, ran.set)
    with pytest.raises(StreamTaskError, match="boom"):
        stream.synchronize()
    assert ran.is_set()


# -- (b) everywhere: the CuPy names and arities -------------------------------------------------
def _chain(node: ast.Attribute) -> tuple[str | None, list[str]]:
    """``a.b.c`` → (``"a"``, [``"b"``, ``"c"``]); the root is None when not a plain name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    root = node.id if isinstance(node, ast.Name) else None
    return root, parts[::-1]


def _cupy_name(node: ast.Attribute) -> str | None:
    """The CuPy dotted name an attribute chain of cuda.py reads, if it reads one."""
    root, parts = _chain(node)
    prefix, rest = None, []
    if root in MARKER_NAMES:
        prefix, rest = MARKER_NAMES[root], parts
    for i, part in enumerate(parts):
        if part in MARKER_ATTRIBUTES:
            prefix, rest = MARKER_ATTRIBUTES[part], parts[i + 1:]
    if prefix is None or not rest:
        return None
    return ".".join([prefix, *rest])


def _uses_in_source() -> tuple[set[str], list[tuple[str, int, tuple[str, ...], int]]]:
    """(names read, calls as (name, positional, keywords, line)) in cuda.py."""
    tree = ast.parse(CUDA_SOURCE.read_text())
    inner = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    names = {name for node in ast.walk(tree)
             if isinstance(node, ast.Attribute) and id(node) not in inner
             and (name := _cupy_name(node)) is not None}
    calls = [(name, len(node.args), tuple(sorted(k.arg for k in node.keywords)), node.lineno)
             for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and (name := _cupy_name(node.func)) is not None]
    return names, calls


def test_adapter_uses_exactly_the_listed_names_with_the_listed_arities():
    names, calls = _uses_in_source()
    listed = {call.name: call for call in CUPY_CALLS}
    assert len(listed) == len(CUPY_CALLS), "duplicate entries in CUPY_CALLS"
    assert names - set(listed) == set(), "cuda.py uses CuPy names missing from CUPY_CALLS"
    assert set(listed) - names == set(), "CUPY_CALLS lists names cuda.py does not use"
    called = set()
    for name, positional, keywords, line in calls:
        entry = listed[name]
        assert entry.positional is not None, f"line {line}: {name} is listed as read, not called"
        assert (positional, keywords) == (entry.positional, tuple(sorted(entry.keywords))), (
            f"line {line}: {name} called with {positional} positional and keywords {keywords}, "
            f"listed as {entry.positional} and {entry.keywords}")
        called.add(name)
    never_called = {c.name for c in CUPY_CALLS if c.positional is not None} - called
    assert never_called == set(), f"listed as called but never called: {never_called}"


def test_adapter_imports_cupy_lazily():
    tree = ast.parse(CUDA_SOURCE.read_text())
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) \
                else [node.module or ""]
            assert not any(m.split(".")[0] == "cupy" for m in modules), ast.unparse(node)
    code = ("import sys, cupool.devices, cupool.devices.cuda, cupool.devices.emulated; "
            "sys.exit(3 if 'cupy' in sys.modules else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr or "importing the devices package imported cupy"


def _resolve(dotted: str) -> tuple[object, object, str]:
    """(parent, object, last part) for a dotted name starting with ``cupy``."""
    cupy = pytest.importorskip("cupy", reason="cupy is not installed (pip install cupy-cuda13x)")
    parts = dotted.split(".")
    parent, obj = None, cupy
    for part in parts[1:]:
        parent, obj = obj, getattr(obj, part)
    return parent, obj, parts[-1]


def _instance_without_gpu(class_name: str) -> object:
    """An instance of a CuPy class, made without touching the driver."""
    cupy = pytest.importorskip("cupy")
    makers = {"cupy.cuda.Stream": lambda: cupy.cuda.Stream.null,
              "cupy.cuda.runtime.CUDARuntimeError": lambda: cupy.cuda.runtime.CUDARuntimeError(2)}
    assert class_name in makers, f"no way to get a {class_name} without a GPU; add one"
    return makers[class_name]()


_DOC_SIGNATURE = re.compile(r"^\s*[\w.]+\((?P<params>[^)]*)\)")
_ARITY_MESSAGE = re.compile(r"takes (?:(?P<bound>exactly|at most|at least) )?"
                            r"(?P<count>\d+|no) (?:positional )?arguments?")


def _doc_parameters(obj: object) -> list[tuple[str, bool]] | None:
    """[(name, has_default)] from a Cython embedded signature, or None."""
    first = (getattr(obj, "__doc__", None) or "").strip().splitlines()
    match = _DOC_SIGNATURE.match(first[0]) if first else None
    if match is None:
        return None
    params = []
    for raw in filter(None, (p.strip() for p in match.group("params").split(","))):
        name = raw.split("=")[0].split()[-1].lstrip("*")
        if name != "self":
            params.append((name, "=" in raw))
    return params


def _probe_arity(obj: object, positional: int) -> str | None:
    """Call with one positional argument too many; return the TypeError's message.

    Cython checks the argument count before running the body, so the call cannot
    reach the driver; any other outcome fails the test."""
    try:
        obj(*([None] * (positional + 1)))
    except TypeError as exc:
        return str(exc)
    pytest.fail(f"{obj!r} accepted {positional + 1} positional arguments")


def _arity_evidence(call: CupyCall) -> list[str]:
    """Check one called name; return which kinds of evidence confirmed its arity."""
    parent, obj, last = _resolve(call.name)
    assert callable(obj), f"{call.name} is not callable"
    evidence = []
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        is_method = inspect.isclass(parent) and not inspect.isclass(obj) and not isinstance(
            inspect.getattr_static(parent, last), staticmethod | classmethod)
        args = [None] * (call.positional + (1 if is_method else 0))
        signature.bind(*args, **{k: None for k in call.keywords})  # TypeError if not accepted
        evidence.append("inspect.signature")
        return evidence
    params = _doc_parameters(obj)
    if params is not None:
        names = [name for name, _ in params]
        required = sum(1 for _, has_default in params if not has_default)
        assert required <= call.positional <= len(params), (
            f"{call.name}: documented {params}, adapter passes {call.positional} positional")
        assert set(call.keywords) <= set(names[call.positional:]), (
            f"{call.name}: documented {names}, adapter passes keywords {call.keywords}")
        evidence.append("docstring signature")
    if not call.keywords:
        message = _probe_arity(obj, call.positional)
        match = _ARITY_MESSAGE.search(message)
        assert match is not None, f"{call.name}: unexpected TypeError {message!r}"
        count = 0 if match.group("count") == "no" else int(match.group("count"))
        bound = match.group("bound") or "exactly"
        assert (count == call.positional if bound == "exactly" else
                count >= call.positional if bound == "at most" else count <= call.positional), (
            f"{call.name}: CuPy says {message!r}, adapter passes {call.positional}")
        evidence.append("wrong-arity TypeError")
    return evidence


@pytest.mark.parametrize("call", [c for c in CUPY_CALLS if c.positional is not None],
                         ids=lambda c: c.name)
def test_cupy_callable_exists_with_the_arity_used(call):
    evidence = _arity_evidence(call)
    assert evidence, f"{call.name}: nothing could confirm its arity"


@pytest.mark.parametrize("call", [c for c in CUPY_CALLS if c.positional is None],
                         ids=lambda c: c.name)
def test_cupy_attribute_exists(call):
    if call.instance:
        class_name, attribute = call.name.rsplit(".", 1)
        assert hasattr(_instance_without_gpu(class_name), attribute), call.name
    else:
        _resolve(call.name)  # AttributeError if absent


def test_copy_kind_constants_match_the_cuda_runtime_api():
    # cudaMemcpyKind: HostToHost 0, HostToDevice 1, DeviceToHost 2, DeviceToDevice 3
    _, runtime, _ = _resolve("cupy.cuda.runtime")
    assert (runtime.memcpyHostToDevice, runtime.memcpyDeviceToHost,
            runtime.memcpyDeviceToDevice) == (1, 2, 3)
    assert runtime.CUDARuntimeError(2).status == cuda_module._CUDA_ERROR_MEMORY_ALLOCATION


# -- (b) everywhere: choosing a device ----------------------------------------------------------
def test_auto_falls_back_to_emulated_with_a_reason(caplog):
    usable, why = probe_cuda()
    if usable:
        pytest.skip(f"a GPU is usable here ({why}); the fallback cannot be observed")
    with caplog.at_level(logging.INFO, logger="cupool.devices"), \
            open_device("auto", device_id=0, capacity="4MiB") as dev:
        assert dev.kind == "emulated"
        assert dev.reason.startswith(f"auto chose emulated: {why}")
        assert "ignored cuda-only options ['device_id']" in dev.reason
        assert dev.mem_info() == (4 << 20, 4 << 20)
    assert any("opened emulated device" in r.getMessage() for r in caplog.records)
    with pytest.raises(DeviceUnavailableError, match="device kind 'cuda' is unavailable"):
        open_device("cuda")
