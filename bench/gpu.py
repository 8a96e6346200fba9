"""The GPU self-test as a benchmark driver: ``python bench/gpu.py [options]`` is
``cupool selftest [options]`` (``--device cuda`` unless given), writing
``bench/results/gpu/selftest_<device>.json`` and ``.md``.

Usage::

    python bench/gpu.py                               # on a GPU: everything, about 9 minutes
    python bench/gpu.py --device emulated --stress-minutes 0.5   # the harness, no GPU

Without a GPU, ``--device cuda`` exits 2 with one line saying so.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cupool.cli import main  # noqa: E402

if __name__ == "__main__":
    arguments = sys.argv[1:]
    if not any(a == "--out" or a.startswith("--out=") for a in arguments):
        arguments += ["--out", str(ROOT / "bench" / "results" / "gpu")]
    sys.exit(main(["selftest", *arguments]))
