"""One rank of a zcoll_torch test job: python3 worker.py SCENARIO (torchrun's env:// variables).

Scenarios (each rank prints "OK <scenario>" at the end, or raises):
  ops    every operation on zcoll beside gloo (or beside the reference where gloo has no such
         operation), several dtypes and sizes, element by element
  ddp    DistributedDataParallel, 20 steps on zcoll and on gloo: the same parameters (plain, and
         with the PowerSGD communication hook)
  zero   torch.distributed.optim.ZeroRedundancyOptimizer on zcoll and on gloo: the same parameters
  kill   rank 1 dies mid-training; the others must raise within the timeout (ZCOLL_TEST_TIMEOUT_S)
  errors bad arguments raise a RuntimeError naming them; the group stays usable
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
import zcoll_torch  # registers the backend

R = dist.ReduceOp
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]


def data(rank, shape, dtype, op=None, salt=0):
    """Integer-valued data (so that every reduction order gives exact results), the same on every
    rank for a given (rank, shape, dtype, salt)."""
    g = torch.Generator().manual_seed(1000 * rank + 17 * salt + 3)
    n = 1
    for s in shape:
        n *= s
    if dtype == torch.bool:
        return (torch.randint(0, 2, (n,), generator=g) == 1).reshape(shape)
    if op is not None and op == R.PRODUCT:  # small factors: products stay exact (and within int8) on 4 ranks
        v = torch.randint(1, 3, (n,), generator=g)
        if dtype not in (torch.uint8,):
            v = v * (1 - 2 * torch.randint(0, 2, (n,), generator=g))
    else:
        lo = 0 if dtype == torch.uint8 else -30
        v = torch.randint(lo, 31, (n,), generator=g)
    return v.to(dtype).reshape(shape)


def same(a, b, what):
    if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
        diff = (a.to(torch.float64) - b.to(torch.float64)).abs()
        raise AssertionError(f"{what}: zcoll and the reference differ (dtype {a.dtype}/{b.dtype}, shape "
                             f"{tuple(a.shape)}/{tuple(b.shape)}, max abs diff {diff.max().item() if diff.numel() else 0})")


def gv(t):
    """gloo moves no bool or int16 tensors: it gets their bytes (a view: results land in t)."""
    if t is None:
        return None
    if isinstance(t, list):
        return [gv(x) for x in t]
    return t.view(torch.uint8) if t.dtype in (torch.bool, torch.int16) else t


def reference_reduce(tensors, op):
    acc = tensors[0].clone()
    for t in tensors[1:]:
        if op == R.SUM:
            acc = acc + t
        elif op == R.PRODUCT:
            acc = acc * t
        elif op == R.MIN:
            acc = torch.minimum(acc, t)
        elif op == R.MAX:
            acc = torch.maximum(acc, t)
    return acc.to(tensors[0].dtype)


def scenario_ops(rank, n, gloo):
    sizes = [0, 1, 7, 1000, 300_000]
    checks = 0
    # all_reduce: every dtype x op, beside gloo; AVG (gloo has none) beside the reference.
    for dtype in FLOATS + INTS:
        for op in (R.SUM, R.PRODUCT, R.MIN, R.MAX):
            for size in sizes:
                if op == R.PRODUCT and size > 1000:
                    continue
                z = data(rank, (size,), dtype, op)
                g = z.clone()
                dist.all_reduce(z, op=op)
                try:
                    dist.all_reduce(g, op=op, group=gloo)
                except RuntimeError:  # a dtype gloo cannot reduce: the reference instead
                    g = reference_reduce([data(r, (size,), dtype, op) for r in range(n)], op)
                same(z, g, f"all_reduce {dtype} {op} {size}")
                checks += 1
        z = data(rank, (1000,), dtype)
        dist.all_reduce(z, op=R.AVG)
        total = sum(data(r, (1000,), dtype).to(torch.float64) for r in range(n))
        ref = (total / n) if dtype.is_floating_point else torch.div(total, n, rounding_mode="trunc")
        if dtype.is_floating_point:
            torch.testing.assert_close(z.to(torch.float64), ref, rtol=1e-2, atol=1e-2)
        else:
            same(z, ref.to(dtype), f"all_reduce {dtype} AVG")
        checks += 1
    # dtypes zcoll has no type for: int16 (reduced as int32), bool (or/and), complex (as real pairs).
    for dtype, op in ((torch.int16, R.SUM), (torch.int16, R.MAX), (torch.bool, R.SUM), (torch.bool, R.PRODUCT),
                      (torch.bool, R.MAX), (torch.bool, R.MIN)):
        z = data(rank, (777,), dtype, op)
        dist.all_reduce(z, op=op)
        tensors = [data(r, (777,), dtype, op) for r in range(n)]
        if dtype == torch.bool:
            ref = tensors[0]
            for t in tensors[1:]:
                ref = (ref | t) if op in (R.SUM, R.MAX) else (ref & t)
        else:
            ref = reference_reduce(tensors, op)
        same(z, ref, f"all_reduce {dtype} {op}")
        checks += 1
    z = torch.complex(data(rank, (500,), torch.float32), data(rank, (500,), torch.float32, salt=1))
    ref = sum(torch.complex(data(r, (500,), torch.float32), data(r, (500,), torch.float32, salt=1)) for r in range(n))
    dist.all_reduce(z)
    same(z, ref, "all_reduce complex64")
    # Non-contiguous tensors (a strided view, a transposed matrix) are staged and written back.
    base = data(rank, (64, 10), torch.float32)
    view = base[:, ::2]
    dist.all_reduce(view)
    ref = sum(data(r, (64, 10), torch.float32) for r in range(n))
    same(base[:, ::2], ref[:, ::2], "all_reduce of a strided view")
    same(base[:, 1::2], data(rank, (64, 10), torch.float32)[:, 1::2], "elements outside the view")
    tz = data(rank, (33, 17), torch.float64).t()
    dist.all_reduce(tz)
    same(tz, sum(data(r, (33, 17), torch.float64) for r in range(n)).t(), "all_reduce of a transposed tensor")
    checks += 3
    # all_reduce_coalesced.
    ts = [data(rank, (s,), torch.float32, salt=s) for s in (3, 100, 5000)]
    dist.all_reduce_coalesced(ts)
    for t, s in zip(ts, (3, 100, 5000)):
        same(t, sum(data(r, (s,), torch.float32, salt=s) for r in range(n)), "all_reduce_coalesced")
    checks += 1

    for dtype in (torch.float32, torch.float16, torch.int64, torch.uint8, torch.bool, torch.int16):
        for size in (1, 5, 4099, 270_000):  # (gloo dies of SIGFPE on empty all_gathers)
            x = data(rank, (size,), dtype)
            # broadcast from every root, beside gloo
            for root in range(n):
                z = x.clone()
                g = x.clone()
                dist.broadcast(z, root)
                dist.broadcast(gv(g), root, group=gloo)
                same(z, g, f"broadcast {dtype} {size} root {root}")
            # all_gather (list) and all_gather_into_tensor, beside gloo's all_gather
            zl = [torch.empty_like(x) for _ in range(n)]
            gl = [torch.empty_like(x) for _ in range(n)]
            dist.all_gather(zl, x)
            dist.all_gather(gv(gl), gv(x), group=gloo)
            for a, b in zip(zl, gl):
                same(a, b, f"all_gather {dtype} {size}")
            flat = torch.empty(n * size, dtype=dtype)
            dist.all_gather_into_tensor(flat, x)
            same(flat, torch.cat(gl), f"all_gather_into_tensor {dtype} {size}")
            # gather and scatter at root n-1, beside gloo
            root = n - 1
            zl = [torch.empty_like(x) for _ in range(n)] if rank == root else None
            gl = [torch.empty_like(x) for _ in range(n)] if rank == root else None
            dist.gather(x, zl, dst=root)
            dist.gather(gv(x), gv(gl), dst=root, group=gloo)
            if rank == root:
                for a, b in zip(zl, gl):
                    same(a, b, f"gather {dtype} {size}")
            src = [data(rank, (size,), dtype, salt=k) for k in range(n)] if rank == 0 else None
            zo, go = torch.empty_like(x), torch.empty_like(x)
            dist.scatter(zo, src, src=0)
            dist.scatter(gv(go), gv(src), src=0, group=gloo)
            same(zo, go, f"scatter {dtype} {size}")
            # all_to_all_single, even, beside gloo
            a = data(rank, (n * size,), dtype, salt=7)
            zo, go = torch.empty_like(a), torch.empty_like(a)
            dist.all_to_all_single(zo, a)
            dist.all_to_all_single(gv(go), gv(a), group=gloo)
            same(zo, go, f"all_to_all_single {dtype} {size}")
            checks += 6
    # Empty tensors: every operation accepts them.
    e = torch.empty(0)
    dist.broadcast(e, 0)
    dist.all_gather([torch.empty(0) for _ in range(n)], e)
    dist.all_gather_into_tensor(torch.empty(0), e)
    dist.gather(e, [torch.empty(0) for _ in range(n)] if rank == 0 else None, dst=0)
    dist.scatter(e, [torch.empty(0) for _ in range(n)] if rank == 0 else None, src=0)
    dist.all_to_all_single(torch.empty(0), e)
    dist.reduce_scatter_tensor(torch.empty(0), e)
    dist.reduce(e, 0)
    checks += 1
    # reduce to each root, beside gloo; reduce_scatter(_tensor), beside gloo's all_reduce sliced.
    for dtype in (torch.float32, torch.int32, torch.bfloat16, torch.int8):
        for op in (R.SUM, R.MAX, R.PRODUCT):
            for size in (1, 1000, 100_000):
                if op == R.PRODUCT and size > 1000:
                    continue
                for root in range(n):
                    z = data(rank, (size,), dtype, op)
                    g = z.clone()
                    dist.reduce(z, root, op=op)
                    try:
                        dist.reduce(g, root, op=op, group=gloo)
                    except RuntimeError:
                        g = reference_reduce([data(r, (size,), dtype, op) for r in range(n)], op)
                    if rank == root:
                        same(z, g, f"reduce {dtype} {op} {size} root {root}")
                full = data(rank, (n * size,), dtype, op)
                try:
                    whole = full.clone()
                    dist.all_reduce(whole, op=op, group=gloo)
                except RuntimeError:
                    whole = reference_reduce([data(r, (n * size,), dtype, op) for r in range(n)], op)
                mine = whole[rank * size:(rank + 1) * size]
                zo = torch.empty(size, dtype=dtype)
                dist.reduce_scatter_tensor(zo, full, op=op)
                same(zo, mine, f"reduce_scatter_tensor {dtype} {op} {size}")
                zo = torch.empty(size, dtype=dtype)
                dist.reduce_scatter(zo, list(full.chunk(n)), op=op)
                same(zo, mine, f"reduce_scatter {dtype} {op} {size}")
                checks += 3
    # all_to_all_single with uneven splits (rank r sends r+k+1 rows to rank k), beside gloo.
    for dtype in (torch.float32, torch.int64):
        in_splits = [rank + k + 1 for k in range(n)]
        out_splits = [k + rank + 1 for k in range(n)]
        a = data(rank, (sum(in_splits), 3), dtype, salt=11)
        zo = torch.empty(sum(out_splits), 3, dtype=dtype)
        go = torch.empty_like(zo)
        dist.all_to_all_single(zo, a, out_splits, in_splits)
        dist.all_to_all_single(go, a, out_splits, in_splits, group=gloo)
        same(zo, go, f"all_to_all_single uneven {dtype}")
        if dtype.is_floating_point:
            # Into an output that requires grad, run by the worker (nobody waits for it at once): the
            # bytes are written as gloo writes them, without autograd.
            zg = torch.zeros(sum(out_splits), 3, dtype=dtype, requires_grad=True)
            w = dist.all_to_all_single(zg, a, out_splits, in_splits, async_op=True)
            time.sleep(0.02)
            w.wait()
            same(zg.detach(), go, f"all_to_all_single uneven into a tensor that requires grad {dtype}")
            checks += 1
        # all_to_all (lists of different sizes), beside the reference
        ins = [data(rank, (rank + k + 2,), dtype, salt=k) for k in range(n)]
        outs = [torch.empty(k + rank + 2, dtype=dtype) for k in range(n)]
        dist.all_to_all(outs, ins)
        for k in range(n):
            same(outs[k], data(k, (k + rank + 2,), dtype, salt=rank), f"all_to_all {dtype} from {k}")
        checks += 2
        if dtype.is_floating_point:  # outputs that require grad: written as bytes (this rank's too)
            outs = [torch.zeros(k + rank + 2, dtype=dtype, requires_grad=True) for k in range(n)]
            dist.all_to_all(outs, ins)
            for k in range(n):
                same(outs[k].detach(), data(k, (k + rank + 2,), dtype, salt=rank), f"all_to_all {dtype} requires grad")
            checks += 1
    # send/recv around the ring (blocking and isend/irecv), and a symmetric exchange of 4 MiB with
    # batch_isend_irecv (both ranks send first: only a batch makes that safe).
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    for size in (1, 1000, 1 << 20):
        x = data(rank, (size,), torch.float32)
        y = torch.empty(size)
        if rank % 2 == 0:
            dist.send(x, nxt)
            dist.recv(y, prv)
        else:
            dist.recv(y, prv)
            dist.send(x, nxt)
        same(y, data(prv, (size,), torch.float32), f"send/recv {size}")
        y = torch.empty(size)
        ops = [dist.P2POp(dist.isend, x, nxt), dist.P2POp(dist.irecv, y, prv)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        same(y, data(prv, (size,), torch.float32), f"batch_isend_irecv {size}")
        checks += 2
    # async_op: several in flight, then wait; futures carry the outputs.
    xs = [data(rank, (10_000,), torch.float32, salt=k) for k in range(4)]
    works = [dist.all_reduce(x, async_op=True) for x in xs]
    fut = works[-1].get_future().then(lambda f: f.value()[0] * 2)
    for w in works:
        w.wait()
        assert w.is_completed() and w.is_success()
    for k, x in enumerate(xs):
        same(x, sum(data(r, (10_000,), torch.float32, salt=k) for r in range(n)), f"async all_reduce {k}")
    same(fut.wait(), xs[-1] * 2, "future .then")
    # A future first asked for after its work ran is made complete.
    late = works[0].get_future()
    assert late.done(), "get_future() after wait(): not done"
    same(late.wait()[0], xs[0], "future after wait")
    checks += 6
    dist.barrier()
    print(f"rank {rank}: {checks} checks", flush=True)


def train(pg, steps, zero=False, powersgd=False):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=pg, bucket_cap_mb=0.01)
    if powersgd:  # its callbacks issue all-reduces and wait for them inside a future callback
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
        state = psgd.PowerSGDState(process_group=pg, matrix_approximation_rank=2, start_powerSGD_iter=2,
                                   min_compression_rate=0.5, random_seed=0)
        ddp.register_comm_hook(state, psgd.powerSGD_hook)
    if zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=1e-2, process_group=pg)
    else:
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(dist.get_rank(pg))
    for _ in range(steps):
        x = torch.randn(16, 20, generator=g)
        y = torch.randn(16, 8, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def compare_training(rank, n, gloo, zero, powersgd=False):
    a = train(None, 20, zero, powersgd)
    b = train(gloo, 20, zero, powersgd)
    for pa, pb in zip(a, b):
        torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-6)
    # and every rank holds the same model
    for p in a:
        q = p.clone()
        dist.broadcast(q, 0)
        same(p, q, "parameters equal on every rank")
    moved = sum(float((p - q).abs().sum()) for p, q in zip(a, train(None, 0, zero)))
    assert moved > 0, "training did not change the parameters"


def scenario_kill(rank, n, gloo):
    timeout = float(os.environ.get("ZCOLL_TEST_TIMEOUT_S", "5"))
    t = torch.ones(1000)
    start = None
    try:
        for step in range(100000):
            if step == 50 and rank == 1:
                os._exit(3)  # dies without a word, mid-training
            if step == 50:
                start = time.monotonic()
            dist.all_reduce(t)
            t.fill_(1)
    except RuntimeError as e:
        took = time.monotonic() - start
        print(f"rank {rank}: raised after {took:.2f} s (timeout {timeout} s): {str(e).splitlines()[0]}", flush=True)
        assert took <= timeout + 5, f"took {took:.1f} s"
        os._exit(0)  # the group is dead; skip its teardown
    raise AssertionError("no error although rank 1 died")


def expect_error(fn, *words):
    try:
        fn()
    except (RuntimeError, ValueError) as e:
        msg = str(e)
        for w in words:
            assert w in msg, f"error message {msg!r} does not name {w!r}"
        return
    raise AssertionError(f"no error; expected one naming {words}")


def scenario_errors(rank, n, gloo):
    expect_error(lambda: dist.all_reduce(torch.ones(3), op=R.BAND), "BAND")
    expect_error(lambda: dist.reduce(torch.ones(3, dtype=torch.complex64), 0, op=R.MAX), "MAX", "complex")
    expect_error(lambda: dist.all_reduce(torch.ones(3, dtype=torch.bool), op=R.AVG), "AVG", "bool")
    expect_error(lambda: dist.all_reduce(torch.ones(1).expand(4)), "share memory")
    expect_error(lambda: dist.all_gather_into_tensor(torch.empty(3), torch.ones(2)), "output")
    expect_error(lambda: dist.reduce_scatter_tensor(torch.empty(2), torch.ones(2 * n + 1)), "input")
    expect_error(lambda: dist.all_to_all_single(torch.empty(n + 1), torch.ones(n + 1)), "split")
    expect_error(lambda: dist.all_gather([torch.empty(2)] * (n + 1), torch.ones(2)), "output list")
    # tools/bench-torch's C++ loop: the group's own interface, each op waited for.
    g = dist.distributed_c10d._get_default_group()
    if hasattr(g, "_get_backend"):  # torch 2.x: the group holds the backend
        g = g._get_backend(torch.device("cpu"))
    expect_error(lambda: zcoll_torch._C._allreduce_loop(g, torch.ones(2), -1), "iters")
    t = torch.ones(4)
    zcoll_torch._C._allreduce_loop(g, t, 3)
    same(t, torch.full((4,), float(n ** 3)), "_allreduce_loop")
    # still usable after refused calls (they never reached zcoll)
    t = torch.ones(5)
    dist.all_reduce(t)
    same(t, torch.full((5,), float(n)), "all_reduce after refused calls")
    print(f"rank {rank}: errors OK", flush=True)


def main():
    scenario = sys.argv[1]
    timeout = datetime.timedelta(seconds=float(os.environ.get("ZCOLL_TEST_TIMEOUT_S", "120")))
    dist.init_process_group("zcoll", timeout=timeout)
    rank, n = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo", timeout=timeout)
    if scenario == "ops":
        scenario_ops(rank, n, gloo)
    elif scenario == "ddp":
        compare_training(rank, n, gloo, zero=False)
        compare_training(rank, n, gloo, zero=False, powersgd=True)
    elif scenario == "zero":
        compare_training(rank, n, gloo, zero=True)
    elif scenario == "kill":
        scenario_kill(rank, n, gloo)
    elif scenario == "errors":
        scenario_errors(rank, n, gloo)
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    dist.destroy_process_group()
    print(f"OK {scenario}", flush=True)


if __name__ == "__main__":
    main()
