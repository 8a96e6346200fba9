"""Stress benchmark: ``cupool stress`` for a fixed time, through the CLI function.

Target: the emulated run (``cupool stress --device emulated --minutes 2``) ends with zero
corrupt bytes and zero leaked blocks (and no scenario error). Prints a markdown table and
writes the CLI's JSON object, plus the command and its exit code, to
``bench/results/stress.json`` (``stress_cuda.json`` for ``--device cuda``).

    python bench/stress.py                       # emulated, 2 minutes
    python bench/stress.py --minutes 0.2         # a quick look
    python bench/stress.py --device cuda --minutes 30    # on a GPU machine
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

from cupool.cli import main as cupool_main

ROOT = Path(__file__).resolve().parents[1]


def run(device: str, minutes: float, seed: int) -> dict:
    argv = ["stress", "--device", device, "--minutes", f"{minutes:g}", "--seed", str(seed),
            "--json"]
    out = io.StringIO()
    code = cupool_main(argv, stdout=out)
    if code == 2:  # bad input: the CLI already said why on stderr
        raise SystemExit(2)
    document = json.loads(out.getvalue())
    return {"command": "cupool " + " ".join(argv), "exit_code": code, "result": document,
            "target_met": code == 0 and document["corrupt_bytes"] == 0
            and document["leaked_blocks"] == 0 and document["errors"] == 0}


def table(record: dict) -> str:
    result = record["result"]
    rows = [("device", result["device"]), ("seconds", f"{result['seconds']:.1f}"),
            ("scenarios", result["scenarios"]), ("bytes checked", result["bytes_checked"]),
            ("corrupt bytes (target 0)", result["corrupt_bytes"]),
            ("leaked blocks (target 0)", result["leaked_blocks"]),
            ("late prefetches", result["late_prefetches"]), ("errors (target 0)",
                                                            result["errors"]),
            ("exit code", record["exit_code"]),
            ("target met", "yes" if record["target_met"] else "NO")]
    lines = [f"`{record['command']}`", "", "| quantity | value |", "| --- | --- |"]
    lines += [f"| {name} | {value} |" for name, value in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="emulated", choices=("emulated", "cuda"))
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    record = run(args.device, args.minutes, args.seed)
    print(table(record))
    name = "stress.json" if args.device == "emulated" else f"stress_{args.device}.json"
    path = ROOT / "bench" / "results" / name
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"\nwritten to {path.relative_to(ROOT)}")
    return record


if __name__ == "__main__":
    sys.exit(0 if main()["target_met"] else 1)
