"""The generic transformer: RMSNorm, multi-head attention (grouped key/value heads, rotary
positions), a pre- or post-norm block, and the two models built from it: ViT-B/16 and the
LLaMA-style decoder."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


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


@dataclass(frozen=True)
class BlockConfig:
    """The shape and the variant of one transformer :class:`Block`.

    dim: model width (the residual stream's features).
    heads: query heads (``dim`` must be a multiple of it).
    ffn: hidden width of the feed-forward network (of each of SwiGLU's two halves).
    pre_norm: normalise each sublayer's input (ViT, LLaMA); ``False`` normalises after the
      residual sum instead (post-norm, the original transformer's layout).
    causal: attend only to earlier positions (decoders).
    kv_heads: key/value heads for grouped-query attention; ``None``: as many as ``heads``.
    rms: RMSNorm and no biases (LLaMA) instead of LayerNorm and biased projections.
    swiglu: SwiGLU feed-forward (``down(silu(gate) * up)``) instead of a GELU MLP.
    rotary_positions: positions the rotary embedding covers; 0: no rotary embedding.
    gelu: ``approximate`` argument of the GELU MLP's ``F.gelu`` (``"none"`` or ``"tanh"``).
    """

    dim: int
    heads: int
    ffn: int
    pre_norm: bool = True
    causal: bool = False
    kv_heads: int | None = None
    rms: bool = False
    swiglu: bool = False
    rotary_positions: int = 0
    gelu: str = "none"


class Block(nn.Module):
    """A transformer block (see :class:`BlockConfig`): attention and a feed-forward network,
    each around a residual sum with its normalisation before (pre-norm) or after it."""

    def __init__(self, config: BlockConfig) -> None:
        super().__init__()
        dim, ffn, rms, swiglu = config.dim, config.ffn, config.rms, config.swiglu
        bias = not rms
        norm = (lambda: RMSNorm(dim)) if rms else (lambda: nn.LayerNorm(dim))
        self.norm1, self.norm2 = norm(), norm()
        self.pre_norm = config.pre_norm
        self.attn = Attention(dim, config.heads, config.kv_heads, bias, config.causal,
                              config.rotary_positions)
        self.swiglu = swiglu
        self.gelu = config.gelu
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


class ViT(nn.Module):
    """Vision Transformer: patch embedding (a strided convolution), class token, learned
    positions, pre-LayerNorm blocks, linear head on the class token."""

    def __init__(self, image=224, patch=16, dim=768, layers=12, heads=12,
                 num_classes=1000) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.positions = nn.Parameter(torch.zeros(1, (image // patch) ** 2 + 1, dim))
        self.blocks = nn.ModuleList(Block(BlockConfig(dim, heads, 4 * dim))
                                    for _ in range(layers))
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
        config = BlockConfig(dim, heads, ffn, causal=True, kv_heads=kv_heads, rms=True,
                             swiglu=True, rotary_positions=positions)
        self.blocks = nn.ModuleList(Block(config) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids):
        x = self.tokens(ids)
        for block in self.blocks:
            x = block(x)
        return self.output(self.norm(x))
