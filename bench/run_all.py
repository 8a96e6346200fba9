"""Run every benchmark of the project and write ``bench/results/REPORT.md`` .

    python bench/run_all.py                  # everything (tens of minutes), then the report
    python bench/run_all.py --quick          # --quick where a benchmark has it, --small capture,
                                             # a 12 s stress run, 2 bundled traces re-captured
    python bench/run_all.py --only static,pool
    python bench/run_all.py --render-only    # rebuild REPORT.md + figures from saved results

Each benchmark runs as its own subprocess (``sys.executable``, its own flags) so that one
crash does not stop the others; its exit code, wall time and whether it rewrote its results
file go into ``bench/results/run_all.json`` with the machine and versions (Python, numpy,
CuPy, torch if present, matplotlib, CPU count, platform, git commit). Benchmarks that print
instead of writing JSON (``exact_dsa``, ``capture``) have their stdout saved as
``exact_dsa.txt`` / ``capture.md`` (``capture_bundled``, ``capture.py --bundled``, writes
``capture.json``). Then the pictures are drawn and the report rendered by
``bench/report.py``, a pure function of those files; ``--render-only`` does only that last step
(it records the machine in ``run_all.json``, marked ``render-only``, only when no run
did). ``--no-figures`` skips drawing (the report then shows the
pictures already on disk, if any).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import report

ROOT = report.ROOT
BENCH = ROOT / "bench"

# name -> (script, normal flags, quick flags, the results file it writes: for the names in
# STDOUT_KEPT, the file its stdout is saved to). ``multilevel --quick`` prints its table but
# writes no JSON; ``capture_bundled``'s quick run re-captures two small inference traces.
BENCHMARKS: dict[str, tuple[str, list[str], list[str], str]] = {
    "static": ("static.py", [], ["--quick"], "static.json"),
    "pool": ("pool.py", [], [], "pool.json"),
    "swap": ("swap.py", [], ["--quick"], "swap.json"),
    "multilevel": ("multilevel.py", [], ["--quick"], "multilevel.json"),
    "replay": ("replay.py", [], [], "replay.json"),
    "blocks": ("blocks.py", [], [], "blocks.json"),
    "sharing": ("sharing.py", [], ["--quick"], "sharing.json"),
    "stress": ("stress.py", [], ["--minutes", "0.2"], "stress.json"),
    "exact_dsa": ("exact_dsa.py", [], [], "exact_dsa.txt"),
    "capture": ("capture.py", ["{tmp}"], ["{tmp}", "--small"], "capture.md"),
    "capture_bundled": ("capture.py", ["--bundled"],
                        ["--bundled", "--only", "mobilenetv2_infer_b1,resnet50_infer_b8"],
                        "capture.json"),
}
STDOUT_KEPT = {"exact_dsa", "capture"}


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def git_commit() -> str | None:
    """``HEAD``'s hash, ``+dirty`` when the work tree has changes (read-only git commands)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty.strip() else "")


def machine() -> dict:
    """The machine and the versions that matter to the numbers."""
    cupy = next((v for v in (_version(d) for d in ("cupy", "cupy-cuda13x", "cupy-cuda12x"))
                 if v), None)
    return {
        "python": platform.python_version(),
        "numpy": _version("numpy"),
        "cupy": cupy,
        "torch": _version("torch"),
        "matplotlib": _version("matplotlib"),
        "cupool": _version("cupool"),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "git_commit": git_commit(),
    }


def selected(only: str | None) -> list[str]:
    if not only:
        return list(BENCHMARKS)
    names = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise SystemExit(f"--only: unknown benchmark(s) {', '.join(unknown)}; "
                         f"known: {', '.join(BENCHMARKS)}")
    return names


def command(name: str, quick: bool, tmp: str) -> list[str]:
    script, flags, quick_flags, _ = BENCHMARKS[name]
    args = [a.format(tmp=tmp) for a in (quick_flags if quick else flags)]
    return [sys.executable, str(BENCH / script), *args]


def run_one(name: str, quick: bool, results: Path) -> dict:
    """Run one benchmark; stream its output; return what the manifest records."""
    target = results / BENCHMARKS[name][3]
    before = target.stat().st_mtime_ns if target.exists() else None
    with tempfile.TemporaryDirectory(prefix=f"cupool-{name}-") as tmp:
        cmd = command(name, quick, tmp)
        shown = " ".join(["python", *(Path(c).relative_to(ROOT).as_posix()
                                      if c.startswith(str(ROOT)) else c for c in cmd[1:])])
        shown = shown.replace(tmp, "OUT_DIR")
        print(f"== {name}: {shown}", flush=True)
        began = time.perf_counter()
        if name in STDOUT_KEPT:
            proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
            sys.stdout.write(proc.stdout)
            if proc.returncode == 0:
                target.write_text(proc.stdout)
        else:
            proc = subprocess.run(cmd, cwd=ROOT)
        seconds = time.perf_counter() - began
    after = target.stat().st_mtime_ns if target.exists() else None
    print(f"== {name}: exit {proc.returncode} in {seconds:.1f} s", flush=True)
    return {"command": shown, "returncode": proc.returncode, "seconds": round(seconds, 2),
            "results_file": target.name, "results_updated": after is not None and after != before}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="pass --quick where supported (capture: --small)")
    parser.add_argument("--only", help=f"comma-separated subset of: {', '.join(BENCHMARKS)}")
    parser.add_argument("--render-only", action="store_true",
                        help="run nothing: redraw the figures and rebuild REPORT.md")
    parser.add_argument("--no-figures", action="store_true", help="do not (re)draw the PNGs")
    parser.add_argument("--results", type=Path, default=report.RESULTS,
                        help="results directory (default: bench/results)")
    args = parser.parse_args(argv)
    results = args.results
    results.mkdir(parents=True, exist_ok=True)
    failed = []
    if not args.render_only:
        names = selected(args.only)
        manifest_path = results / "run_all.json"
        manifest = (json.loads(manifest_path.read_text()) if manifest_path.exists()
                    and args.only else {"benchmarks": {}})
        manifest.update(machine=machine(), mode="quick" if args.quick else "full",
                        started=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        for name in names:
            entry = run_one(name, args.quick, results)
            manifest["benchmarks"][name] = entry
            manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
            if entry["returncode"] != 0:
                failed.append(name)
    else:
        manifest_path = results / "run_all.json"
        if not manifest_path.exists():
            manifest = {"machine": machine(), "mode": "render-only",
                        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "benchmarks": {}}
            manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    if not args.no_figures:
        print("== figures", flush=True)
        report.draw_figures(results)
    out = report.write_report(results)
    print(f"wrote {out}")
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
