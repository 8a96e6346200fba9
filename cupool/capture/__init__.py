"""Capture real workloads from PyTorch as cupool traces (optional extra: ``torch==2.13.0``).

- :mod:`.roofline`: the roofline model of op durations and GPU presets (plain Python, no torch);
- :mod:`.options`: :class:`CaptureOptions`, what a capture records and how (no torch);
- :mod:`.tracer`: the recorder (``FakeTensorMode`` + a dispatch mode + storage weak
  references) and :func:`~cupool.capture.tracer.capture_model`;
- :mod:`.models`: ResNet-50, MobileNetV2, GPT-2 small, BERT-base, ViT-B/16 and a LLaMA-style
  decoder.

Importing this package does not import torch; :func:`capture_model` does, and raises
:class:`~cupool.errors.CupoolError` with the install command when torch is missing.
"""

from __future__ import annotations

from cupool.capture.options import MODES, OPTIMIZER_NAMES, CaptureOptions
from cupool.capture.roofline import DEVICE_PRESETS, DevicePreset, RooflineModel, device_preset
from cupool.errors import CupoolError

TORCH_REQUIREMENT = "torch==2.13.0"
"""The PyTorch release the capture is written and tested against."""

MODEL_NAMES = ("resnet50", "mobilenetv2", "gpt2", "bert-base", "vit-b16", "llama")
"""Names :func:`capture_model` accepts (the keys of :data:`cupool.capture.models.MODELS`)."""


def capture_model(model: str, options: CaptureOptions | None = None):
    """Capture one training step or inference pass of ``model`` as a
    :class:`~cupool.core.vocabulary.Trace`, as ``options`` (a :class:`CaptureOptions`: mode,
    batch, size, ``amp``, optimizer, cost model...) say; see
    :func:`cupool.capture.tracer.capture_model`."""
    try:
        from cupool.capture import tracer
    except ImportError as exc:
        raise CupoolError(f"capturing needs PyTorch ({exc}); install it with "
                          f"pip install '{TORCH_REQUIREMENT}'") from None
    return tracer.capture_model(model, options)


__all__ = ["DEVICE_PRESETS", "MODEL_NAMES", "MODES", "OPTIMIZER_NAMES", "TORCH_REQUIREMENT",
           "CaptureOptions", "DevicePreset", "RooflineModel", "capture_model", "device_preset"]
