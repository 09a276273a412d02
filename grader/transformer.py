"""The course's small GPT-style transformer, written out op by op so its memory can be derived.

Pre-norm blocks: x + drop(attn(ln1(x))), then x + drop(mlp(ln2(x))); attention is
spelled out (scores, softmax, dropout, weighted sum) rather than fused, so every
tensor autograd saves has a line of code that makes it. Lesson 04 measures what
this model saves for backward and predicts it with a formula.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint


@dataclass(frozen=True)
class Shape:
    """A transformer's shape: the columns of data/models.csv that memory depends on."""

    n_layers: int = 2
    d_model: int = 128
    n_heads: int = 4
    d_ff: int = 512
    vocab_size: int = 1024
    max_seq_len: int = 256
    dropout: float = 0.1


class Block(nn.Module):
    """One pre-norm transformer block: causal self-attention then a GELU MLP, each with a residual."""

    def __init__(self, shape: Shape):
        super().__init__()
        d = shape.d_model
        self.n_heads = shape.n_heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, shape.d_ff)
        self.fc2 = nn.Linear(shape.d_ff, d)
        self.p = shape.dropout

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """Causal multi-head attention of x (batch, seq, d_model), written out op by op."""
        b, s, d = x.shape
        h = self.n_heads
        q, k, v = self.qkv(x).view(b, s, 3, h, d // h).permute(2, 0, 3, 1, 4)  # each (b, h, s, d/h)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))  # (b, h, s, s)
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        weights = F.dropout(scores.masked_fill(mask, float("-inf")).softmax(-1), self.p, self.training)
        out = (weights @ v).transpose(1, 2).reshape(b, s, d)  # (b, s, d)
        return self.proj(out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + F.dropout(self.attention(self.ln1(x)), self.p, self.training)
        return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)))), self.p, self.training)


class TinyGPT(nn.Module):
    """Token and position embeddings, `n_layers` blocks, a final LayerNorm and a tied output head."""

    def __init__(self, shape: Shape = Shape(), checkpointing: bool = False):
        super().__init__()
        self.shape = shape
        self.checkpointing = checkpointing
        self.tokens = nn.Embedding(shape.vocab_size, shape.d_model)
        self.positions = nn.Embedding(shape.max_seq_len, shape.d_model)
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.n_layers))
        self.ln_f = nn.LayerNorm(shape.d_model)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits (batch, seq, vocab) for token ids idx (batch, seq)."""
        s = idx.shape[1]
        pos = torch.arange(s, device=idx.device)
        x = F.dropout(self.tokens(idx) + self.positions(pos), self.shape.dropout, self.training)
        for block in self.blocks:
            if self.checkpointing and self.training:
                # keep only the block's input; recompute its insides during backward
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.ln_f(x) @ self.tokens.weight.T  # (batch, seq, vocab), head tied to the embedding


def batch_of_tokens(shape: Shape, batch: int, seq: int, device: torch.device | str = "cpu", seed: int = 0) -> torch.Tensor:
    """Random token ids (batch, seq) for `shape`'s vocabulary, reproducible by seed."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, shape.vocab_size, (batch, seq), generator=g).to(device)
