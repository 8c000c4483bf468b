"""Step time of zcoll_torch.zero beside DDP (on the zcoll backend and on gloo), and the engine's CPU
AdamW beside torch.optim.AdamW (foreach) on the same shard. A benchmark, not a test.

    PYTHONPATH=build/integrations/torch build/tools/zcoll-run -n 2 /usr/bin/python3 examples/torch_zero/bench_step.py

Each round runs every variant once, in an order that alternates round by round; the table gives the
median over rounds of the per-step time and of its ratio to DDP on zcoll (per round, then the median).
The AdamW lines time the optimizer alone on this rank's stage-2 shard, with the threads the engine
gives each rank (the host's cores / ranks): the engine's CPU AdamW (zcoll_torch._C.cpu_adam_step, the
kernel of its step) against torch.optim.AdamW(foreach=True) on tensors split as the model's; and the
engine's whole optimizer phase (its counter: unscale, gradient norm and its all-reduce, AdamW).
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import zcoll_torch.zero as deepspeed
from zcoll_torch import _C

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt import GPT, batch, load_text, param_groups  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def ddp_step_times(args, data, group):
    rank, n = dist.get_rank(), dist.get_world_size()
    m = GPT(layers=args.layers, width=args.width, context=args.context)
    ddp = torch.nn.parallel.DistributedDataParallel(m, process_group=group)
    opt = torch.optim.AdamW(param_groups(m), lr=1e-3, foreach=True)
    times = []
    for s in range(args.warmup + args.steps):
        x, y = batch(data, s, args.rows, args.context, rank, n)
        t0 = time.perf_counter()
        ddp(x, y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    return times[args.warmup:]


def zero_step_times(args, data, stage):
    rank, n = dist.get_rank(), dist.get_world_size()
    m = GPT(layers=args.layers, width=args.width, context=args.context)
    cfg = {"train_batch_size": args.rows, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": stage, "overlap_comm": True, "reduce_bucket_size": args.bucket}}
    engine, _, _, _ = deepspeed.initialize(model=m, model_parameters=param_groups(m), config=cfg)
    times = []
    for s in range(args.warmup + args.steps):
        x, y = batch(data, s, args.rows, args.context, rank, n)
        if s == args.warmup:
            opt0 = engine.engine_stats()["optimizer_seconds"]
        t0 = time.perf_counter()
        engine.backward(engine(x, y))
        engine.step()
        times.append(time.perf_counter() - t0)
    opt_seconds = (engine.engine_stats()["optimizer_seconds"] - opt0) / args.steps
    engine.destroy()
    return times[args.warmup:], opt_seconds


def adamw_seconds(args, numel):
    """Seconds per step over `numel` elements: (torch.optim.AdamW foreach on tensors split as GPT's
    parameters are, the engine's CPU AdamW on one flat shard), each with the engine's thread count."""
    m = GPT(layers=args.layers, width=args.width, context=args.context)
    total = sum(p.numel() for p in m.parameters())
    params = [torch.nn.Parameter(torch.randn(max(1, p.numel() * numel // total))) for p in m.parameters()]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, lr=1e-3, foreach=True)
    threads = max(1, len(os.sched_getaffinity(0)) // dist.get_world_size())
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    flat = [torch.randn(numel) for _ in range(2)] + [torch.zeros(numel) for _ in range(2)]

    def engine_step(k):
        _C.cpu_adam_step(*flat, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01, step=k,
                         threads=threads)

    out = []
    for step in (lambda k: opt.step(), engine_step):
        for k in range(1, 4):
            step(k)
        dist.barrier()
        t0 = time.perf_counter()
        for k in range(4, 4 + args.steps):
            step(k)
        out.append((time.perf_counter() - t0) / args.steps)
    torch.set_num_threads(saved)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.path.join(HERE, "..", "..", "README.md"))
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--rows", type=int, default=8, help="rows per global batch")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per variant and round")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bucket", type=int, default=500_000_000, help="reduce_bucket_size (elements)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    dist.init_process_group("zcoll")
    rank, n = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    data = load_text(args.data)
    variants = {
        "DDP (zcoll)": lambda: ddp_step_times(args, data, None),
        "DDP (gloo)": lambda: ddp_step_times(args, data, gloo),
        "ZeRO stage 1": lambda: zero_step_times(args, data, 1)[0],
        "ZeRO stage 2": lambda: zero_step_times(args, data, 2)[0],
        "ZeRO stage 3": lambda: zero_step_times(args, data, 3)[0],
    }
    medians = {k: [] for k in variants}
    ratios = {k: [] for k in variants}
    names = list(variants)
    for r in range(args.rounds):
        order = names if r % 2 == 0 else names[::-1]
        round_ms = {}
        for name in order:
            dist.barrier()
            round_ms[name] = 1e3 * statistics.median(variants[name]())
        for name in names:
            medians[name].append(round_ms[name])
            ratios[name].append(round_ms[name] / round_ms["DDP (zcoll)"])

    _, opt_seconds = zero_step_times(args, data, 2)
    m = GPT(layers=args.layers, width=args.width, context=args.context)
    shard = (sum(p.numel() for p in m.parameters()) + n - 1) // n
    torch_seconds, kernel_seconds = adamw_seconds(args, shard)
    if rank == 0:
        print(f"# GPT {args.layers}x{args.width}, context {args.context}, {args.rows} rows per step, {n} ranks, "
              f"{args.threads} torch thread(s) per rank; {args.rounds} rounds x {args.steps} steps")
        print(f"{'variant':<14} {'step ms':>8} {'vs DDP zcoll':>13} {'vs DDP gloo':>12}")
        for name in names:
            vs_gloo = statistics.median(a / b for a, b in zip(medians[name], medians["DDP (gloo)"]))
            print(f"{name:<14} {statistics.median(medians[name]):8.2f} {statistics.median(ratios[name]):13.3f} "
                  f"{vs_gloo:12.3f}")
        print(f"AdamW over a {shard}-element shard: torch foreach {1e3 * torch_seconds:.3f} ms, engine's CPU AdamW "
              f"{1e3 * kernel_seconds:.3f} ms ({torch_seconds / kernel_seconds:.1f}x); the engine's whole optimizer "
              f"phase {1e3 * opt_seconds:.3f} ms ({torch_seconds / opt_seconds:.1f}x)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
