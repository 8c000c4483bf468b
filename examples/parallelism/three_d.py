"""3D parallelism on zcoll: data x tensor x pipeline, each dimension on sub-communicators of its own.

    build/tools/zcoll-run -n 8 /usr/bin/python3 examples/parallelism/three_d.py            # 2 x 2 x 2
    build/tools/zcoll-run -n 8 /usr/bin/python3 examples/parallelism/three_d.py --dp 1 --tp 2 --pp 4

(PYTHONPATH=build/integrations/torch in a build tree.) Rank r = d * (pp * tp) + s * tp + t: the tp ranks
of one stage of one replica are neighbours (the tensor-parallel all-reduces are the most frequent),
a replica's stages are tp apart, the replicas pp * tp apart. The model is a stack of residual MLP
blocks: each pipeline stage holds an equal share of them, tensor-parallel within its tp group (one
all-reduce forward and one backward per block); stages pass activations and gradients with send/recv
(1F1B); each replica takes its share of the global batch and the replicas average their gradients
with an all-reduce over their dp group. Checked against the whole model trained in one process: the
loss of every step and every rank's block of its stage's weights.
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
from pipeline import Pipeline  # noqa: E402


class Residual(torch.nn.Module):
    def __init__(self, mlp):
        super().__init__()
        self.mlp = mlp

    def forward(self, x):
        return x + self.mlp(x)


def subgroup(n, key):
    """One group per value of key(rank); every rank creates every group, in one order. Returns this
    rank's."""
    members = {}
    for r in range(n):
        members.setdefault(key(r), []).append(r)
    mine = None
    for k in sorted(members):
        g = dist.new_group(members[k])
        if k == key(dist.get_rank()):
            mine = g
    return mine


def main():
    args, rank, n = start(__doc__, dp=(int, 2, "data-parallel replicas"), tp=(int, 2, "tensor-parallel ranks"),
                          pp=(int, 2, "pipeline stages"), blocks_per_stage=(int, 2, "MLP blocks per stage"),
                          width=(int, 32, "model width"), micro=(int, 4, "micro-batches per replica and step"),
                          steps=(int, 5, "training steps"))
    if n != args.dp * args.tp * args.pp:
        raise SystemExit(f"{n} ranks, but dp x tp x pp = {args.dp * args.tp * args.pp}")
    replica, stage_index = rank // (args.pp * args.tp), rank // args.tp % args.pp
    tp_group = subgroup(n, lambda r: r // args.tp)  # the same replica and stage
    dp_group = subgroup(n, lambda r: r % (args.pp * args.tp))  # the same stage and tensor block
    pipeline = [replica * args.pp * args.tp + s * args.tp + rank % args.tp for s in range(args.pp)]

    torch.manual_seed(0)
    blocks = args.pp * args.blocks_per_stage
    full = torch.nn.Sequential(*(Residual(tp.MLP(args.width)) for _ in range(blocks)))
    reference = copy.deepcopy(full)
    mine = range(stage_index * args.blocks_per_stage, (stage_index + 1) * args.blocks_per_stage)
    stage = torch.nn.Sequential(*(Residual(tp.ParallelMLP(full[i].mlp, tp_group)) for i in mine))
    pipe = Pipeline(stage, dist.group.WORLD, pipeline, "1f1b")
    opt = torch.optim.SGD(stage.parameters(), lr=0.05, momentum=0.9)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    rows = 4 * args.micro  # per replica
    worst = 0.0
    for step in range(args.steps):
        g = torch.Generator().manual_seed(10 + step)
        inputs, targets = torch.randn(args.dp * rows, args.width, generator=g), torch.randn(args.dp * rows, args.width, generator=g)
        # One process: every replica's micro-batches, the loss averaged over all of them.
        ref_opt.zero_grad()
        want = sum(F.mse_loss(reference(x), y) for x, y in zip(inputs.chunk(args.dp * args.micro),
                                                                targets.chunk(args.dp * args.micro)))
        want = want / (args.dp * args.micro)
        want.backward()
        ref_opt.step()
        # 3D: this replica's share through the pipeline, then the replicas' mean gradient.
        opt.zero_grad()
        share = slice(replica * rows, (replica + 1) * rows)
        loss = pipe.step(inputs[share], targets[share], args.micro)
        for p in stage.parameters():
            dist.all_reduce(p.grad, group=dp_group)
            p.grad /= args.dp
        opt.step()
        if pipe.last:
            total = torch.tensor([loss])
            dist.all_reduce(total, group=dp_group)
            got = total.item() / args.dp
            worst = max(worst, abs(got - want.item()) / abs(want.item()))
            assert worst <= 1e-5, f"step {step}: loss {got} != one process's {want.item()}"
            if rank == n - 1:
                print(f"step {step}: loss {got:.6f} (one process: {want.item():.6f})", flush=True)
    for j, i in enumerate(mine):
        for name, w, ref in tp.matching(stage[j].mlp, reference[i].mlp, tp_group, "data"):
            diff = (w - ref).abs().max().item()
            worst = max(worst, diff)
            assert diff <= 1e-5, f"rank {rank}: block {i} {name} differs from one process's by {diff:.2e}"
    every = [torch.zeros(1) for _ in range(n)]
    dist.all_gather(every, torch.tensor([worst]))
    if rank == 0:
        print(f"3D parallelism, {args.dp} (data) x {args.tp} (tensor) x {args.pp} (pipeline) = {n} ranks: "
              f"{args.steps} steps equal one process's training within {max(e.item() for e in every):.1e}")
    finish("three_d")


if __name__ == "__main__":
    main()
