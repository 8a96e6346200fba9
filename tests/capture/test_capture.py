"""Capture from PyTorch: the trace agrees with torch's own memory accounting.

Small configurations only (each capture takes about a second). The reference peak is
``torch.distributed._tools.mem_tracker.MemTracker`` run on real CPU tensors; the capture
runs under ``FakeTensorMode`` and allocates nothing.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch.distributed._tools.mem_tracker import MemTracker  # noqa: E402

from cupool.capture import CaptureOptions, capture_model, tracer  # noqa: E402
from cupool.capture.models import MODELS, model_spec  # noqa: E402
from cupool.capture.roofline import DEVICE_PRESETS, RooflineModel, device_preset  # noqa: E402
from cupool.core.vocabulary import PERSISTENT  # noqa: E402
from cupool.errors import InputError  # noqa: E402
from cupool.io import load_trace, save_trace  # noqa: E402

CASES = [("resnet50", "train"), ("resnet50", "infer"), ("gpt2", "train"), ("llama", "train"),
         ("bert-base", "train"), ("mobilenetv2", "infer")]
_CACHE: dict = {}


def captured(model: str, mode: str):
    key = (model, mode)
    if key not in _CACHE:
        _CACHE[key] = capture_model(model, CaptureOptions(mode=mode, batch=2, small=True))
    return _CACHE[key]


def memtracker_peak(model: str, mode: str) -> int:
    """Peak live bytes of the same step on real CPU tensors, by torch's MemTracker."""
    torch.manual_seed(0)
    # building the workload runs the warm-up step
    workload = tracer.Workload(model, CaptureOptions(mode=mode, batch=2, small=True))
    tracker = MemTracker()
    tracker.track_external(workload.net, *workload.inputs.values(),
                           *([workload.optimizer] if workload.optimizer else []))
    with tracker:
        workload.run()
    return tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]


@pytest.mark.parametrize(("model", "mode"), CASES)
def test_peak_equals_memtracker_on_real_tensors(model, mode):
    assert captured(model, mode).lower_bound_bytes() == memtracker_peak(model, mode)


@pytest.mark.parametrize(("model", "mode"), [("resnet50", "train"), ("gpt2", "infer")])
def test_fake_capture_equals_real_tensor_recording(model, mode):
    fake = captured(model, mode)
    real = capture_model(model, CaptureOptions(mode=mode, batch=2, small=True, fake=False))
    assert [op.name for op in fake.ops] == [op.name for op in real.ops]
    assert [(b.size, b.start, b.end, b.uses, b.kind) for b in fake.buffers] == \
        [(b.size, b.start, b.end, b.uses, b.kind) for b in real.buffers]


@pytest.mark.parametrize(("model", "mode"), CASES)
def test_trace_invariants(model, mode):
    trace = captured(model, mode)
    n = trace.num_ops
    assert n > 0
    for buffer in trace.buffers:
        assert buffer.size > 0
        assert 0 <= buffer.start < buffer.end <= n
        assert list(buffer.uses) == sorted(set(buffer.uses))
        assert all(buffer.start <= use < buffer.end for use in buffer.uses)
        if buffer.kind == PERSISTENT:
            assert (buffer.start, buffer.end) == (0, n)
    for op in trace.ops:
        assert op.duration_us is not None and math.isfinite(op.duration_us)
        assert op.duration_us >= 0 and op.flops is not None and op.flops >= 0
    phases = {op.phase for op in trace.ops}
    assert phases == ({"fw", "bw", "opt"} if mode == "train" else {"fw"})
    assert any(op.flops > 0 for op in trace.ops)


def test_persistent_buffers_are_parameters_buffers_inputs_and_optimizer_state():
    trace = captured("resnet50", "train")
    net = model_spec("resnet50").build(True)
    persistent = [b for b in trace.buffers if b.kind == PERSISTENT]
    params = sum(p.numel() * 4 for p in net.parameters())
    stats = sum(b.numel() * b.element_size() for b in net.buffers())
    inputs = 2 * 3 * 32 * 32 * 4 + 2 * 8  # two 32x32 images, two int64 labels
    momentum = params  # SGD's momentum buffers, one per parameter
    assert sum(b.size for b in persistent) == params + stats + inputs + momentum
    assert {b.name.split(":")[0] for b in persistent} == {"param", "buffer", "input",
                                                          "opt_state"}
    # gradients are temporaries: born in backward, freed by zero_grad at the very end
    grads = [b for b in trace.buffers if b.name.startswith("grad:")]
    assert len(grads) == len(list(net.parameters()))
    assert all(b.kind != PERSISTENT and b.end == trace.num_ops for b in grads)


def test_capture_records_which_ops_write_each_buffer():
    # inference: nothing writes a weight, so every persistent buffer is read-only
    infer = captured("resnet50", "infer")
    persistent = [b for b in infer.buffers if b.kind == PERSISTENT]
    assert persistent and all(b.read_only for b in persistent)
    # training: the optimizer's in-place update writes every parameter (and SGD's
    # momentum), in the optimizer phase; the step's inputs stay read-only
    train = captured("resnet50", "train")
    phase = {i: op.phase for i, op in enumerate(train.ops)}
    for b in train.buffers:
        assert b.writes is not None and set(b.writes) <= set(b.uses)
        if b.name.startswith(("param:", "opt_state:")):
            assert b.writes and phase[b.writes[-1]] == "opt", b.name
        if b.name.startswith("input:"):
            assert b.read_only, b.name
        if b.kind != PERSISTENT:
            assert b.writes[0] == b.start  # produced there


def test_transformers_train_with_adamw_and_its_step_counters():
    trace = captured("gpt2", "train")
    names = [b.name for b in trace.buffers if b.kind == PERSISTENT]
    assert any(n.endswith(".step") for n in names)
    assert any(n.endswith(".exp_avg_sq") for n in names)
    assert any(op.name.startswith("aten._foreach_addcdiv_") for op in trace.ops)
    sgd = capture_model("gpt2", CaptureOptions(batch=2, small=True, optimizer="sgd"))
    assert not any(op.name.startswith("aten._foreach_addcdiv_") for op in sgd.ops)


def test_a_tensor_made_inside_the_step_is_born_where_it_is_made():
    # AdamW makes its step increment with torch.tensor(1.0) inside optimizer.step()
    trace = captured("gpt2", "train")
    legacy = capture_model("gpt2", CaptureOptions(batch=2, small=True, lifted_from_start=True))
    lifted = [b for b in trace.buffers if b.name == "lifted"]
    assert [(b.size, b.end - b.start) for b in lifted] == [(4, 1)]
    assert trace.ops[lifted[0].start].name == "aten._foreach_add_.Tensor"
    moved = [(a, b) for a, b in zip(trace.buffers, legacy.buffers, strict=True) if a != b]
    assert len(moved) == 1 and moved[0][1].start == 0 and moved[0][1].end == lifted[0].end
    assert legacy.lower_bound_bytes() == trace.lower_bound_bytes() + 4


def test_module_tracker_only_delays_frees():
    tracked = captured("bert-base", "train")
    bare = capture_model("bert-base", CaptureOptions(batch=2, small=True, module_tracker=False))
    assert [op.name for op in bare.ops] == [op.name for op in tracked.ops]
    pairs = list(zip(bare.buffers, tracked.buffers, strict=True))
    assert all((a.size, a.start, a.uses) == (b.size, b.start, b.uses) for a, b in pairs)
    assert all(a.end <= b.end for a, b in pairs)
    # the input gradients of BertSelfOutput / BertOutput wait for their residual partner
    assert sum(a.end < b.end for a, b in pairs) >= 2


def test_round_trip_and_determinism(tmp_path):
    first = captured("gpt2", "train")
    second = capture_model("gpt2", CaptureOptions(batch=2, small=True))
    assert first == second
    path = tmp_path / "gpt2.json.gz"
    save_trace(first, path)
    loaded = load_trace(path)
    assert loaded.buffers == first.buffers
    assert [op.name for op in loaded.ops] == [op.name for op in first.ops]
    assert loaded.device == first.device
    assert loaded.lower_bound_bytes() == first.lower_bound_bytes()


@pytest.mark.parametrize("model", sorted(MODELS))
def test_every_model_infers(model):
    trace = capture_model(model, CaptureOptions(mode="infer", small=True))
    assert trace.lower_bound_bytes() > 0


def test_amp_capture_has_bfloat16_ops():
    trace = capture_model("gpt2", CaptureOptions(batch=2, small=True, amp=True))
    assert trace.lower_bound_bytes() < captured("gpt2", "train").lower_bound_bytes() * 2
    assert any(op.name.startswith("aten._to_copy") for op in trace.ops)


def test_roofline_formula():
    h100 = RooflineModel()
    assert h100.duration_us(0, 0) == 0.0
    # memory-bound: 3.35 GB at 3350 GB/s is 1 ms
    assert h100.duration_us(1, 3_350_000_000) == pytest.approx(1000.0)
    # compute-bound: 66.9 TFLOP of float32 is 1 s; bfloat16 at 989.4 TFLOPS
    assert h100.duration_us(66_900_000_000_000, 8) == pytest.approx(1e6)
    assert h100.duration_us(989_400_000_000, 8, "torch.bfloat16") == pytest.approx(1e3)
    # convolutions use TF32 by default (cuDNN), matmuls do not
    assert h100.duration_us(494_700_000_000, 8, conv=True) == pytest.approx(1e3)
    slow = RooflineModel(device_preset("A100-SXM"), efficiency=0.5, launch_overhead_us=2.0)
    assert slow.duration_us(0, 2_039_000) == pytest.approx(2.0 + 2.0)
    assert {"H100-SXM", "A100-SXM"} <= set(DEVICE_PRESETS)


def test_bad_input_is_refused_with_the_value():
    with pytest.raises(InputError, match=r"unknown model \(='alexnet'\).*resnet50"):
        capture_model("alexnet")
    with pytest.raises(InputError, match=r"unknown device preset \(='B200'\).*H100-SXM"):
        device_preset("B200")
    with pytest.raises(InputError, match=r"efficiency \(=0\)"):
        RooflineModel(efficiency=0)


# -- the bundled traces: a re-capture reproduces them buffer for buffer ---------------------

BUNDLED = Path(__file__).resolve().parents[2] / "cupool" / "data" / "traces"


def bundled_config(trace) -> dict:
    """The capture configuration a bundled trace's ``source`` line names."""
    source = trace.source
    return {"model": re.search(r"model=([\w-]+)", source).group(1),
            "mode": "train" if "training step" in source else "infer",
            "batch": int(re.search(r"batch=(\d+)", source).group(1)),
            "amp": "amp=True" in source}


@pytest.mark.parametrize("name", ["mobilenetv2_infer_b1", "resnet50_infer_b8"])
def test_recapture_reproduces_the_bundled_trace(name):
    bundled = load_trace(BUNDLED / f"{name}.trace.json.gz")
    config = bundled_config(bundled)
    trace = capture_model(config["model"], CaptureOptions(mode=config["mode"],
                                                          batch=config["batch"],
                                                          amp=config["amp"]))
    assert trace.lower_bound_bytes() == bundled.lower_bound_bytes()
    assert len(trace.buffers) == len(bundled.buffers)

    def persistent(t):
        return sum(b.size for b in t.buffers if b.kind == PERSISTENT)

    assert persistent(trace) == persistent(bundled)
    assert [op.name for op in trace.ops] == [op.name for op in bundled.ops]
    assert [op.flops for op in trace.ops] == [op.flops for op in bundled.ops]
    assert [(b.size, b.start, b.end, b.uses, b.kind) for b in trace.buffers] == \
        [(b.size, b.start, b.end, b.uses, b.kind) for b in bundled.buffers]


def test_small_models_have_the_reference_parameter_counts():
    # the published sizes: ResNet-50 25,557,032; MobileNetV2 3,504,872; GPT-2 small
    # 124,439,808; BERT-base with its MLM head 109,514,298 (shared weights counted once)
    from torch._subclasses.fake_tensor import FakeTensorMode

    from cupool.capture.models import parameter_count

    with FakeTensorMode():
        counts = {name: parameter_count(MODELS[name].build(False))
                  for name in ("resnet50", "mobilenetv2", "gpt2", "bert-base")}
    assert counts == {"resnet50": 25_557_032, "mobilenetv2": 3_504_872,
                      "gpt2": 124_439_808, "bert-base": 109_514_298}
