"""A pipeline stage and its schedules (GPipe, 1F1B) on torch.distributed send/recv; used by
pipeline_parallel.py and three_d.py."""
import collections
import copy
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F


def make_model(layers, width):
    """The whole model: `layers` Linear layers of width x width with GELU between them."""
    mods = []
    for i in range(layers):
        mods.append(torch.nn.Linear(width, width))
        if i + 1 < layers:
            mods.append(torch.nn.GELU())
    return torch.nn.Sequential(*mods)


def split(full, index, p):
    """Stage `index` of p of a model made by make_model: an equal share of its Linear layers, with the
    activations between them (a slice of a Sequential keeps the whole model's parameter names)."""
    linear = [i for i, m in enumerate(full) if isinstance(m, torch.nn.Linear)]
    per = len(linear) // p
    end = linear[(index + 1) * per] if index + 1 < p else len(full)
    return copy.deepcopy(full[linear[index * per]:end])


class Pipeline:
    """This rank's `stage` in the pipeline of `ranks` (global ranks, first stage first). step() runs one
    training step's forward and backward passes over the micro-batches; gradients accumulate in the
    stage's parameters, the caller steps its optimizer. The loss is the mean squared error, averaged
    over the micro-batches."""

    def __init__(self, stage, group, ranks, schedule="1f1b", work_ms=0.0):
        self.stage, self.group, self.ranks, self.schedule, self.work = stage, group, ranks, schedule, work_ms / 1000.0
        self.p = len(ranks)
        self.index = ranks.index(dist.get_rank())
        self.first, self.last = self.index == 0, self.index == self.p - 1
        self.busy = 0.0  # seconds in forward and backward, summed over steps

    def _p2p(self, sends=(), recvs=()):
        ops = [dist.P2POp(dist.isend, t, peer, self.group) for t, peer in sends]
        ops += [dist.P2POp(dist.irecv, t, peer, self.group) for t, peer in recvs]
        if ops:
            for req in dist.batch_isend_irecv(ops):
                req.wait()

    def step(self, inputs, targets, micro):
        xs, ys = inputs.chunk(micro), targets.chunk(micro)
        shape = xs[0].shape
        prev = self.ranks[self.index - 1] if not self.first else None
        nxt = self.ranks[self.index + 1] if not self.last else None
        pending = collections.deque()  # (input, output) of the micro-batches awaiting their backward
        total = 0.0

        def fresh():
            return torch.empty(shape)

        def forward(i, x):
            nonlocal total
            start = time.perf_counter()
            if not self.first:
                x.requires_grad_(True)
            out = self.stage(x)
            if self.last:
                out = F.mse_loss(out, ys[i]) / micro
                total += out.item()
            time.sleep(self.work)
            self.busy += time.perf_counter() - start
            pending.append((x, out))
            return out.detach()

        def backward(grad):
            start = time.perf_counter()
            x, out = pending.popleft()
            out.backward(grad)
            time.sleep(2 * self.work)
            self.busy += time.perf_counter() - start
            return None if self.first else x.grad

        def recv_forward(i):
            if self.first:
                return xs[i]
            x = fresh()
            self._p2p(recvs=[(x, prev)])
            return x

        warm = micro if self.schedule == "gpipe" else min(self.p - self.index - 1, micro)
        rest = micro - warm
        for i in range(warm):
            out = forward(i, recv_forward(i))
            if not self.last:
                self._p2p(sends=[(out, nxt)])
        x = recv_forward(warm) if rest > 0 else None
        for k in range(rest):  # one forward, one backward
            out = forward(warm + k, x)
            grad = None
            if not self.last:
                grad = fresh()
                self._p2p(sends=[(out, nxt)], recvs=[(grad, nxt)])
            gx = backward(grad)
            sends = [(gx, prev)] if not self.first else []
            if k + 1 < rest:
                if self.first:
                    x = xs[warm + k + 1]
                    self._p2p(sends=sends)
                else:
                    x = fresh()
                    self._p2p(sends=sends, recvs=[(x, prev)])
            else:
                self._p2p(sends=sends)
        for _ in range(warm):  # the backward passes left
            grad = None
            if not self.last:
                grad = fresh()
                self._p2p(recvs=[(grad, nxt)])
            gx = backward(grad)
            if not self.first:
                self._p2p(sends=[(gx, prev)])
        return total if self.last else None
