"""What every picture shares: the lazy matplotlib import, byte units, deterministic saving.

matplotlib is an optional extra. It is imported only when a picture is drawn, and never
through ``pyplot``: a picture is a :class:`matplotlib.figure.Figure` on an Agg canvas, so
no display, no global backend switch and no figure registry are involved.

Output is byte-identical across runs of the same versions: SVG ids are salted with a
constant (``svg.hashsalt``), glyphs are paths, and no date or software metadata is
written (PNG's ``Software`` and SVG's ``Date`` are dropped).
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

from cupool.core.vocabulary import Plan, Trace
from cupool.errors import CupoolError, InputError, PlanFormatError
from cupool.io._files import write_atomic

FORMATS = (".png", ".svg")
"""Picture formats, told by the output file's extension."""
DPI = 120
"""Pixels per inch of PNG output."""
EXTRA = "viz"
"""The optional extra that installs matplotlib."""

_RC = {
    "svg.hashsalt": "cupool",
    "svg.fonttype": "path",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.fontsize": 8,
    "legend.framealpha": 0.9,
}


class MissingExtraError(CupoolError):
    """An optional dependency is not installed; the message says which extra to install."""

    def __init__(self, module: str, extra: str = EXTRA) -> None:
        self.module, self.extra = module, extra
        super().__init__(f"{module} is not installed; pictures need it: "
                         f"pip install 'cupool[{extra}]'")


class VizFormatError(InputError):
    """The output path's extension names no picture format cupool writes."""


def output_format(path: str | os.PathLike) -> str:
    """``"png"`` or ``"svg"`` from ``path``'s extension (case-insensitive); anything else
    raises :class:`VizFormatError` quoting it."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise VizFormatError(f"the picture format (={Path(path).suffix or 'no extension'!r}) "
                             f"is not one of {', '.join(FORMATS)}", path=str(path))
    return suffix[1:]


def matplotlib_modules():
    """``(matplotlib, Figure, FigureCanvasAgg)``, imported now; :class:`MissingExtraError`
    when matplotlib is absent."""
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingExtraError("matplotlib") from None
    return matplotlib, Figure, FigureCanvasAgg


@contextlib.contextmanager
def figure(path: str | os.PathLike, width_in: float, height_in: float, **subplots):
    """Yield ``(figure, axes)`` drawn under cupool's style and write it to ``path`` (PNG or
    SVG by extension, atomically) when the block ends without error."""
    fmt = output_format(path)
    matplotlib, Figure, FigureCanvasAgg = matplotlib_modules()
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(**subplots)
        yield fig, axes
        buffer = io.BytesIO()
        metadata = {"Software": None} if fmt == "png" else {"Date": None, "Creator": None}
        fig.savefig(buffer, format=fmt, metadata=metadata)
    write_atomic(path, buffer.getvalue())


BYTE_UNITS = (("B", 1), ("KiB", 1024), ("MiB", 1024**2), ("GiB", 1024**3), ("TiB", 1024**4))


def byte_unit(largest_bytes: int) -> tuple[str, int]:
    """The binary unit (name, bytes) that shows ``largest_bytes`` as a number below 1024."""
    name, scale = BYTE_UNITS[0]
    for unit_name, unit_scale in BYTE_UNITS:
        if largest_bytes >= unit_scale:
            name, scale = unit_name, unit_scale
    return name, scale


def time_unit(largest_us: float) -> tuple[str, float]:
    """``("ms", 1000.0)`` for spans of 10 ms and more, else ``("µs", 1.0)``."""
    return ("ms", 1000.0) if largest_us >= 10_000 else ("µs", 1.0)


def check_plan(trace: Trace, plan: Plan) -> None:
    """Refuse a plan of another trace, or one without any placement to draw."""
    if plan.trace_digest != trace.digest():
        raise PlanFormatError(f"the plan is for trace {plan.trace_name!r} "
                              f"(digest {plan.trace_digest}), not for {trace.name!r} "
                              f"(digest {trace.digest()})")
    if not plan.placements and not plan.residencies:
        raise InputError(f"the plan has no placement to draw (status {plan.status.value})")
