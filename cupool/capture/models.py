"""Small self-contained PyTorch models to capture: ResNet-50, GPT-2 small, BERT-base,
ViT-B/16 and a LLaMA-style decoder (RMSNorm, rotary embeddings, SwiGLU).

Each :class:`ModelSpec` builds the model at its published size (``small=False``) or at a
tiny size for tests (``small=True``: same structure, a few layers, widths of 16-64), makes a
batch of inputs and targets, and computes the training loss. Nothing here downloads
weights; initialisation is PyTorch's default (the values do not matter to a capture).

Published sizes: ResNet-50 (He et al. 2015: bottleneck stages 3-4-6-3, 224×224, 1000
classes); GPT-2 small (124M: 12 layers, d=768, 12 heads, 1024 positions, vocab 50257, tied
embeddings); BERT-base (110M: 12 layers, d=768, 12 heads, FFN 3072, vocab 30522, MLM head);
ViT-B/16 (86M: 224×224 in 16×16 patches, 12 layers, d=768, 12 heads, MLP 3072); the
LLaMA-style decoder is a 12-layer d=768 model with 12 query / 4 key-value heads, SwiGLU
FFN 2048, vocab 32000 (GPT-2-small sized, LLaMA's architecture).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from cupool.errors import InputError

# -- ResNet-50 --------------------------------------------------------------------------


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_ch: int, width: int, stride: int) -> None:
        super().__init__()
        out_ch = width * self.expansion
        self.conv1 = nn.Conv2d(in_ch, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_ch, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride, bias=False),
                                            nn.BatchNorm2d(out_ch))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    """ResNet with bottleneck blocks (ResNet-50 for ``blocks=(3, 4, 6, 3), width=64``)."""

    def __init__(self, blocks=(3, 4, 6, 3), width: int = 64, num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        layers, in_ch = [], width
        for stage, count in enumerate(blocks):
            stage_width = width * 2 ** stage
            for block in range(count):
                layers.append(_Bottleneck(in_ch, stage_width, 2 if block == 0 and stage else 1))
                in_ch = stage_width * _Bottleneck.expansion
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(in_ch, num_classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# -- transformers -------------------------------------------------------------------------


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x²) + eps) * weight`` (LLaMA's normalisation, no bias, no centring)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class Attention(nn.Module):
    """Multi-head self-attention with optional grouped key/value heads and rotary positions
    (``rotary_positions > 0``); the kernel is ``F.scaled_dot_product_attention``."""

    def __init__(self, dim: int, heads: int, kv_heads: int | None = None, bias: bool = True,
                 causal: bool = False, rotary_positions: int = 0) -> None:
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads or heads
        self.head_dim = dim // heads
        self.causal = causal
        self.qkv = nn.Linear(dim, (heads + 2 * self.kv_heads) * self.head_dim, bias=bias)
        self.proj = nn.Linear(dim, dim, bias=bias)
        if rotary_positions:
            inv_freq = 1.0 / 10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim)
            angles = torch.outer(torch.arange(rotary_positions).float(), inv_freq)
            angles = torch.cat((angles, angles), dim=-1)
            self.register_buffer("cos", angles.cos(), persistent=False)
            self.register_buffer("sin", angles.sin(), persistent=False)
        else:
            self.cos = self.sin = None

    def forward(self, x):
        batch, seq, dim = x.shape
        q, k, v = self.qkv(x).split([self.heads * self.head_dim,
                                     self.kv_heads * self.head_dim,
                                     self.kv_heads * self.head_dim], dim=-1)
        q = q.view(batch, seq, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.cos is not None:
            cos, sin = self.cos[:seq].to(q.dtype), self.sin[:seq].to(q.dtype)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
        if self.kv_heads != self.heads:
            repeat = self.heads // self.kv_heads
            k = k.repeat_interleave(repeat, dim=1)
            v = v.repeat_interleave(repeat, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(out.transpose(1, 2).reshape(batch, seq, dim))


class Block(nn.Module):
    """A transformer block: pre-norm (GPT-2, ViT, LLaMA) or post-norm (BERT); GELU MLP or
    SwiGLU FFN (``swiglu``); LayerNorm or RMSNorm (``rms``)."""

    def __init__(self, dim: int, heads: int, ffn: int, *, pre_norm: bool = True,
                 causal: bool = False, kv_heads: int | None = None, rms: bool = False,
                 swiglu: bool = False, rotary_positions: int = 0, gelu: str = "none") -> None:
        super().__init__()
        bias = not rms
        norm = (lambda: RMSNorm(dim)) if rms else (lambda: nn.LayerNorm(dim))
        self.norm1, self.norm2 = norm(), norm()
        self.pre_norm = pre_norm
        self.attn = Attention(dim, heads, kv_heads, bias, causal, rotary_positions)
        self.swiglu = swiglu
        self.gelu = gelu
        self.up = nn.Linear(dim, 2 * ffn if swiglu else ffn, bias=bias)
        self.down = nn.Linear(ffn, dim, bias=bias)

    def _ffn(self, x):
        if self.swiglu:
            gate, up = self.up(x).chunk(2, dim=-1)
            return self.down(F.silu(gate) * up)
        return self.down(F.gelu(self.up(x), approximate=self.gelu))

    def forward(self, x):
        if self.pre_norm:
            x = x + self.attn(self.norm1(x))
            return x + self._ffn(self.norm2(x))
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self._ffn(x))


class GPT2(nn.Module):
    """GPT-2: learned positions, pre-LayerNorm causal blocks, tied output embedding."""

    def __init__(self, vocab=50257, positions=1024, dim=768, layers=12, heads=12) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(positions, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, 4 * dim, causal=True, gelu="tanh")
                                    for _ in range(layers))
        self.norm = nn.LayerNorm(dim)

    def forward(self, ids):
        x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        return F.linear(self.norm(x), self.tokens.weight)


class Bert(nn.Module):
    """BERT with its masked-language-model head (dense, GELU, LayerNorm, tied decoder)."""

    def __init__(self, vocab=30522, positions=512, dim=768, layers=12, heads=12) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(positions, dim)
        self.segments = nn.Embedding(2, dim)
        self.embed_norm = nn.LayerNorm(dim)
        self.blocks = nn.ModuleList(Block(dim, heads, 4 * dim, pre_norm=False)
                                    for _ in range(layers))
        self.head = nn.Linear(dim, dim)
        self.head_norm = nn.LayerNorm(dim)
        self.decoder_bias = nn.Parameter(torch.zeros(vocab))

    def forward(self, ids):
        seq = ids.shape[1]
        x = self.tokens(ids) + self.positions(torch.arange(seq, device=ids.device))
        x = self.embed_norm(x + self.segments(torch.zeros_like(ids)))
        for block in self.blocks:
            x = block(x)
        x = self.head_norm(F.gelu(self.head(x)))
        return F.linear(x, self.tokens.weight, self.decoder_bias)


class ViT(nn.Module):
    """Vision Transformer: patch embedding (a strided convolution), class token, learned
    positions, pre-LayerNorm blocks, linear head on the class token."""

    def __init__(self, image=224, patch=16, dim=768, layers=12, heads=12,
                 num_classes=1000) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.positions = nn.Parameter(torch.zeros(1, (image // patch) ** 2 + 1, dim))
        self.blocks = nn.ModuleList(Block(dim, heads, 4 * dim) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, images):
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls.expand(x.shape[0], -1, -1), x), dim=1) + self.positions
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])


class Llama(nn.Module):
    """A LLaMA-style decoder: RMSNorm, rotary positions, grouped-query attention, SwiGLU,
    no biases, untied output projection."""

    def __init__(self, vocab=32000, positions=1024, dim=768, layers=12, heads=12,
                 kv_heads=4, ffn=2048) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(
            Block(dim, heads, ffn, causal=True, kv_heads=kv_heads, rms=True, swiglu=True,
                  rotary_positions=positions) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids):
        x = self.tokens(ids)
        for block in self.blocks:
            x = block(x)
        return self.output(self.norm(x))


# -- registry -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    """How to build, feed and train one model.

    ``build(small)`` returns the module; ``batch(n, small)`` returns ``(inputs, targets)``
    (created on the default device: inside ``FakeTensorMode`` they are fake).
    """

    name: str
    build: Callable[[bool], nn.Module]
    batch: Callable[[int, bool], tuple[torch.Tensor, torch.Tensor]]
    description: str

    def loss(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of ``output`` (``[..., classes]``) against ``targets``."""
        return F.cross_entropy(output.reshape(-1, output.shape[-1]).float(),
                               targets.reshape(-1))


def _images(side: int, classes: int):
    def make(n: int, small: bool):
        size = 32 if small else side
        return (torch.randn(n, 3, size, size),
                torch.randint(0, 10 if small else classes, (n,)))
    return make


def _tokens(seq: int, vocab: int):
    def make(n: int, small: bool):
        length, words = (16, 128) if small else (seq, vocab)
        return torch.randint(0, words, (n, length)), torch.randint(0, words, (n, length))
    return make


MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in (
    ModelSpec("resnet50",
              lambda small: ResNet((1, 1, 1, 1), 8, 10) if small else ResNet(),
              _images(224, 1000), "ResNet-50, 224×224 images, 1000 classes"),
    ModelSpec("gpt2",
              lambda small: GPT2(128, 16, 32, 2, 2) if small else GPT2(),
              _tokens(1024, 50257), "GPT-2 small (124M), 1024 tokens"),
    ModelSpec("bert-base",
              lambda small: Bert(128, 16, 32, 2, 2) if small else Bert(),
              _tokens(512, 30522), "BERT-base (110M) with MLM head, 512 tokens"),
    ModelSpec("vit-b16",
              lambda small: ViT(32, 8, 32, 2, 2, 10) if small else ViT(),
              _images(224, 1000), "ViT-B/16 (86M), 224×224 images"),
    ModelSpec("llama",
              lambda small: Llama(128, 16, 32, 2, 4, 2, 64) if small else Llama(),
              _tokens(1024, 32000), "LLaMA-style decoder (RMSNorm, rotary, GQA, SwiGLU), "
                                    "12 layers, d=768, 1024 tokens"),
)}
"""Known models by name."""


def model_spec(name: str) -> ModelSpec:
    """The spec called ``name``; an unknown name raises :class:`InputError` listing
    the known ones."""
    spec = MODELS.get(name)
    if spec is None:
        raise InputError(f"unknown model (={name!r}); known models: {', '.join(MODELS)}")
    return spec


def parameter_count(module: nn.Module) -> int:
    """Number of parameters of ``module`` (shared ones counted once)."""
    return sum(p.numel() for p in module.parameters())

