"""Capture benchmark: every model, training and inference, as trace v1.

    python bench/capture.py OUT_DIR [--batch N] [--models gpt2,llama] [--modes train,infer]
                            [--small] [--amp] [--device-preset H100-SXM]
    python bench/capture.py --bundled [--only NAME,...]   # writes bench/results/capture.json

Captures each model under ``FakeTensorMode`` (no memory is allocated, so full-size models
are fine), writes ``OUT_DIR/<model>_<mode>_b<N>.trace.json.gz``, re-reads every file with
the strict reader, and prints one row per trace: ops, buffers, lower bound (peak live
bytes), persistent bytes and the sum of op times under the roofline model.

``--bundled`` re-captures every bundled trace (``cupool/data/traces``) with the
configuration its ``source`` line names and compares: lower bound, buffer count, persistent
bytes, the op names and FLOPs, and every buffer's (size, start, end, uses, kind) in order.
Where the default capture differs, it is re-run with ``lifted_from_start=True`` (the one
convention in which the bundled traces' recorder differs: see
:func:`cupool.capture.tracer.record`) and that comparison is shown too. About 2 minutes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import re
import sys
import time
from pathlib import Path

from cupool.capture import MODEL_NAMES, CaptureOptions, capture_model
from cupool.capture.roofline import RooflineModel
from cupool.core.vocabulary import PERSISTENT
from cupool.io import load_trace, save_trace


def capture_all(out_dir: Path, batch: int, models, modes, small: bool, amp: bool,
                preset: str) -> list[dict]:
    """Capture, write and re-read every (model, mode); one result row per trace."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cost_model = RooflineModel.for_device(preset)
    rows = []
    for model in models:
        for mode in modes:
            began = time.perf_counter()
            options = CaptureOptions(mode=mode, batch=batch, small=small, amp=amp,
                                     cost_model=cost_model)
            trace = capture_model(model, options)
            seconds = time.perf_counter() - began
            suffix = "_bf16" if amp else ""
            path = out_dir / f"{trace.name}{suffix}.trace.json.gz"
            save_trace(trace, path)
            loaded = load_trace(path)
            if loaded.digest() != trace.digest():
                raise AssertionError(f"{path}: re-read trace differs from the captured one")
            rows.append({
                "file": path.name, "ops": trace.num_ops, "buffers": len(trace.buffers),
                "lower_bound_bytes": trace.lower_bound_bytes(),
                "persistent_bytes": sum(b.size for b in trace.buffers if b.kind == PERSISTENT),
                "op_time_ms": sum(op.duration_us or 0.0 for op in trace.ops) / 1000,
                "capture_s": seconds,
            })
    return rows


def table(rows: list[dict]) -> str:
    """The rows as a Markdown table (the layout of ``cupool/data/traces/README.md``)."""
    lines = ["| file | ops | buffers | lower bound (bytes) | persistent (bytes) "
             "| sum of op times (ms) | capture (s) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['file']} | {r['ops']} | {r['buffers']} | {r['lower_bound_bytes']} "
              f"| {r['persistent_bytes']} | {r['op_time_ms']:.2f} | {r['capture_s']:.1f} |"
              for r in rows]
    return "\n".join(lines)


ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "cupool" / "data" / "traces"


def bundled_config(trace) -> dict:
    """The capture configuration a bundled trace's ``source`` line names."""
    source = trace.source
    model = re.search(r"model=([\w-]+)", source)
    batch = re.search(r"batch=(\d+)", source)
    if model is None or batch is None:
        raise ValueError(f"{trace.name}: source names no model/batch: {source!r}")
    return {"model": model.group(1), "mode": "train" if "training step" in source else "infer",
            "batch": int(batch.group(1)), "amp": "amp=True" in source}


def _persistent(trace) -> int:
    return sum(b.size for b in trace.buffers if b.kind == PERSISTENT)


def _buffers(trace) -> list[tuple]:
    return [(b.size, b.start, b.end, b.uses, b.kind) for b in trace.buffers]


def _first_difference(bundled, trace) -> str:
    """Where the two traces first diverge (op name, else buffer), or ``""``."""
    for i, (a, b) in enumerate(zip(bundled.ops, trace.ops, strict=False)):
        if a.name != b.name:
            return f"op {i}: bundled {a.name}, re-captured {b.name}"
    if bundled.num_ops != trace.num_ops:
        return f"op count: bundled {bundled.num_ops}, re-captured {trace.num_ops}"
    for a, b in zip(bundled.buffers, trace.buffers, strict=False):
        if (a.size, a.start, a.end, a.uses, a.kind) != (b.size, b.start, b.end, b.uses, b.kind):
            return (f"buffer {a.id} ({a.name}): bundled size {a.size} [{a.start}, {a.end}) "
                    f"uses {list(a.uses)[:4]}, re-captured size {b.size} [{b.start}, {b.end}) "
                    f"uses {list(b.uses)[:4]} ({b.name})")
    if len(bundled.buffers) != len(trace.buffers):
        return f"buffer count: bundled {len(bundled.buffers)}, re-captured {len(trace.buffers)}"
    return ""


def compare(bundled, trace) -> dict:
    """How a re-capture compares with a bundled trace."""
    return {"lower_bound_bytes": trace.lower_bound_bytes(),
            "lower_bound_equal": trace.lower_bound_bytes() == bundled.lower_bound_bytes(),
            "buffers": len(trace.buffers),
            "persistent_bytes": _persistent(trace),
            "ops_equal": [(o.name, o.flops) for o in trace.ops]
            == [(o.name, o.flops) for o in bundled.ops],
            "buffers_identical": _buffers(trace) == _buffers(bundled),
            "op_time_ms": sum(o.duration_us or 0.0 for o in trace.ops) / 1000,
            "first_difference": _first_difference(bundled, trace)}


def compare_bundled(names: list[str] | None = None) -> list[dict]:
    """Re-capture every bundled trace (or those in ``names``) and compare; one row each."""
    paths = sorted(BUNDLED.glob("*.trace.json.gz"))
    if names:
        paths = [p for p in paths if p.name.split(".")[0] in names]
    rows = []
    for path in paths:
        bundled = load_trace(path)
        config = bundled_config(bundled)
        began = time.perf_counter()
        options = CaptureOptions(mode=config["mode"], batch=config["batch"], amp=config["amp"])
        trace = capture_model(config["model"], options)
        row = {"trace": path.name.split(".")[0], **config,
               "bundled_lower_bound_bytes": bundled.lower_bound_bytes(),
               "bundled_buffers": len(bundled.buffers),
               "bundled_persistent_bytes": _persistent(bundled),
               "bundled_op_time_ms": sum(o.duration_us or 0.0 for o in bundled.ops) / 1000,
               **compare(bundled, trace), "lifted_from_start": None}
        if not row["buffers_identical"]:
            legacy = capture_model(config["model"],
                                   dataclasses.replace(options, lifted_from_start=True))
            row["lifted_from_start"] = compare(bundled, legacy)
        row["seconds"] = time.perf_counter() - began
        rows.append(row)
    return rows


def bundled_table(rows: list[dict]) -> str:
    """The comparison as a Markdown table."""
    def yes(flag):
        return "yes" if flag else "**no**"

    lines = ["| trace | bundled lower bound | re-captured lower bound | equal? | buffers "
             "(bundled / ours) | persistent equal? | ops & buffers identical? "
             "| with lifted_from_start | seconds |",
             "| --- | ---: | ---: | --- | ---: | --- | --- | --- | ---: |"]
    for r in rows:
        legacy = r["lifted_from_start"]
        legacy_text = "" if legacy is None else (
            f"{legacy['lower_bound_bytes']}: equal {yes(legacy['lower_bound_equal'])}, "
            f"identical {yes(legacy['ops_equal'] and legacy['buffers_identical'])}")
        lines.append(
            f"| {r['trace']} | {r['bundled_lower_bound_bytes']} | {r['lower_bound_bytes']} "
            f"| {yes(r['lower_bound_equal'])} | {r['bundled_buffers']} / {r['buffers']} "
            f"| {yes(r['persistent_bytes'] == r['bundled_persistent_bytes'])} "
            f"| {yes(r['ops_equal'] and r['buffers_identical'])} | {legacy_text} "
            f"| {r['seconds']:.1f} |")
    differences = [f"- {r['trace']}: {r['first_difference']}" for r in rows
                   if r["first_difference"]]
    if differences:
        lines += ["", "First differences of the default re-capture:", *differences]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, nargs="?",
                        help="where to write the traces (not with --bundled)")
    parser.add_argument("--bundled", action="store_true",
                        help="re-capture the bundled traces and compare with them")
    parser.add_argument("--only", default="", help="with --bundled: comma-separated names")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "capture.json",
                        help="with --bundled: where to write the JSON results")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--models", default=",".join(MODEL_NAMES))
    parser.add_argument("--modes", default="train,infer")
    parser.add_argument("--small", action="store_true", help="tiny test configurations")
    parser.add_argument("--amp", action="store_true", help="bfloat16 autocast forward")
    parser.add_argument("--device-preset", default="H100-SXM")
    args = parser.parse_args(argv)
    if args.bundled:
        import torch

        rows = compare_bundled([n for n in args.only.split(",") if n])
        print(bundled_table(rows))
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "rows": rows, "torch": torch.__version__, "python": platform.python_version(),
            "machine": platform.machine(), "processor": platform.processor()}, indent=1))
        return 0
    if args.out_dir is None:
        parser.error("OUT_DIR is required (or pass --bundled)")
    rows = capture_all(args.out_dir, args.batch, args.models.split(","),
                       args.modes.split(","), args.small, args.amp, args.device_preset)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
