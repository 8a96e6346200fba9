"""Pictures: valid PNG and SVG files, one rectangle per buffer or residency, byte-identical
SVGs across runs, swapping plans drawn, and typed errors for bad extensions, foreign plans
and a missing matplotlib."""

from __future__ import annotations

import json
import pickle
import sys
import xml.etree.ElementTree as ET
from functools import lru_cache
from pathlib import Path

import pytest

from cupool.errors import InputError
from cupool.io import load_trace, save_plan
from cupool.planning import plan
from cupool.viz import (
    MissingExtraError,
    VizFormatError,
    plot_layout,
    plot_memory,
    plot_timeline,
    viz,
)
from cupool.viz.layout import off_device_bytes
from cupool.viz.memory import resident_bytes_per_op
from cupool.viz.timeline import stall_spans
from tests.conftest import tiny_document

pytest.importorskip("matplotlib")

TRACES = Path(__file__).resolve().parents[2] / "cupool" / "data" / "traces"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SVG_NS = "{http://www.w3.org/2000/svg}"


@lru_cache(maxsize=1)
def _swapping():
    """ResNet-50 training at 70 % of its lower bound: capuchin swaps and recomputes."""
    from cupool.planning.budget import plan_with_budget

    trace = load_trace(TRACES / "resnet50_train_b32_fp32.trace.json.gz")
    result = plan_with_budget(trace, int(trace.lower_bound_bytes() * 0.7), "capuchin")
    assert result.feasible
    return result.trace, result.plan


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(tiny_document()))
    trace = load_trace(path)
    return path, trace, plan(trace, "greedy-size")


def _is_png(path: Path, min_bytes: int = 5_000) -> bool:
    data = path.read_bytes()
    return data.startswith(PNG_MAGIC) and len(data) > min_bytes


def _svg_groups(path: Path, prefix: str) -> list[str]:
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG_NS}svg"
    return [g.get("id") for g in root.iter(f"{SVG_NS}g") if g.get("id", "").startswith(prefix)]


PLOTS = {
    "layout": lambda trace, p, path: plot_layout(trace, p, path),
    "memory": lambda trace, p, path: plot_memory(trace, p, path),
    "timeline": lambda trace, p, path: plot_timeline(trace, p, None, path),
}


@pytest.mark.parametrize("kind", list(PLOTS))
def test_each_picture_writes_png_and_identical_svgs(kind, tiny, tmp_path):
    _, trace, static_plan = tiny
    PLOTS[kind](trace, static_plan, tmp_path / "a.png")
    assert _is_png(tmp_path / "a.png")
    for name in ("a.svg", "b.svg"):
        PLOTS[kind](trace, static_plan, tmp_path / name)
    first = (tmp_path / "a.svg").read_bytes()
    assert first == (tmp_path / "b.svg").read_bytes()
    assert b"<dc:date>" not in first
    ET.fromstring(first)


def test_static_layout_has_one_rectangle_per_buffer(tiny, tmp_path):
    _, trace, static_plan = tiny
    plot_layout(trace, static_plan, tmp_path / "layout.SVG")  # extensions are case-blind
    groups = _svg_groups(tmp_path / "layout.SVG", "buffer-")
    assert sorted(groups) == [f"buffer-{b.id}" for b in trace.buffers]


def test_swapping_plan_pictures(tmp_path):
    trace, swapping_plan = _swapping()
    plot_layout(trace, swapping_plan, tmp_path / "layout.svg")
    groups = _svg_groups(tmp_path / "layout.svg", "residency-")
    assert len(groups) == len(set(groups)) == len(swapping_plan.residencies)
    plot_layout(trace, swapping_plan, tmp_path / "layout.png")
    peaks = plot_memory(trace, swapping_plan, tmp_path / "memory.png")
    summary = plot_timeline(trace, swapping_plan, None, tmp_path / "timeline.png")
    for name in ("layout.png", "memory.png", "timeline.png"):
        assert _is_png(tmp_path / name, 20_000), name
    assert peaks["planned_resident_peak_bytes"] <= swapping_plan.capacity_bytes
    assert peaks["cupy_peak_reserved_bytes"] > peaks["lower_bound_bytes"]
    assert summary["feasible"] and summary["swapped_bytes"] > 0


def test_swapping_timeline_svg_is_byte_identical(tmp_path):
    trace, swapping_plan = _swapping()
    for name in ("a.svg", "b.svg"):
        plot_timeline(trace, swapping_plan, None, tmp_path / name)
    assert (tmp_path / "a.svg").read_bytes() == (tmp_path / "b.svg").read_bytes()


def test_the_data_behind_the_pictures(tiny):
    _, trace, static_plan = tiny
    assert resident_bytes_per_op(trace, static_plan) == [24, 24, 24, 24]  # 8 + 16 each op
    assert off_device_bytes(trace, static_plan) == ([0] * 4, [0] * 4)
    from cupool.sim.simulator import SimReport

    report = SimReport(True, 9.0, 5.0, 0.8, 0, 0, 1.0, 3.0, op_times=((0, 2, 3), (3, 4, 5)),
                       copies=((7, "h2d", 8, 0, 0, 9.0),), recomputes=((7, 1, 3.5, 4),))
    # op 0 waited [0, 2); op 1 waited [3, 3.5) before its recompute; the copy ran on past
    # the last op until 9.
    assert stall_spans(report) == [(0, 2), (3, 3.5), (5, 9.0)]


def test_bad_extension_foreign_plan_and_missing_matplotlib(tiny, tmp_path, monkeypatch):
    _, trace, static_plan = tiny
    with pytest.raises(VizFormatError, match=r"\(='\.jpg'\)"):
        plot_layout(trace, static_plan, tmp_path / "x.jpg")
    with pytest.raises(VizFormatError, match="no extension"):
        plot_memory(trace, static_plan, tmp_path / "x")
    other = load_trace(TRACES / "mobilenetv2_infer_b1.trace.json.gz")
    with pytest.raises(InputError, match="not for"):
        plot_layout(other, static_plan, tmp_path / "x.png")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'cupool\[viz\]'") as caught:
        plot_layout(trace, static_plan, tmp_path / "x.png")
    again = pickle.loads(pickle.dumps(caught.value))
    assert (again.module, again.extra, str(again)) == ("matplotlib", "viz", str(caught.value))
    assert not (tmp_path / "x.png").exists()


def test_viz_plans_when_no_plan_is_given_and_reads_a_plan_file(tiny, tmp_path):
    path, _, static_plan = tiny
    result = viz(path, out=tmp_path / "auto.png", kind="memory")
    assert result["plan"] == "solver auto" and result["format"] == "png"
    assert _is_png(tmp_path / "auto.png")
    save_plan(static_plan, tmp_path / "plan.json")
    result = viz(path, tmp_path / "plan.json", out=tmp_path / "given.svg", kind="timeline")
    assert result["plan"] == "file" and result["arena_bytes"] == static_plan.arena_bytes
    ET.parse(tmp_path / "given.svg")
    result = viz(path, out=tmp_path / "budget.svg", budget="100%")
    assert result["plan"].startswith("budget ")


def test_viz_checks_kind_and_extension_before_reading(tmp_path):
    with pytest.raises(InputError, match="kind"):
        viz(tmp_path / "missing.json", out=tmp_path / "x.png", kind="pie")
    with pytest.raises(VizFormatError):
        viz(tmp_path / "missing.json", out=tmp_path / "x.pdf")
