"""What a capture records and how: :class:`CaptureOptions`, checked when it is made.

Plain Python (no torch), so a caller can build and check the options before PyTorch is
imported; :func:`cupool.capture.capture_model` takes them with the model's name.
"""

from __future__ import annotations

from dataclasses import dataclass

from cupool.capture.roofline import RooflineModel
from cupool.errors import InputError

MODES = ("train", "infer")
"""What a capture records: one training step or one inference pass."""

OPTIMIZER_NAMES = ("sgd", "adamw")
"""Optimizers a training capture can step (the keys of
:data:`cupool.capture.models.OPTIMIZERS`)."""


@dataclass(frozen=True)
class CaptureOptions:
    """How to capture one model.

    mode: ``"train"`` (an unrecorded warm-up step so the optimizer's state exists, then the
      recorded step: forward and loss, backward, the optimizer's step and ``zero_grad()``)
      or ``"infer"`` (one forward pass under ``torch.no_grad()`` in ``eval()`` mode).
    batch: samples per step (an int >= 1).
    small: the model's tiny configuration (same structure, fewer layers, widths of 8-64,
      small inputs) instead of its published size.
    amp: run the forward pass and the loss under CPU autocast to bfloat16.
    optimizer: one of :data:`OPTIMIZER_NAMES`, overriding the model's own (``"sgd"`` for the
      convolutional networks, ``"adamw"`` for the transformers); ``None``: the model's own.
    module_tracker: run the step under ``torch.utils.module_tracker.ModuleTracker``, which
      holds input gradients a little longer, as when the bundled traces were captured
      (see :class:`cupool.capture.tracer.Workload`).
    fake: record under ``FakeTensorMode`` (no memory); ``False`` runs on real CPU tensors
      (small configurations only: it allocates).
    seed: ``torch.manual_seed`` before the model is built.
    cost_model: the roofline model that turns each op's FLOPs and bytes into a duration;
      ``None``: :class:`~cupool.capture.roofline.RooflineModel` ``()`` (H100-SXM).
    lifted_from_start: take tensors made from Python data inside the step as live from op 0,
      as the capture that made the bundled traces did (see
      :func:`cupool.capture.tracer.record`).

    A bad ``mode``, ``batch`` or ``optimizer`` raises :class:`~cupool.errors.InputError`
    quoting the value.
    """

    mode: str = "train"
    batch: int = 1
    small: bool = False
    amp: bool = False
    optimizer: str | None = None
    module_tracker: bool = True
    fake: bool = True
    seed: int = 0
    cost_model: RooflineModel | None = None
    lifted_from_start: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InputError(f"mode (={self.mode!r}) must be one of {', '.join(MODES)}")
        batch = self.batch
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise InputError(f"batch (={batch!r}) must be an integer >= 1")
        if self.optimizer and self.optimizer not in OPTIMIZER_NAMES:
            raise InputError(f"optimizer (={self.optimizer!r}) must be one of "
                             f"{', '.join(OPTIMIZER_NAMES)}")
