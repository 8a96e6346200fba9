"""Self-contained PyTorch models to capture: ResNet-50, MobileNetV2, GPT-2 small, BERT-base,
ViT-B/16 and a LLaMA-style decoder (RMSNorm, rotary embeddings, SwiGLU).

Each :class:`ModelSpec` builds the model at its published size (``small=False``) or at a
tiny size for tests (``small=True``: same structure, fewer layers, widths of 8-64), makes the
step's inputs, computes the training loss and picks the optimizer. Nothing here downloads
weights; initialisation is PyTorch's default (the values do not matter to a capture).

The convolutional networks and the two language models follow the module structure and the
Python code of the reference implementations line for line, because a capture sees not only
the aten ops but also *when* tensors die, which depends on which Python variables hold them
and on module boundaries:

- ResNet-50: torchvision's ``resnet50`` (v1.5: stride on the 3×3 convolution) with its
  children flattened into one ``nn.Sequential`` (stem, the 16 bottlenecks, pooling,
  ``Flatten``, ``fc``), residual sum out of place (``relu(out + shortcut)``);
- MobileNetV2: torchvision's ``mobilenet_v2`` as ``Sequential(features, pool, Flatten,
  Dropout, Linear)``;
- GPT-2 small: Hugging Face's ``GPT2LMHeadModel`` (``Conv1D`` projections, ``gelu_new``,
  SDPA causal attention, tied ``lm_head``, the causal-LM loss inside ``forward``), without
  dropout and without a key/value cache;
- BERT-base: Hugging Face's ``BertForMaskedLM`` (SDPA attention without attention dropout,
  hidden dropout 0.1, token-type ids gathered from a buffer, tied decoder), the
  masked-LM cross-entropy over every position outside the model.

Captured with :func:`cupool.capture.capture_model`, these four reproduce the eight bundled
traces of ``cupool/data/traces`` op for op and buffer for buffer, except AdamW's 4-byte step
increment in the three transformer traces (``lifted_from_start`` in
:func:`cupool.capture.tracer.record`); see ``tests/capture/test_capture.py`` and
``bench/capture.py --bundled``.

Published sizes: ResNet-50 (25.6M: bottleneck stages 3-4-6-3, 224×224, 1000 classes);
MobileNetV2 (3.5M, width 1.0); GPT-2 small (124M: 12 layers, d=768, 12 heads, 1024 positions,
vocab 50257); BERT-base (110M: 12 layers, d=768, 12 heads, FFN 3072, vocab 30522, 512
positions); ViT-B/16 (86M: 224×224 in 16×16 patches, 12 layers, d=768, 12 heads, MLP 3072);
the LLaMA-style decoder is a 12-layer d=768 model with 12 query / 4 key-value heads, SwiGLU
FFN 2048, vocab 32000 (GPT-2-small sized, LLaMA's architecture).

The models live in one module per family; this package's top level is the registry
(:data:`MODELS`, :func:`model_spec`, :data:`OPTIMIZERS`) the tracer reads:

    convnets.py      ResNet-50 and MobileNetV2 (torchvision layout)
    gpt2.py          GPT-2 small with its LM head and the causal-LM loss (Hugging Face layout)
    bert.py          BERT-base with its masked-LM head (Hugging Face layout)
    transformer.py   the generic block (LayerNorm or RMSNorm, GELU MLP or SwiGLU, rotary
                     positions, grouped key/value heads) and ViT-B/16 and the LLaMA-style
                     decoder built from it
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from cupool.capture.models.bert import Bert
from cupool.capture.models.convnets import MobileNetV2, ResNet
from cupool.capture.models.gpt2 import GPT2, causal_lm_loss
from cupool.capture.models.transformer import Llama, ViT
from cupool.errors import InputError


@dataclass(frozen=True)
class ModelSpec:
    """How to build, feed and train one model.

    ``build(small)`` returns the module; ``inputs(batch, small, train)`` the step's input
    tensors by name (created on the default device: inside ``FakeTensorMode`` they are fake;
    training adds the labels when the model has separate ones); ``loss(net, inputs)`` runs
    the forward pass and the training loss; ``infer(net, inputs)`` the inference forward
    pass; ``optimizer`` names the optimizer of :data:`OPTIMIZERS` its training step uses.
    """

    name: str
    build: Callable[[bool], nn.Module]
    inputs: Callable[[int, bool, bool], dict[str, torch.Tensor]]
    loss: Callable[[nn.Module, dict[str, torch.Tensor]], torch.Tensor]
    infer: Callable[[nn.Module, dict[str, torch.Tensor]], torch.Tensor]
    optimizer: str
    description: str


OPTIMIZERS: dict[str, Callable[[object], torch.optim.Optimizer]] = {
    # torchvision's classification recipe for the convolutional networks
    "sgd": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-4,
                                          foreach=True),
    # the transformers' usual choice, PyTorch's defaults (lr 1e-3, weight decay 0.01)
    "adamw": lambda params: torch.optim.AdamW(params, foreach=True),
}
"""Optimizers by name (both use the ``foreach`` multi-tensor kernels)."""


def _images(side: int, classes: int):
    def make(n: int, small: bool, train: bool) -> dict[str, torch.Tensor]:
        size = 32 if small else side
        tensors = {"input": torch.randn(n, 3, size, size)}
        if train:
            tensors["labels"] = torch.randint(0, 10 if small else classes, (n,))
        return tensors
    return make


def _tokens(seq: int, vocab: int):
    def make(n: int, small: bool, train: bool) -> dict[str, torch.Tensor]:
        length, words = (16, 128) if small else (seq, vocab)
        return {"input_ids": torch.randint(0, words, (n, length))}
    return make


def _classify(net, inputs):
    return F.cross_entropy(net(inputs["input"]), inputs["labels"])


def _masked_lm(net, inputs):
    ids = inputs["input_ids"]
    scores = net(ids)
    return F.cross_entropy(scores.view(-1, scores.shape[-1]), ids.view(-1))


MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in (
    ModelSpec("resnet50",
              lambda small: ResNet((1, 1, 1, 1), 8, 10) if small else ResNet(),
              _images(224, 1000), _classify, lambda net, x: net(x["input"]), "sgd",
              "ResNet-50 (torchvision layout), 224×224 images, 1000 classes"),
    ModelSpec("mobilenetv2",
              lambda small: MobileNetV2(0.25, 10) if small else MobileNetV2(),
              _images(224, 1000), _classify, lambda net, x: net(x["input"]), "sgd",
              "MobileNetV2 (torchvision layout), 224×224 images, 1000 classes"),
    ModelSpec("gpt2",
              lambda small: GPT2(128, 16, 32, 2, 2) if small else GPT2(),
              _tokens(1024, 50257),
              lambda net, x: net(x["input_ids"], labels=x["input_ids"])[0],
              lambda net, x: net(x["input_ids"]), "adamw",
              "GPT-2 small (124M, Hugging Face layout), causal LM loss, 1024 tokens"),
    ModelSpec("bert-base",
              lambda small: Bert(128, 16, 32, 2, 2) if small else Bert(),
              _tokens(512, 30522), _masked_lm, lambda net, x: net(x["input_ids"]), "adamw",
              "BERT-base (110M, Hugging Face layout) with MLM head, 512 tokens"),
    ModelSpec("vit-b16",
              lambda small: ViT(32, 8, 32, 2, 2, 10) if small else ViT(),
              _images(224, 1000), _classify, lambda net, x: net(x["input"]), "adamw",
              "ViT-B/16 (86M), 224×224 images"),
    ModelSpec("llama",
              lambda small: Llama(128, 16, 32, 2, 4, 2, 64) if small else Llama(),
              _tokens(1024, 32000),
              lambda net, x: causal_lm_loss(net(x["input_ids"]), x["input_ids"]),
              lambda net, x: net(x["input_ids"]), "adamw",
              "LLaMA-style decoder (RMSNorm, rotary, GQA, SwiGLU), 12 layers, d=768, "
              "1024 tokens"),
)}
"""Known models by name."""

MODEL_ALIASES = {"bert": "bert-base", "vit": "vit-b16", "mobilenet_v2": "mobilenetv2"}
"""Other names the traces' ``source`` lines use for the models above."""


def model_spec(name: str) -> ModelSpec:
    """The spec called ``name``; an unknown name raises :class:`InputError` listing
    the known ones."""
    spec = MODELS.get(MODEL_ALIASES.get(name, name))
    if spec is None:
        raise InputError(f"unknown model (={name!r}); known models: {', '.join(MODELS)}")
    return spec


def parameter_count(module: nn.Module) -> int:
    """Number of parameters of ``module`` (shared ones counted once)."""
    return sum(p.numel() for p in module.parameters())

