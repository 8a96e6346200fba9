"""BERT-base in Hugging Face's layout (``BertForMaskedLM``: SDPA attention, hidden dropout,
token-type ids gathered from a buffer, decoder tied to the word embedding)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


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
