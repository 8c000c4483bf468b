"""Pipeline parallelism on zcoll: the model cut into one stage per rank, micro-batches sent forward and
their gradients backward with send/recv (torch.distributed.batch_isend_irecv, as Megatron-LM does).

    build/tools/zcoll-run -n 4 /usr/bin/python3 examples/parallelism/pipeline_parallel.py
    build/tools/zcoll-run -n 4 /usr/bin/python3 examples/parallelism/pipeline_parallel.py --work-ms 20 --steps 5

(PYTHONPATH=build/integrations/torch in a build tree.) Two schedules: GPipe (every micro-batch forward,
then every one backward) and 1F1B (after p - rank - 1 warm-up forwards, one forward and one backward in
turn, so a stage holds at most p micro-batches' activations). Each is checked against the whole model
trained in one process (the loss of every step, each stage's weights), then timed: every stage's busy
fraction (time in its forward and backward over the step's time) beside the schedule's bound
m / (m + p - 1) for m micro-batches on p stages. --work-ms adds that much compute time per micro-batch
forward (twice that backward), as a GPU's kernels would take: on a host with fewer cores than stages
the stages' real compute would queue for the cores and blur the schedule.
"""
import copy
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import finish, start  # noqa: E402
from pipeline import Pipeline, make_model, split  # noqa: E402


def reference_step(model, opt, inputs, targets, micro):
    """The same step in one process: the mean of the micro-batches' losses."""
    opt.zero_grad()
    losses = [F.mse_loss(model(x), y) / micro for x, y in zip(inputs.chunk(micro), targets.chunk(micro))]
    total = sum(losses)
    total.backward()
    opt.step()
    return total.item()


def data(step, rows, width):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(rows, width, generator=g), torch.randn(rows, width, generator=g)


def main():
    args, rank, p = start(__doc__, micro=(int, 4, "micro-batches per step"), steps=(int, 4, "steps per schedule"),
                          width=(int, 64, "model width"), layers_per_stage=(int, 2, "Linear layers per stage"),
                          work_ms=(float, 0.0, "compute time added per micro-batch forward (twice backward)"))
    rows = 8 * args.micro

    # Correctness: both schedules against one process, step by step.
    worst = 0.0
    for schedule in ("gpipe", "1f1b"):
        torch.manual_seed(0)
        full = make_model(p * args.layers_per_stage, args.width)
        reference = copy.deepcopy(full)
        pipe = Pipeline(split(full, rank, p), dist.group.WORLD, list(range(p)), schedule)
        opt = torch.optim.SGD(pipe.stage.parameters(), lr=0.05, momentum=0.9)
        ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
        for step in range(args.steps):
            inputs, targets = data(step, rows, args.width)
            opt.zero_grad()
            loss = pipe.step(inputs, targets, args.micro)
            opt.step()
            want = reference_step(reference, ref_opt, inputs, targets, args.micro)
            if pipe.last:
                worst = max(worst, abs(loss - want) / abs(want))
                assert abs(loss - want) <= 1e-5 * abs(want), f"{schedule} step {step}: loss {loss} != {want}"
        mine = dict(pipe.stage.named_parameters())
        for name, w in reference.named_parameters():
            if name in mine:
                diff = (mine[name] - w).abs().max().item()
                worst = max(worst, diff)
                assert diff <= 1e-5, f"{schedule}: stage {rank} weight {name} differs by {diff:.2e}"

    # The schedules' busy fractions.
    rows_out = []
    for schedule, micro in (("gpipe", 1), ("gpipe", args.micro), ("1f1b", args.micro)):
        torch.manual_seed(0)
        pipe = Pipeline(split(make_model(p * args.layers_per_stage, args.width), rank, p), dist.group.WORLD,
                        list(range(p)), schedule, work_ms=args.work_ms)
        busy = []
        for step in range(args.steps + 1):
            inputs, targets = data(step, 8 * micro, args.width)
            dist.barrier()
            t0, pipe.busy = time.perf_counter(), 0.0
            pipe.step(inputs, targets, micro)
            dist.barrier()
            if step > 0:  # the first step warms up
                busy.append(pipe.busy / (time.perf_counter() - t0))
        frac = torch.tensor([sorted(busy)[len(busy) // 2]])
        every = [torch.zeros(1) for _ in range(p)]
        dist.all_gather(every, frac)
        rows_out.append((schedule, micro, [f.item() for f in every], micro / (micro + p - 1)))
    if rank == 0:
        print(f"pipeline over {p} stages: GPipe and 1F1B equal one process's training within {worst:.1e}")
        print(f"busy fraction per stage (median of {args.steps} steps; --work-ms {args.work_ms:g}):")
        print("| schedule | micro-batches | " + " | ".join(f"stage {s}" for s in range(p)) + " | mean | bound m/(m+p-1) |")
        print("| --- | --- | " + " | ".join("---" for _ in range(p)) + " | --- | --- |")
        for schedule, micro, fr, bound in rows_out:
            print(f"| {schedule} | {micro} | " + " | ".join(f"{f:.0%}" for f in fr) +
                  f" | {sum(fr) / len(fr):.0%} | {bound:.0%} |")
    finish("pipeline_parallel")


if __name__ == "__main__":
    main()
