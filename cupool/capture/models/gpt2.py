"""GPT-2 small in Hugging Face's layout (``GPT2LMHeadModel``: ``Conv1D`` projections,
``gelu_new``, causal SDPA attention, tied ``lm_head``) and the causal-LM loss it computes."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


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
