"""Tensor parallelism (Megatron-style) on zcoll: every rank holds a block of each layer's weights.

    build/tools/zcoll-run -n 4 /usr/bin/python3 examples/parallelism/tensor_parallel.py
    torchrun --nproc_per_node 2 examples/parallelism/tensor_parallel.py --steps 20

(PYTHONPATH=build/integrations/torch in a build tree.) It checks, on every rank:
1. the column-then-row-parallel MLP and the head-parallel attention against the unsplit layers
   (outputs, input gradients and each rank's block of the weight gradients) within 1e-5;
2. a small transformer whose blocks are tensor-parallel, trained with AdamW, against the same model
   trained in one process: the loss of every step and the final weights.
The input is made on rank 0 and broadcast (every rank of a tensor-parallel group sees the same batch).
"""
import copy
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import finish, start  # noqa: E402
import tp  # noqa: E402


def relative(a, b, scale=0.0):
    """Largest difference over b's largest magnitude (or `scale`, if larger: a gradient that is zero
    in exact arithmetic, like that of the keys' bias, is compared at its layer's scale)."""
    return ((a - b).abs().max() / max(b.abs().max().item(), scale, 1e-30)).item()


def check_layer(name, full, parallel, x, group):
    """Forward and backward of both layers on x; returns the worst relative difference."""
    xs = x.clone().requires_grad_(True)
    xp = x.clone().requires_grad_(True)
    weight = torch.linspace(-1, 1, x.numel()).view_as(x)  # a loss that weighs every output differently
    y_full = full(xs)
    (y_full * weight).sum().backward()
    y_par = parallel(xp)
    (y_par * weight).sum().backward()
    worst = {"output": relative(y_par, y_full), "input grad": relative(xp.grad, xs.grad)}
    pairs = tp.matching(parallel, full, group)
    scale = max(want.abs().max().item() for _, _, want in pairs)
    for pname, mine, want in pairs:
        worst[pname + " grad"] = relative(mine, want, scale)
    name_worst = max(worst, key=worst.get)
    assert worst[name_worst] <= 1e-5, f"{name}: {name_worst} differs by {worst[name_worst]:.2e}"
    return max(worst.values())


def batch(step, rows, context, vocab, group_src=0):
    """Tokens made on rank 0 and broadcast: inputs and next-token targets."""
    tokens = torch.empty(rows, context + 1, dtype=torch.long)
    if dist.get_rank() == group_src:
        g = torch.Generator().manual_seed(1000 + step)
        tokens = torch.randint(0, vocab, (rows, context + 1), generator=g)
    dist.broadcast(tokens, src=group_src)
    return tokens[:, :-1], tokens[:, 1:]


def main():
    args, rank, n = start(__doc__, steps=(int, 10, "training steps"), width=(int, 32, "model width"),
                          heads=(int, 4, "attention heads, divisible by the number of ranks"))
    group = dist.group.WORLD
    assert args.heads % n == 0 and args.width % args.heads == 0, "heads must divide over the ranks and the width"

    # 1. The layers, built from the same unsplit weights on every rank.
    torch.manual_seed(0)
    mlp, attn = tp.MLP(args.width), tp.Attention(args.width, args.heads)
    x = torch.randn(3, 8, args.width)
    dist.broadcast(x, src=0)
    worst_mlp = check_layer("MLP", mlp, tp.ParallelMLP(mlp, group), x, group)
    worst_attn = check_layer("attention", attn, tp.ParallelAttention(attn, group), x, group)

    # 2. Training: the tensor-parallel transformer against the same model in one process.
    torch.manual_seed(1)
    context, vocab = 16, 64
    full = tp.Transformer(vocab=vocab, width=args.width, heads=args.heads, context=context)
    reference = copy.deepcopy(full)
    model = tp.Transformer(vocab=vocab, width=args.width, heads=args.heads, context=context, full=full, group=group)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=3e-3)
    worst_loss = 0.0
    for step in range(args.steps):
        inputs, targets = batch(step, 4, context, vocab)
        losses = []
        for m, o in ((model, opt), (reference, ref_opt)):
            o.zero_grad()
            loss = F.cross_entropy(m(inputs).flatten(0, 1), targets.flatten())
            loss.backward()
            o.step()
            losses.append(loss.item())
        worst_loss = max(worst_loss, abs(losses[0] - losses[1]) / abs(losses[1]))
        if rank == 0:
            print(f"step {step}: loss {losses[0]:.6f} (one process: {losses[1]:.6f})", flush=True)
    # The final weights: this rank's blocks against the reference's.
    worst_weight = max(relative(mine, want) for _, mine, want in tp.matching(model, reference, group, "data"))
    assert worst_loss <= 1e-5, f"the loss differs from one process's by {worst_loss:.2e}"
    assert worst_weight <= 1e-4, f"the weights differ from one process's by {worst_weight:.2e}"
    if rank == 0:
        print(f"tensor parallel over {n} ranks: MLP within {worst_mlp:.1e}, attention within {worst_attn:.1e} "
              f"(outputs, input and weight gradients); {args.steps} training steps: loss within {worst_loss:.1e}, "
              f"weights within {worst_weight:.1e} of one process")
    finish("tensor_parallel")


if __name__ == "__main__":
    main()
