"""A small byte-level GPT (torch.nn only) and its data, for train_gpt.py and zcoll_torch.zero's tests.

GPT(layers, width, heads, context): token and position embeddings, pre-norm blocks of causal
self-attention and a 4x MLP, a final layer norm and the output projection to 256 byte values.
Batches: rows of context + 1 bytes from a text file; step s of a run uses the same global batch on
any rank count (rank r of n takes rows [r*B/n, (r+1)*B/n) of it).
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)  # a key bias has no gradient (softmax ignores it)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, layers=4, width=128, heads=4, context=64, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.context = context
        self.tok = nn.Embedding(256, width)
        self.pos = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, 256)

    def forward(self, idx, targets=None):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.reshape(-1, 256).float(), targets.reshape(-1))


def load_text(path):
    with open(path, "rb") as f:
        return torch.tensor(list(f.read()), dtype=torch.long)


def batch(data, step, rows, context, rank=0, ranks=1, seed=1234):
    """This rank's share of step's global batch of `rows` rows: (inputs, targets)."""
    g = torch.Generator().manual_seed(seed + step)
    starts = torch.randint(0, len(data) - context - 1, (rows,), generator=g)
    mine = starts[rank * rows // ranks:(rank + 1) * rows // ranks]
    chunk = torch.stack([data[s:s + context + 1] for s in mine.tolist()])
    return chunk[:, :-1], chunk[:, 1:]


def param_groups(model, weight_decay=0.1):
    """Two groups as GPT trainers use: matrices decayed, biases and norms not (frozen ones left out).
    A parameter sharded by zero.Init has empty storage: its shape is p.ds_shape."""
    def matrix(p):
        return len(getattr(p, "ds_shape", p.shape)) >= 2
    decay = [p for n, p in model.named_parameters() if p.requires_grad and matrix(p)]
    rest = [p for n, p in model.named_parameters() if p.requires_grad and not matrix(p)]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]
