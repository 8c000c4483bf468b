"""The parameter server beside all-reduce, on zcoll: the scheme data-parallel training used before
all-reduce replaced it, and why it did.

    for n in 2 4 8; do build/tools/zcoll-run -n $n /usr/bin/python3 examples/parallelism/parameter_server.py; done

(PYTHONPATH=build/integrations/torch in a build tree.) Rank 0 is the server and a worker. Each step,
every worker computes the gradient of its share of the batch, and then:
- ps (send/recv): each worker pushes its gradient to the server, which sums them, updates the weights
  and sends them back to each worker: the server moves 2 (N-1) S bytes per step (S: the model's bytes),
  a worker 2 S;
- ps (reduce + broadcast): push and sum with zcoll's reduce to the server, replicate with its broadcast;
- all-reduce: every rank gets the summed gradient (zcoll's ring moves 2 (N-1)/N S per rank in each
  direction, whatever N) and updates its own copy.
All three are checked against one process training on the whole batch (the same weights after every
step), then timed; rank 0 prints one row of the table in examples/parallelism/README.md.
"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import finish, start  # noqa: E402



def gradient(w, x, y):
    """The gradient of the mean squared error of the linear model x w ~ y, summed over x's rows."""
    return 2.0 * x.t() @ (x @ w - y)


def ps_sendrecv(w, g, lr, rows):
    rank, n = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        total, incoming = g.clone(), torch.empty_like(g)
        for worker in range(1, n):
            dist.recv(incoming, src=worker)
            total += incoming
        w -= lr * total / rows
        for worker in range(1, n):
            dist.send(w, dst=worker)
    else:
        dist.send(g, dst=0)
        dist.recv(w, src=0)


def ps_collectives(w, g, lr, rows):
    dist.reduce(g, dst=0)
    if dist.get_rank() == 0:
        w -= lr * g / rows
    dist.broadcast(w, src=0)


def allreduce(w, g, lr, rows):
    dist.all_reduce(g)
    w -= lr * g / rows


SCHEMES = {"ps (send/recv)": ps_sendrecv, "ps (reduce + broadcast)": ps_collectives, "all-reduce": allreduce}


def main():
    args, rank, n = start(__doc__, features=(int, 4096, "the model is features x 256 float32"),
                          steps=(int, 20, "timed steps per scheme"))
    outputs, rows = 256, 8
    g = torch.Generator().manual_seed(0)
    x_all = torch.randn(n * rows, args.features, generator=g)
    y_all = torch.randn(n * rows, outputs, generator=g)
    w0 = 0.01 * torch.randn(args.features, outputs, generator=g)
    x, y = x_all[rank * rows:(rank + 1) * rows], y_all[rank * rows:(rank + 1) * rows]
    lr = 0.01

    # Correctness: three steps of each scheme against one process on the whole batch.
    want = w0.clone()
    for _ in range(3):
        want -= lr * gradient(want, x_all, y_all) / (n * rows)
    for name, scheme in SCHEMES.items():
        w = w0.clone()
        for _ in range(3):
            scheme(w, gradient(w, x, y), lr, n * rows)
        diff = ((w - want).abs().max() / want.abs().max()).item()
        assert diff <= 1e-5, f"{name}: weights differ from one process's by {diff:.2e}"

    # Time per step of the exchange and the update (the gradient's compute, the same in every scheme and
    # queued for the cores when ranks outnumber them, is left out).
    times, g0 = {}, gradient(w0, x, y)
    for name, scheme in SCHEMES.items():
        w, samples = w0.clone(), []
        for step in range(args.steps + 2):
            g = g0.clone()
            dist.barrier()
            t0 = time.perf_counter()
            scheme(w, g, lr, n * rows)
            dist.barrier()
            if step >= 2:
                samples.append(time.perf_counter() - t0)
        times[name] = statistics.median(samples)
    model = args.features * outputs * 4
    if rank == 0:
        print(f"model {model / 2**20:.0f} MiB, {n} ranks: bytes per step through the server (ps) "
              f"{2 * (n - 1) * model / 2**20:.0f} MiB, through each rank (all-reduce, ring) "
              f"{2 * 2 * (n - 1) / n * model / 2**20:.1f} MiB")
        print(f"| {n} | {2 * (n - 1) * model / 2**20:.0f} | {4 * (n - 1) / n * model / 2**20:.1f} | " +
              " | ".join(f"{t * 1e3:.2f}" for t in times.values()) + " |")
    finish("parameter_server")


if __name__ == "__main__":
    main()
