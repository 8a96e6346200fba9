"""Capture the inference traces the budget benchmark plans: every model ``cupool capture``
supports, one ``no_grad`` forward pass at batch 1 and at batch 8, full size, H100-SXM roofline.

    python bench/capture_inference.py            # (re)writes bench/data/traces/*.trace.json.gz
    python bench/capture_inference.py --check    # captures again, compares with the stored files

Each trace is captured under ``FakeTensorMode`` (nothing is allocated, so full-size models
take about a second each), written as gzipped trace v1 (gzip header time 0) and re-read with
the strict reader. Capture is deterministic for a given PyTorch version, so the same command
writes the same bytes; ``--check`` says which stored files a fresh capture would change
(a different PyTorch, or a capture that records more per buffer) and exits 1 if any.
Provenance is in ``bench/data/traces/README.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cupool.capture import MODEL_NAMES, CaptureOptions, capture_model
from cupool.capture.roofline import RooflineModel
from cupool.core.vocabulary import PERSISTENT
from cupool.io import load_trace, save_trace

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "bench" / "data" / "traces"
BATCHES = (1, 8)
PRESET = "H100-SXM"


@dataclass(frozen=True)
class Captured:
    """One written inference trace and what it holds."""

    file: str
    ops: int
    buffers: int
    lower_bound_bytes: int
    persistent_bytes: int
    op_time_ms: float
    capture_s: float


def capture_one(model: str, batch: int, out_dir: Path) -> Captured:
    """Capture ``model`` in inference mode at ``batch``, write it under ``out_dir`` as
    ``<model>_infer_b<batch>.trace.json.gz`` and check that it reads back unchanged."""
    began = time.perf_counter()
    options = CaptureOptions(mode="infer", batch=batch,
                             cost_model=RooflineModel.for_device(PRESET))
    trace = capture_model(model, options)
    seconds = time.perf_counter() - began
    path = out_dir / f"{trace.name}.trace.json.gz"
    save_trace(trace, path)
    if load_trace(path).digest() != trace.digest():
        raise AssertionError(f"{path}: the re-read trace differs from the captured one")
    return Captured(file=path.name, ops=trace.num_ops, buffers=len(trace.buffers),
                    lower_bound_bytes=trace.lower_bound_bytes(),
                    persistent_bytes=sum(b.size for b in trace.buffers if b.kind == PERSISTENT),
                    op_time_ms=sum(op.duration_us or 0.0 for op in trace.ops) / 1000,
                    capture_s=seconds)


def capture_all(out_dir: Path, models) -> list[Captured]:
    """Every model at every batch of ``BATCHES``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return [capture_one(model, batch, out_dir) for model in models for batch in BATCHES]


def table(rows: list[Captured]) -> str:
    """The rows as a Markdown table."""
    lines = ["| file | ops | buffers | lower bound (bytes) | persistent (bytes) "
             "| sum of op times (ms) |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r.file} | {r.ops} | {r.buffers} | {r.lower_bound_bytes} "
              f"| {r.persistent_bytes} | {r.op_time_ms:.2f} |" for r in rows]
    return "\n".join(lines)


def check(models) -> list[str]:
    """Capture into a temporary directory; the stored files whose bytes would change."""
    with tempfile.TemporaryDirectory() as tmp:
        rows = capture_all(Path(tmp), models)
        return [r.file for r in rows
                if not (OUT_DIR / r.file).exists()
                or (OUT_DIR / r.file).read_bytes() != (Path(tmp) / r.file).read_bytes()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODEL_NAMES),
                        help="comma-separated subset of the capturable models")
    parser.add_argument("--check", action="store_true",
                        help="compare a fresh capture with the stored files; write nothing")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    if args.check:
        changed = check(models)
        print("identical" if not changed else "would change: " + ", ".join(changed))
        return 1 if changed else 0
    rows = capture_all(OUT_DIR, models)
    if args.json:
        print(json.dumps([r.__dict__ for r in rows], indent=1))
    else:
        print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
