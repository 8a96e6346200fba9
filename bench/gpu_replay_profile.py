"""Where a replay's host time goes, on a GPU (``cuda``) or the emulated device.

Usage::

    OUT=bench/results/gpu python bench/gpu_replay_profile.py cuda   # or: emulated

Writes ``$OUT/diag.json`` and ``$OUT/profile.txt`` (``/tmp`` without ``OUT``). Sections,
each independent (an error is recorded and the next runs):

- two replay cells (ResNet-50 fp32 at 70%, GPT-2 bf16 at 50%; 4 iterations, full size on
  a GPU), each with the interpreter's default switch interval and with 20 µs: iteration
  times against the simulator, late prefetches, how long the host took to enqueue each
  iteration (``begin_iteration`` to ``end_iteration``) and the host callbacks per
  iteration on each stream;
- ``launch_costs``: µs per pattern-kernel launch through :mod:`cupool.kernels`, per
  event record, per host callback (enqueue, and to completion), per raw kernel call with
  the stream current or passed, per enter/exit of the launch's context managers, and how
  long a host callback waits while the enqueuing thread stays busy in Python;
- ``profile``: cProfile of three replay iterations of the ResNet-50 cell (host side).
"""
import cProfile
import io
import json
import os
import pstats
import sys
import time
import traceback
from collections import Counter

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cupool.app.replay import ReplaySettings, replay
from cupool.app.selftest.runners import _bundled
from cupool.swap import engine as engine_module

OUT = os.environ.get("OUT", "/tmp")
DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cuda"
results = {}


def save():
    with open(os.path.join(OUT, "diag.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)


def section(name):
    def wrap(fn):
        began = time.perf_counter()
        try:
            results[name] = fn()
        except BaseException:
            results[name] = {"error": traceback.format_exc(limit=6)}
        results[name + "_s"] = time.perf_counter() - began
        print(name, json.dumps(results[name], default=str)[:1500], flush=True)
        save()
    return wrap


enqueue = []
callbacks = Counter()
_end = engine_module.SwapEngine.end_iteration
_begin = engine_module.SwapEngine.begin_iteration


def begin(self, iteration):
    self._diag_began = time.perf_counter()
    return _begin(self, iteration)


def end(self):
    enqueue.append(time.perf_counter() - self._diag_began)
    return _end(self)


engine_module.SwapEngine.begin_iteration = begin
engine_module.SwapEngine.end_iteration = end
from cupool.devices.protocol import Device  # noqa: E402

_cb = Device.host_callback


def counted(self, stream, fn):
    callbacks[getattr(stream, "name", "?")] += 1
    return _cb(self, stream, fn)


Device.host_callback = counted
SCALES = {"size_scale": 1, "time_scale": 1.0} if DEVICE == "cuda" else {}


def one(name, budget, switch=None, iterations=4):
    trace = _bundled([name])[0]
    old = sys.getswitchinterval()
    enqueue.clear()
    callbacks.clear()
    if switch:
        sys.setswitchinterval(switch)
    try:
        r = replay(trace, budget, ReplaySettings(iterations=iterations, **SCALES),
                   device=DEVICE)
    finally:
        sys.setswitchinterval(old)
    return {"ops": trace.num_ops, "iteration_us": [round(x) for x in r["iteration_us"]],
            "sim_us": round(r["sim_iteration_us"]), "late": r["late_prefetches"],
            "stall_us": [round(x) for x in r["stall_us"]],
            "enqueue_ms": [round(x * 1e3, 2) for x in enqueue],
            "callbacks_per_iteration": {k: v / iterations for k, v in callbacks.items()},
            "corrupt": r["corrupt_bytes"]}


for cell in [("resnet50_train_b32_fp32", "70%"), ("gpt2_train_b8_s1024_bf16", "50%")]:
    for switch in (None, 2e-5):
        section(f"{cell[0]}_{cell[1]}_switch{switch}")(lambda c=cell, s=switch: one(*c, s))


@section("launch_costs")
def launch_costs():
    from cupool.devices import open_device
    from cupool.kernels import spin
    from cupool.kernels.loader import get_function
    out = {}
    n = 2000
    with open_device(DEVICE) as dev:
        stream = dev.create_stream("diag")
        spin(dev, 1000, stream=stream)
        dev.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            spin(dev, 1000, stream=stream)
        out["spin_via_kernels_us"] = (time.perf_counter() - t) / n * 1e6
        dev.synchronize()
        ev = dev.create_event(timing=True)
        t = time.perf_counter()
        for _ in range(n):
            ev.record(stream)
        out["event_record_us"] = (time.perf_counter() - t) / n * 1e6
        t = time.perf_counter()
        for _ in range(n):
            dev.host_callback(stream, lambda: None)
        out["host_callback_enqueue_us"] = (time.perf_counter() - t) / n * 1e6
        dev.synchronize()
        out["host_callback_total_us"] = (time.perf_counter() - t) / n * 1e6
        if DEVICE == "cuda":
            cupy = dev.cupy
            k = get_function(dev, "cupool_spin_ns")
            args = (np.uint64(1000), np.uint64(0))
            with stream.cupy_stream:
                t = time.perf_counter()
                for _ in range(n):
                    k((1,), (1,), args)
                out["rawkernel_stream_current_us"] = (time.perf_counter() - t) / n * 1e6
            dev.synchronize()
            try:
                t = time.perf_counter()
                for _ in range(n):
                    k.kernel((1,), (1,), args, stream=stream.cupy_stream)
                out["function_with_stream_us"] = (time.perf_counter() - t) / n * 1e6
            except Exception as exc:
                out["function_with_stream_error"] = repr(exc)
            dev.synchronize()
            t = time.perf_counter()
            for _ in range(n):
                with cupy.cuda.Device(dev.device_id), stream.cupy_stream, \
                        cupy.cuda.using_allocator(cupy.get_default_memory_pool().malloc):
                    pass
            out["launch_contexts_only_us"] = (time.perf_counter() - t) / n * 1e6
            # a host callback while the enqueuing thread stays busy in Python
            dev.synchronize()
            marks = []
            t0 = time.perf_counter()
            dev.host_callback(stream, lambda: marks.append(time.perf_counter()))
            x = 0
            while time.perf_counter() - t0 < 0.05:
                x += 1
            dev.synchronize()
            out["callback_delay_busy_host_ms"] = (marks[0] - t0) * 1e3 if marks else None
            out["switch_interval_s"] = sys.getswitchinterval()
    return out


@section("profile")
def profile():
    trace = _bundled(["resnet50_train_b32_fp32"])[0]
    prof = cProfile.Profile()
    _run = engine_module.SwapEngine.run_iteration

    def run_iteration(self, iteration, body):
        prof.enable()
        try:
            return _run(self, iteration, body)
        finally:
            prof.disable()

    engine_module.SwapEngine.run_iteration = run_iteration
    try:
        replay(trace, "70%", ReplaySettings(iterations=3, **SCALES), device=DEVICE)
    finally:
        engine_module.SwapEngine.run_iteration = _run
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats("tottime").print_stats(40)
    stats.sort_stats("cumulative").print_stats(50)
    with open(os.path.join(OUT, "profile.txt"), "w") as f:
        f.write(text.getvalue())
    return "written"
