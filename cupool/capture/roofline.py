"""The roofline model that gives captured ops a duration on a chosen GPU (the planner's
model of copies and links is a different thing: :mod:`cupool.sim.cost`).

An op that does ``flops`` floating-point operations and moves ``bytes_moved`` bytes
between HBM and the chip takes::

    duration_us = max(flops / peak_flops(dtype), bytes_moved / hbm_bytes_per_s)
                  / efficiency * 1e6  +  launch_overhead_us

- ``flops`` follow :mod:`torch.utils.flop_counter` (a multiply-add counts 2; only matmuls,
  convolutions and attention have a formula there, every other op counts 0 and is
  memory-bound);
- ``bytes_moved`` is every distinct tensor the op reads plus every tensor it writes
  (an in-place op reads and writes its operand: ``relu_`` on 100 MB moves 200 MB);
  allocation and view ops (``empty``, ``view``...) move nothing;
- ``peak_flops(dtype)`` is the device's dense peak for the dtype of the op's first
  floating-point operand (tensor-core peak for 16/8-bit types). float32 follows PyTorch's
  CUDA defaults: convolutions run at the TF32 peak (``torch.backends.cudnn.allow_tf32``
  is True), matmuls and attention at the plain FP32 peak
  (``torch.backends.cuda.matmul.allow_tf32`` is False); ``tf32_conv`` / ``tf32_matmul``
  change that;
- ``efficiency`` in ``(0, 1]`` divides both roofs (1 = the bound itself: a lower bound
  on real GPU time); ``launch_overhead_us`` is added to every op that does work.

Worked examples (H100-SXM, float32, efficiency 1): a matmul with 28.99 GFLOP reading and
writing 0.2 GB takes ``max(28.99e9 / 66.9e12, 0.2e9 / 3.35e12)`` s = ``max(433.3, 59.7)`` µs
= 433.3 µs (compute-bound); a convolution with 7.55 GFLOP reading 19.3 MB and writing
102.8 MB takes ``max(7.55e9 / 494.7e12, 122.1e6 / 3.35e12)`` s = ``max(15.3, 36.4)`` µs =
36.4 µs (memory-bound).

Preset numbers (:data:`DEVICE_PRESETS`) are dense (no 2:4 sparsity) peaks in TFLOPS and
HBM bandwidths in GB/s (GB = 1e9 B) from NVIDIA's datasheets: "NVIDIA H100 Tensor Core
GPU" datasheet (SXM5 and PCIe columns), "NVIDIA A100 Tensor Core GPU" datasheet (80GB SXM
and 40GB PCIe columns), "NVIDIA V100 Tensor Core GPU" datasheet (SXM2), "NVIDIA L4 Tensor
Core GPU" datasheet. Host links: PCIe Gen5 x16 ≈ 55 GB/s, Gen4 ≈ 25 GB/s, Gen3 ≈ 12 GB/s
pinned (the same figures as :data:`cupool.sim.cost.LINK_PRESETS`).

This module is plain Python (no torch import): dtypes are given by name
(``"float32"``, ``"bfloat16"``; a ``"torch."`` prefix is accepted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from cupool.core.vocabulary import Device
from cupool.errors import InputError

DTYPE_CLASSES = ("float64", "float32", "tfloat32", "bfloat16", "float16", "float8", "int8")
"""Keys of :attr:`DevicePreset.peak_tflops`; every torch dtype maps onto one of them."""


@dataclass(frozen=True)
class DevicePreset:
    """One GPU: dense peak TFLOPS per dtype class, HBM bandwidth (GB/s), the host link
    bandwidth (GB/s per direction) and the number of copy engines."""

    name: str
    peak_tflops: dict[str, float]
    hbm_gbps: float
    link_gbps: float
    copy_engines: int = 2
    source: str = ""

    def device(self) -> Device:
        """The :class:`~cupool.core.vocabulary.Device` a trace records for this preset."""
        return Device(self.name, self.hbm_gbps, self.link_gbps, self.link_gbps,
                      self.copy_engines)


DEVICE_PRESETS: dict[str, DevicePreset] = {
    preset.name: preset
    for preset in (
        DevicePreset("H100-SXM", {"float64": 66.9, "float32": 66.9, "tfloat32": 494.7,
                                  "bfloat16": 989.4, "float16": 989.4, "float8": 1978.9,
                                  "int8": 1978.9},
                     hbm_gbps=3350, link_gbps=55,
                     source="NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column"),
        DevicePreset("H100-PCIe", {"float64": 51.0, "float32": 51.0, "tfloat32": 378.0,
                                   "bfloat16": 756.0, "float16": 756.0, "float8": 1513.0,
                                   "int8": 1513.0},
                     hbm_gbps=2000, link_gbps=55,
                     source="NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe column"),
        DevicePreset("A100-SXM", {"float64": 19.5, "float32": 19.5, "tfloat32": 156.0,
                                  "bfloat16": 312.0, "float16": 312.0, "float8": 312.0,
                                  "int8": 624.0},
                     hbm_gbps=2039, link_gbps=25,
                     source="NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column "
                            "(no FP8 units: FP8 runs at the FP16 rate)"),
        DevicePreset("A100-PCIe", {"float64": 19.5, "float32": 19.5, "tfloat32": 156.0,
                                   "bfloat16": 312.0, "float16": 312.0, "float8": 312.0,
                                   "int8": 624.0},
                     hbm_gbps=1555, link_gbps=25,
                     source="NVIDIA A100 Tensor Core GPU datasheet, A100 40GB PCIe column"),
        DevicePreset("V100-SXM", {"float64": 7.8, "float32": 15.7, "tfloat32": 15.7,
                                  "bfloat16": 15.7, "float16": 125.0, "float8": 125.0,
                                  "int8": 62.0},
                     hbm_gbps=900, link_gbps=12,
                     source="NVIDIA V100 Tensor Core GPU datasheet, V100 SXM2 column "
                            "(no BF16 tensor cores: BF16 runs at the FP32 rate)"),
        DevicePreset("L4", {"float64": 0.5, "float32": 30.3, "tfloat32": 60.0,
                            "bfloat16": 121.0, "float16": 121.0, "float8": 242.5,
                            "int8": 242.5},
                     hbm_gbps=300, link_gbps=25,
                     source="NVIDIA L4 Tensor Core GPU datasheet (dense = half the sparse "
                            "figures; GDDR6)"),
    )
}
"""The device presets, by name. Capture's default is ``"H100-SXM"``."""

_DTYPE_CLASS = {
    "float64": "float64", "double": "float64", "complex128": "float64",
    "float32": "float32", "float": "float32", "complex64": "float32",
    "bfloat16": "bfloat16", "float16": "float16", "half": "float16",
    "int8": "int8", "uint8": "int8",
}


def dtype_class(dtype: str) -> str:
    """The :data:`DTYPE_CLASSES` entry of a dtype name: ``"torch.bfloat16"`` → ``"bfloat16"``;
    float8 variants → ``"float8"``; any other (integer, bool) dtype → ``"float32"``."""
    name = dtype.removeprefix("torch.")
    if name.startswith("float8"):
        return "float8"
    return _DTYPE_CLASS.get(name, "float32")


def device_preset(name: str) -> DevicePreset:
    """The preset called ``name``; an unknown name raises :class:`InputError` listing
    the known ones."""
    preset = DEVICE_PRESETS.get(name)
    if preset is None:
        raise InputError(f"unknown device preset (={name!r}); known presets: "
                         f"{', '.join(DEVICE_PRESETS)}")
    return preset


@dataclass(frozen=True)
class RooflineModel:
    """Op durations on ``preset`` (see the module docstring for the formula).

    ``efficiency`` in ``(0, 1]`` scales both roofs; ``launch_overhead_us >= 0`` is added to
    every op that moves bytes or does FLOPs; ``tf32_conv`` / ``tf32_matmul`` let float32
    convolutions / other FLOPs run at the TF32 tensor-core peak (PyTorch's CUDA defaults:
    True / False).
    """

    preset: DevicePreset = field(default_factory=lambda: DEVICE_PRESETS["H100-SXM"])
    efficiency: float = 1.0
    launch_overhead_us: float = 0.0
    tf32_conv: bool = True
    tf32_matmul: bool = False

    def __post_init__(self):
        eff = self.efficiency
        if isinstance(eff, bool) or not isinstance(eff, int | float) or not 0 < eff <= 1:
            raise InputError(f"efficiency (={eff!r}) must be a number in (0, 1]")
        launch = self.launch_overhead_us
        if (isinstance(launch, bool) or not isinstance(launch, int | float)
                or not math.isfinite(launch) or launch < 0):
            raise InputError(f"launch_overhead_us (={launch!r}) must be a finite number >= 0")

    @classmethod
    def for_device(cls, name: str, **options) -> RooflineModel:
        """The model for the preset called ``name`` (see :func:`device_preset`)."""
        return cls(device_preset(name), **options)

    def peak_flops(self, dtype: str, conv: bool = False) -> float:
        """Dense peak FLOP/s for ops whose operands have ``dtype`` (``conv``: a convolution)."""
        klass = dtype_class(dtype)
        if klass == "float32" and (self.tf32_conv if conv else self.tf32_matmul):
            klass = "tfloat32"
        return self.preset.peak_tflops[klass] * 1e12

    def duration_us(self, flops: int, bytes_moved: int, dtype: str = "float32",
                    conv: bool = False) -> float:
        """``max(flops / peak, bytes_moved / HBM) / efficiency`` in µs, plus the launch
        overhead for ops that do anything (an op with no FLOPs and no bytes takes 0)."""
        if flops < 0 or bytes_moved < 0:
            raise InputError(f"flops (={flops!r}) and bytes_moved (={bytes_moved!r}) "
                             "must be >= 0")
        if flops == 0 and bytes_moved == 0:
            return 0.0
        seconds = max(flops / self.peak_flops(dtype, conv),
                      bytes_moved / (self.preset.hbm_gbps * 1e9))
        return seconds / self.efficiency * 1e6 + self.launch_overhead_us

    def describe(self) -> str:
        """One line for a trace's ``source``: device, efficiency, overhead."""
        tf32 = {(True, False): "", (True, True): ", TF32 matmuls",
                (False, False): ", no TF32 convolutions",
                (False, True): ", TF32 matmuls, no TF32 convolutions"}[
                    (self.tf32_conv, self.tf32_matmul)]
        return (f"{self.preset.name} roofline estimates (efficiency {self.efficiency:g}, "
                f"launch overhead {self.launch_overhead_us:g} µs{tf32})")
