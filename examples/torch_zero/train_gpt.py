"""Trains a small byte-level GPT with ZeRO, written as a DeepSpeed script: only the import differs.

    torchrun --nproc_per_node 4 examples/torch_zero/train_gpt.py --deepspeed_config examples/torch_zero/ds_config.json
    build/tools/zcoll-run -n 4 /usr/bin/python3 examples/torch_zero/train_gpt.py --deepspeed_config ...

(PYTHONPATH=build/integrations/torch in a build tree.) Rank 0 prints the loss, averaged over ranks, per step.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

import zcoll_torch.zero as deepspeed  # instead of: import deepspeed

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt import GPT, batch, load_text, param_groups  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deepspeed_config", default=os.path.join(HERE, "ds_config.json"))
    ap.add_argument("--data", default=os.path.join(HERE, "..", "..", "README.md"), help="a text file")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--rows", type=int, help="rows per global batch (default: the config's micro-batch x ranks)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--save", help="checkpoint directory, written at the end")
    ap.add_argument("--load", help="checkpoint directory to resume from")
    args = ap.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("zcoll")  # torchrun's or zcoll-run's environment
    rank, ranks = dist.get_rank(), dist.get_world_size()
    model = GPT(layers=args.layers, width=args.width, context=args.context)
    engine, optimizer, _, scheduler = deepspeed.initialize(args=args, model=model,
                                                           model_parameters=param_groups(model))
    start = 0
    if args.load:
        _, client = engine.load_checkpoint(args.load)
        start = client["step"] if client else 0
    data = load_text(args.data)
    rows = args.rows or engine.train_micro_batch_size_per_gpu() * ranks
    t0 = time.perf_counter()
    for step in range(start, start + args.steps):
        for micro in range(engine.gradient_accumulation_steps()):
            x, y = batch(data, step * 1000 + micro, rows, args.context, rank, ranks)
            loss = engine(x, y)
            engine.backward(loss)
            engine.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        if rank == 0:
            print(f"step {step + 1} loss {mean.item() / ranks:.4f} lr {engine.get_lr()[0]:.2e}", flush=True)
    if rank == 0:
        ms = (time.perf_counter() - t0) * 1e3 / max(args.steps, 1)
        print(f"{args.steps} steps, {ms:.1f} ms per step, stage {engine.zero_optimization_stage()}, {ranks} ranks")
    if args.save:
        engine.save_checkpoint(args.save, client_state={"step": start + args.steps})
    engine.destroy()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
