"""Megatron-style tensor parallelism on torch.distributed (the zcoll backend): the f and g operators and
the layers built on them. Each parallel layer is made from an unsplit one (its own block of the
weights), so that a check can hold both and compare.

    f = CopyToGroup:     forward identity,   backward all-reduce  (enters a parallel region)
    g = ReduceFromGroup: forward all-reduce, backward identity    (leaves it)

A two-layer MLP is column-parallel then row-parallel: one all-reduce forward (g) and one backward (f).
Self-attention splits the heads (the q, k, v projections column-parallel) and its output projection by
rows: again one all-reduce each way.
"""
import copy
import math

import torch
import torch.distributed as dist
import torch.nn.functional as F


class CopyToGroup(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class ReduceFromGroup(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        x = x.contiguous().clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def block(t, dim, rank, parts):
    """This rank's block of t along dim (t.size(dim) divisible by parts)."""
    n = t.size(dim) // parts
    return t.narrow(dim, rank * n, n).clone()


class ParallelLinear(torch.nn.Module):
    """A block of an unsplit Linear layer. Column-parallel (dim 0: this rank's output features):
    y_r = f(x) W_r^T + b_r, the output stays split. Row-parallel (dim 1: its input features, the input
    already split): y = g(x_r W_r^T) + b, the bias added once, after the sum."""

    def __init__(self, full, group, dim):
        super().__init__()
        self.group, self.dim = group, dim
        r, p = dist.get_rank(group), dist.get_world_size(group)
        self.weight = torch.nn.Parameter(block(full.weight.data, dim, r, p))
        self.bias = None
        if full.bias is not None:
            self.bias = torch.nn.Parameter(block(full.bias.data, 0, r, p) if dim == 0 else full.bias.data.clone())

    def forward(self, x):
        if self.dim == 0:
            return F.linear(CopyToGroup.apply(x, self.group), self.weight, self.bias)
        y = ReduceFromGroup.apply(F.linear(x, self.weight), self.group)
        return y if self.bias is None else y + self.bias


def ColumnParallelLinear(full, group):
    return ParallelLinear(full, group, 0)


def RowParallelLinear(full, group):
    return ParallelLinear(full, group, 1)


class MLP(torch.nn.Module):
    """The unsplit feed-forward block: width -> 4 width -> width."""

    def __init__(self, width):
        super().__init__()
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class ParallelMLP(torch.nn.Module):
    def __init__(self, full, group):
        super().__init__()
        self.up = ColumnParallelLinear(full.up, group)
        self.down = RowParallelLinear(full.down, group)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


def attention(q, k, v, heads):
    """Causal multi-head attention of [batch, seq, heads * head_dim] projections."""
    b, s, _ = q.shape
    q, k, v = (t.view(b, s, heads, -1).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    return (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, -1)


class Attention(torch.nn.Module):
    """The unsplit self-attention block."""

    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        # No bias on the keys: it would shift every score of a query alike, which softmax ignores (its
        # gradient is zero, and Adam would turn rounding noise into steps).
        self.q, self.k, self.v = torch.nn.Linear(width, width), torch.nn.Linear(width, width, bias=False), torch.nn.Linear(width, width)
        self.out = torch.nn.Linear(width, width)

    def forward(self, x):
        return self.out(attention(self.q(x), self.k(x), self.v(x), self.heads))


class ParallelAttention(torch.nn.Module):
    """Heads split over the group (heads divisible by its size); the output projection by rows."""

    def __init__(self, full, group):
        super().__init__()
        self.heads = full.heads // dist.get_world_size(group)
        self.q, self.k, self.v = (ColumnParallelLinear(m, group) for m in (full.q, full.k, full.v))
        self.out = RowParallelLinear(full.out, group)

    def forward(self, x):
        return self.out(attention(self.q(x), self.k(x), self.v(x), self.heads))


class Block(torch.nn.Module):
    """A pre-norm transformer block; parallel when given a group (its norms stay replicated)."""

    def __init__(self, width, heads, full=None, group=None):
        super().__init__()
        if full is None:
            self.ln1, self.ln2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
            self.attn, self.mlp = Attention(width, heads), MLP(width)
        else:
            self.ln1, self.ln2 = copy.deepcopy(full.ln1), copy.deepcopy(full.ln2)
            self.attn, self.mlp = ParallelAttention(full.attn, group), ParallelMLP(full.mlp, group)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Transformer(torch.nn.Module):
    """A small causal language model: embedding, blocks, norm, head. With a group, its blocks are
    tensor-parallel copies of `full`'s and the rest is replicated."""

    def __init__(self, vocab=64, width=32, heads=4, layers=2, context=16, full=None, group=None):
        super().__init__()
        if full is None:
            self.embed, self.pos = torch.nn.Embedding(vocab, width), torch.nn.Parameter(0.02 * torch.randn(context, width))
            self.blocks = torch.nn.ModuleList(Block(width, heads) for _ in range(layers))
            self.norm, self.head = torch.nn.LayerNorm(width), torch.nn.Linear(width, vocab)
        else:
            self.embed, self.pos = copy.deepcopy(full.embed), copy.deepcopy(full.pos)
            self.blocks = torch.nn.ModuleList(Block(width, heads, b, group) for b in full.blocks)
            self.norm, self.head = copy.deepcopy(full.norm), copy.deepcopy(full.head)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[: tokens.size(1)]
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x))


def matching(parallel, full, group, attr="grad"):
    """(name, this rank's tensor, the unsplit one's matching block) for every parameter of a parallel
    module made from `full`: their gradients, or their weights with attr="data"."""
    full_params = dict(full.named_parameters())
    r, p = dist.get_rank(group), dist.get_world_size(group)
    out = []
    for name, param in parallel.named_parameters():
        mine, whole = getattr(param, attr), getattr(full_params[name], attr)
        dims = [d for d in range(whole.dim()) if whole.size(d) != mine.size(d)]
        out.append((name, mine, block(whole, dims[0], r, p) if dims else whole))
    return out
