"""Capture benchmark (issue 6, item 1): every model, training and inference, as trace v1.

    python bench/capture.py OUT_DIR [--batch N] [--models gpt2,llama] [--modes train,infer]
                            [--small] [--amp] [--device-preset H100-SXM]

Captures each model under ``FakeTensorMode`` (no memory is allocated, so full-size models
are fine), writes ``OUT_DIR/<model>_<mode>_b<N>.trace.json.gz``, re-reads every file with
the strict reader, and prints one row per trace: ops, buffers, lower bound (peak live
bytes), persistent bytes and the sum of op times under the roofline model.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from cupool.capture import MODEL_NAMES, capture_model
from cupool.capture.cost import RooflineModel
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
            trace = capture_model(model, mode, batch, small=small, amp=amp,
                                  cost_model=cost_model)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--models", default=",".join(MODEL_NAMES))
    parser.add_argument("--modes", default="train,infer")
    parser.add_argument("--small", action="store_true", help="tiny test configurations")
    parser.add_argument("--amp", action="store_true", help="bfloat16 autocast forward")
    parser.add_argument("--device-preset", default="H100-SXM")
    args = parser.parse_args(argv)
    rows = capture_all(args.out_dir, args.batch, args.models.split(","),
                       args.modes.split(","), args.small, args.amp, args.device_preset)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
