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
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from cupool.errors import InputError

# -- ResNet-50 (torchvision layout) --------------------------------------------------------


class Bottleneck(nn.Module):
    """torchvision's ``Bottleneck`` (ResNet v1.5); the residual sum is out of place."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        out = planes * self.expansion
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != out:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride, bias=False),
                                            nn.BatchNorm2d(out))

    def forward(self, x):
        # The nesting decides when PyTorch frees each intermediate (a variable holds a
        # tensor until it is rebound): the second and third convolutions are one expression.
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn3(self.conv3(self.relu(self.bn2(self.conv2(out)))))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Sequential):
    """torchvision's ResNet with bottleneck blocks, children flattened into one Sequential:
    ``conv1, bn1, relu, maxpool, <blocks>, avgpool, Flatten, fc`` (ResNet-50 for
    ``blocks=(3, 4, 6, 3), width=64``)."""

    def __init__(self, blocks=(3, 4, 6, 3), width: int = 64, num_classes: int = 1000) -> None:
        layers: list[nn.Module] = [nn.Conv2d(3, width, 7, 2, 3, bias=False),
                                   nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                                   nn.MaxPool2d(3, 2, 1)]
        inplanes = width
        for stage, count in enumerate(blocks):
            planes = width * 2 ** stage
            for block in range(count):
                layers.append(Bottleneck(inplanes, planes, 2 if block == 0 and stage else 1))
                inplanes = planes * Bottleneck.expansion
        layers += [nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(1), nn.Linear(inplanes, num_classes)]
        super().__init__(*layers)


# -- MobileNetV2 (torchvision layout) -------------------------------------------------------


def _make_divisible(value: float, divisor: int = 8) -> int:
    new = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * value else new


class ConvBNReLU6(nn.Sequential):
    """torchvision's ``Conv2dNormActivation`` with ReLU6: convolution, batch norm, ReLU6."""

    def __init__(self, inp: int, out: int, kernel: int = 3, stride: int = 1,
                 groups: int = 1) -> None:
        super().__init__(nn.Conv2d(inp, out, kernel, stride, (kernel - 1) // 2, groups=groups,
                                   bias=False),
                         nn.BatchNorm2d(out), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    """torchvision's MobileNetV2 block: expand (1×1), depthwise 3×3, linear 1×1 projection."""

    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = round(inp * expand_ratio)
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU6(inp, hidden, kernel=1))
        layers += [ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),
                   nn.Conv2d(hidden, oup, 1, 1, 0, bias=False), nn.BatchNorm2d(oup)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


_MOBILENET_V2_SETTING = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                         (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


class MobileNetV2(nn.Sequential):
    """torchvision's MobileNetV2 as ``Sequential(features, AdaptiveAvgPool2d, Flatten,
    Dropout(0.2), Linear)``."""

    def __init__(self, width_mult: float = 1.0, num_classes: int = 1000) -> None:
        channels = _make_divisible(32 * width_mult)
        last = _make_divisible(1280 * max(1.0, width_mult))
        features: list[nn.Module] = [ConvBNReLU6(3, channels, stride=2)]
        for t, c, n, s in _MOBILENET_V2_SETTING:
            out = _make_divisible(c * width_mult)
            for i in range(n):
                features.append(InvertedResidual(channels, out, s if i == 0 else 1, t))
                channels = out
        features.append(ConvBNReLU6(channels, last, kernel=1))
        super().__init__(nn.Sequential(*features), nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(1),
                         nn.Dropout(0.2), nn.Linear(last, num_classes))


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


# -- GPT-2 (Hugging Face layout) -------------------------------------------------------------


class Conv1D(nn.Module):
    """GPT-2's projection: ``addmm(bias, x, weight)`` with the weight stored ``[in, out]``."""

    def __init__(self, nf: int, nx: int) -> None:
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        size_out = (*x.size()[:-1], self.nf)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


def gelu_new(x):
    """GPT-2's tanh approximation of GELU, written out as GPT-2 does (eight aten ops)."""
    # one expression, evaluated left to right as in GPT-2 (0.5 * x comes first)
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                       * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.dim, self.head_dim = dim, dim // heads
        self.c_attn = Conv1D(3 * dim, dim)
        self.c_proj = Conv1D(dim, dim)

    def forward(self, hidden_states):
        query, key, value = self.c_attn(hidden_states).split(self.dim, dim=2)
        shape = (*hidden_states.shape[:-1], -1, self.head_dim)
        key = key.view(shape).transpose(1, 2)
        value = value.view(shape).transpose(1, 2)
        query = query.view(shape).transpose(1, 2)
        attn_output = F.scaled_dot_product_attention(query, key, value, is_causal=True,
                                                     scale=self.head_dim ** -0.5)
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(*attn_output.shape[:-2], -1).contiguous()
        return self.c_proj(attn_output)


class GPT2MLP(nn.Module):
    def __init__(self, dim: int, inner: int) -> None:
        super().__init__()
        self.c_fc = Conv1D(inner, dim)
        self.c_proj = Conv1D(dim, inner)

    def forward(self, hidden_states):
        hidden_states = self.c_fc(hidden_states)
        hidden_states = gelu_new(hidden_states)
        return self.c_proj(hidden_states)


class GPT2Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = GPT2Attention(dim, heads)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = GPT2MLP(dim, 4 * dim)

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states = self.ln_1(hidden_states)
        attn_output = self.attn(hidden_states)
        hidden_states = attn_output + residual
        residual = hidden_states
        hidden_states = self.ln_2(hidden_states)
        feed_forward_hidden_states = self.mlp(hidden_states)
        hidden_states = residual + feed_forward_hidden_states
        return hidden_states


class GPT2Model(nn.Module):
    def __init__(self, vocab: int, positions: int, dim: int, layers: int, heads: int) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(positions, dim)
        self.h = nn.ModuleList(GPT2Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)

    def forward(self, input_ids):
        inputs_embeds = self.wte(input_ids)
        past_seen_tokens = 0
        position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) \
            + past_seen_tokens
        position_ids = position_ids.unsqueeze(0)
        position_embeds = self.wpe(position_ids)
        hidden_states = inputs_embeds + position_embeds
        for block in self.h:
            hidden_states = block(hidden_states)
        hidden_states = self.ln_f(hidden_states)
        return hidden_states


def causal_lm_loss(logits, labels):
    """The causal-LM cross-entropy as Hugging Face computes it: labels padded with the
    ignore index and shifted left by one, logits in float32."""
    logits = logits.float()
    labels = F.pad(labels, (0, 1), value=-100)
    shift_labels = labels[..., 1:].contiguous()
    logits = logits.view(-1, logits.shape[-1])
    return F.cross_entropy(logits, shift_labels.view(-1), ignore_index=-100)


class GPT2(nn.Module):
    """GPT-2 with its language-model head (``GPT2LMHeadModel``): learned positions, pre-LayerNorm
    causal blocks, output projection tied to the token embedding. Given ``labels``,
    ``forward`` returns ``(loss, logits)``."""

    def __init__(self, vocab=50257, positions=1024, dim=768, layers=12, heads=12) -> None:
        super().__init__()
        self.transformer = GPT2Model(vocab, positions, dim, layers, heads)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight

    def forward(self, input_ids, labels=None):
        hidden_states = self.transformer(input_ids)
        logits = self.lm_head(hidden_states)
        if labels is None:
            return logits
        loss = causal_lm_loss(logits, labels)
        return loss, logits


# -- BERT (Hugging Face layout) ---------------------------------------------------------------


class BertEmbeddings(nn.Module):
    def __init__(self, vocab: int, positions: int, dim: int, dropout: float) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, dim, padding_idx=0)
        self.position_embeddings = nn.Embedding(positions, dim)
        self.token_type_embeddings = nn.Embedding(2, dim)
        self.LayerNorm = nn.LayerNorm(dim, eps=1e-12)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("position_ids", torch.arange(positions).expand((1, -1)),
                             persistent=False)
        self.register_buffer("token_type_ids", torch.zeros(self.position_ids.size(),
                                                           dtype=torch.long), persistent=False)

    def forward(self, input_ids):
        batch_size, seq_length = input_ids.size()
        position_ids = self.position_ids[:, :seq_length]
        buffered = self.token_type_ids.expand(position_ids.shape[0], -1)
        buffered = torch.gather(buffered, dim=1, index=position_ids)
        token_type_ids = buffered.expand(batch_size, seq_length)
        inputs_embeds = self.word_embeddings(input_ids)
        token_type_embeddings = self.token_type_embeddings(token_type_ids)
        embeddings = inputs_embeds + token_type_embeddings
        position_embeddings = self.position_embeddings(position_ids)
        embeddings = embeddings + position_embeddings
        embeddings = self.LayerNorm(embeddings)
        return self.dropout(embeddings)


class BertSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.head_dim = dim // heads
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)

    def forward(self, hidden_states):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query = self.query(hidden_states).view(*hidden_shape).transpose(1, 2)
        key = self.key(hidden_states).view(*hidden_shape).transpose(1, 2)
        value = self.value(hidden_states).view(*hidden_shape).transpose(1, 2)
        attn_output = F.scaled_dot_product_attention(query, key, value, is_causal=False,
                                                     scale=self.head_dim ** -0.5)
        attn_output = attn_output.transpose(1, 2).contiguous()
        return attn_output.reshape(*input_shape, -1).contiguous()


class BertResidualOutput(nn.Module):
    """``LayerNorm(dropout(dense(hidden_states)) + input_tensor)`` (Hugging Face's
    ``BertSelfOutput`` and ``BertOutput``)."""

    def __init__(self, inp: int, dim: int, dropout: float) -> None:
        super().__init__()
        self.dense = nn.Linear(inp, dim)
        self.LayerNorm = nn.LayerNorm(dim, eps=1e-12)
        self.dropout = nn.Dropout(dropout)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)
        return self.LayerNorm(hidden_states + input_tensor)


class BertAttention(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.self = BertSelfAttention(dim, heads)
        self.output = BertResidualOutput(dim, dim, dropout)

    def forward(self, hidden_states):
        attention_output = self.self(hidden_states)
        return self.output(attention_output, hidden_states)


class BertIntermediate(nn.Module):
    def __init__(self, dim: int, inner: int) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, inner)

    def forward(self, hidden_states):
        return F.gelu(self.dense(hidden_states))


class BertLayer(nn.Module):
    def __init__(self, dim: int, heads: int, inner: int, dropout: float) -> None:
        super().__init__()
        self.attention = BertAttention(dim, heads, dropout)
        self.intermediate = BertIntermediate(dim, inner)
        self.output = BertResidualOutput(inner, dim, dropout)

    def forward(self, hidden_states):
        attention_output = self.attention(hidden_states)
        intermediate_output = self.intermediate(attention_output)
        return self.output(intermediate_output, attention_output)


class BertEncoder(nn.Module):
    def __init__(self, dim: int, heads: int, inner: int, layers: int, dropout: float) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(dim, heads, inner, dropout) for _ in range(layers))

    def forward(self, hidden_states):
        for layer in self.layer:
            hidden_states = layer(hidden_states)
        return hidden_states


class BertModel(nn.Module):
    def __init__(self, vocab: int, positions: int, dim: int, layers: int, heads: int,
                 dropout: float) -> None:
        super().__init__()
        self.embeddings = BertEmbeddings(vocab, positions, dim, dropout)
        self.encoder = BertEncoder(dim, heads, 4 * dim, layers, dropout)

    def forward(self, input_ids):
        embedding_output = self.embeddings(input_ids)
        sequence_output = self.encoder(embedding_output)
        return sequence_output


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, dim)
        self.LayerNorm = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, hidden_states):
        hidden_states = self.dense(hidden_states)
        hidden_states = F.gelu(hidden_states)
        return self.LayerNorm(hidden_states)


class BertLMPredictionHead(nn.Module):
    def __init__(self, dim: int, vocab: int) -> None:
        super().__init__()
        self.transform = BertPredictionHeadTransform(dim)
        self.decoder = nn.Linear(dim, vocab, bias=True)
        self.bias = nn.Parameter(torch.zeros(vocab))
        self.decoder.bias = self.bias

    def forward(self, hidden_states):
        hidden_states = self.transform(hidden_states)
        return self.decoder(hidden_states)


class BertOnlyMLMHead(nn.Module):
    def __init__(self, dim: int, vocab: int) -> None:
        super().__init__()
        self.predictions = BertLMPredictionHead(dim, vocab)

    def forward(self, sequence_output):
        return self.predictions(sequence_output)


class Bert(nn.Module):
    """BERT with its masked-language-model head (``BertForMaskedLM``: no pooler; dense, GELU,
    LayerNorm, decoder tied to the word embedding); returns the prediction scores."""

    def __init__(self, vocab=30522, positions=512, dim=768, layers=12, heads=12,
                 dropout=0.1) -> None:
        super().__init__()
        self.bert = BertModel(vocab, positions, dim, layers, heads, dropout)
        self.cls = BertOnlyMLMHead(dim, vocab)
        self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight

    def forward(self, input_ids):
        sequence_output = self.bert(input_ids)
        return self.cls(sequence_output)


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

