"""One rank of zcoll_torch.zero's tests (test_zero.py starts them with torchrun's variables).

Scenarios:
  equiv     100 steps of examples/torch_zero's GPT (two param groups, a frozen token embedding, a torch
            lr scheduler, gradient clipping) at every stage, 2+offload and 3+offload: the loss per step
            and the final parameters equal DDP + torch.optim.AdamW on the zcoll backend (fp32); bf16
            follows the fp32 curve; the engine's bytes follow zcoll-zero-estimate
  accum     gradient accumulation (4 micro-batches) and no_sync at stages 0-1 equal DDP's
  save DIR  train 5 steps at this rank count, save (client_state), train 5 more: rank 0 writes the
            losses of steps 6-10 into DIR/curve.json
  load DIR  load DIR's checkpoint at this rank count: client_state round-trips and steps 6-10 give the
            saved curve
  stage3mem stage 3: at every forward pre-hook no rank holds more parameter elements than its shard,
            the persistent groups and the live window
  config    DeepSpeed keys: refusals name the key
Prints "OK <scenario>" at the end; any failure raises.
"""
import json
import os
import sys

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples", "torch_zero"))
import zcoll_torch  # noqa: E402,F401
import zcoll_torch.zero as deepspeed  # noqa: E402
from gpt import GPT, batch, param_groups  # noqa: E402

ROWS, CONTEXT = 12, 16  # 12 rows: the same global batch on 2, 3 and 4 ranks
TEXT = torch.tensor(list(open(os.path.join(HERE, "..", "..", "..", "README.md"), "rb").read()), dtype=torch.long)


def model():
    m = GPT(layers=2, width=32, heads=2, context=CONTEXT, seed=3)
    m.tok.weight.requires_grad_(False)  # a frozen embedding (LoRA-style fine-tuning)
    return m


def warmup(step):
    return min(1.0, (step + 1) / 10)


def global_loss(loss):
    t = loss.detach().float().clone()
    dist.all_reduce(t)
    return t.item() / dist.get_world_size()


def reference(steps, accum=1, mean=True):
    """DDP + torch.optim.AdamW on the zcoll backend: the losses per step and the final parameters
    (micro-batches' gradients averaged, or with mean=False summed: DeepSpeed's no_sync with
    gradient_accumulation_steps 1)."""
    div = accum if mean else 1
    rank, n = dist.get_rank(), dist.get_world_size()
    m = model()
    ddp = torch.nn.parallel.DistributedDataParallel(m)
    opt = torch.optim.AdamW(param_groups(m), lr=3e-3, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup)
    losses = []
    for s in range(steps):
        for micro in range(accum):
            x, y = batch(TEXT, s * 100 + micro, ROWS, CONTEXT, rank, n)
            if micro < accum - 1:
                with ddp.no_sync():
                    (ddp(x, y) / div).backward()
            else:
                loss = ddp(x, y)
                (loss / div).backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(global_loss(loss))
    return losses, [p.detach().clone() for p in m.parameters()]


def config(stage, zero=None, **extra):
    z = {"stage": stage, "overlap_comm": True, "reduce_bucket_size": 3000,
         "stage3_param_persistence_threshold": 100, "stage3_prefetch_bucket_size": 4000,
         "stage3_max_live_parameters": 8000, "stage3_max_reuse_distance": 2000}
    z.update(zero or {})
    c = {"train_batch_size": ROWS, "gradient_clipping": 1.0, "zero_optimization": z}
    c.update(extra)
    return c


def train(cfg, steps, accum=1, no_sync=False, engine_out=None):
    rank, n = dist.get_rank(), dist.get_world_size()
    m = model()
    opt = torch.optim.AdamW(param_groups(m), lr=3e-3, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup)
    engine, _, _, _ = deepspeed.initialize(model=m, optimizer=opt, lr_scheduler=sched, config=cfg)
    dtype = engine._dtype
    losses = []
    for s in range(steps):
        for micro in range(accum):
            x, y = batch(TEXT, s * 100 + micro, ROWS, CONTEXT, rank, n)
            if no_sync and micro < accum - 1:
                with engine.no_sync():
                    assert not engine.is_gradient_accumulation_boundary()
                    engine.backward(engine(x, y))
            else:
                loss = engine(x, y)
                engine.backward(loss)
            engine.step()
        losses.append(global_loss(loss))
    with deepspeed.GatheredParameters(list(m.parameters())):
        params = [p.detach().float().clone() for p in m.parameters()]
    assert engine.global_steps == steps, engine.global_steps
    if engine_out is not None:
        engine_out.append(engine)
    else:
        engine.destroy()
    del dtype
    return losses, params


def compare(name, ref, got, loss_rel, param_abs):
    (rl, rp), (gl, gp) = ref, got
    worst = max(abs(a - b) / abs(a) for a, b in zip(rl, gl))
    pworst = max((a - b).abs().max().item() for a, b in zip(rp, gp))
    if dist.get_rank() == 0:
        print(f"{name}: loss {rl[0]:.4f} -> {rl[-1]:.4f}; worst relative loss difference {worst:.2e}, "
              f"parameters {pworst:.2e}", flush=True)
    assert worst <= loss_rel, f"{name}: loss differs by {worst:.2e} relative (bound {loss_rel})"
    assert pworst <= param_abs, f"{name}: parameters differ by {pworst:.2e} (bound {param_abs})"


def scenario_equiv():
    steps = 100
    ref = reference(steps)
    offload = {"offload_optimizer": {"device": "cpu", "pin_memory": True}}
    runs = [("stage 0", 0, {}), ("stage 1", 1, {}), ("stage 2", 2, {}), ("stage 3", 3, {}),
            ("stage 2 + offload", 2, offload), ("stage 3 + offload", 3, dict(offload, offload_param={"device": "cpu"}))]
    for name, stage, zero in runs:
        engines = []
        got = train(config(stage, zero), steps, engine_out=engines)
        compare(name, ref, got, 1e-5, 1e-4)
        check_memory(engines[0], stage, zero)
        engines[0].destroy()
    for stage in (2, 3):
        got = train(config(stage, bf16={"enabled": True}), steps)
        compare(f"stage {stage} bf16", ref, got, 3e-2, 3e-2)


def check_memory(engine, stage, zero):
    """The engine's parameter, gradient and optimizer bytes, measured from the buffers it holds, beside
    the estimator's formula for fp32 (4 bytes of parameter, 4 of gradient, 8 of moments)."""
    n = dist.get_world_size()
    numel = [torch.Size(s).numel() for s in engine._shapes]
    held = sum(numel)
    # Stage 3 keeps frozen groups' slices in its gradient and optimizer shards (not yet split out).
    trained = held if stage == 3 else sum(k for k, f in zip(numel, engine._frozen) if not f)
    mem = engine.engine_memory()
    shard = held / n if stage == 3 else held
    expect_param = 4 * shard
    expect_grad = 4 * (trained if stage <= 1 else trained / n)
    expect_opt = 8 * (trained if stage == 0 else trained / n)
    for what, got, want in (("parameters", mem["param_bytes"], expect_param),
                            ("gradients", mem["grad_bytes"], expect_grad),
                            ("optimizer states", mem["optimizer_bytes"], expect_opt)):
        if stage == 3 and what == "parameters":
            continue  # stage 3 adds its persistent groups' full copies: checked in scenario_stage3mem
        assert abs(got - want) <= 0.05 * want + 64 * 8 * len(engine._params), \
            f"stage {stage}: {what}: {got} bytes held, {want:.0f} expected"


def scenario_accum():
    ref = reference(20, accum=4)
    for stage in (0, 1, 2, 3):
        got = train(config(stage, train_batch_size=ROWS * 4, gradient_accumulation_steps=4), 20, accum=4)
        compare(f"stage {stage}, 4 micro-batches", ref, got, 1e-5, 1e-4)
    ref = reference(20, accum=4, mean=False)
    for stage in (0, 1):
        got = train(config(stage), 20, accum=4, no_sync=True)
        compare(f"stage {stage}, no_sync", ref, got, 1e-5, 1e-4)
    try:
        cfg = config(2)
        m = model()
        engine, _, _, _ = deepspeed.initialize(model=m, model_parameters=param_groups(m),
                                               config=dict(cfg, optimizer={"type": "AdamW"}))
        with engine.no_sync():
            pass
        raise AssertionError("no_sync at stage 2 did not raise")
    except RuntimeError as e:
        assert "no_sync" in str(e) and "stage 2" in str(e), e
    engine.destroy()


def run_from(engine, start, steps):
    rank, n = dist.get_rank(), dist.get_world_size()
    losses = []
    for s in range(start, start + steps):
        x, y = batch(TEXT, s * 100, ROWS, CONTEXT, rank, n)
        loss = engine(x, y)
        engine.backward(loss)
        engine.step()
        losses.append(global_loss(loss))
    return losses


def scenario_save(directory):
    m = model()
    cfg = config(2, optimizer={"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95]}})
    engine, _, _, _ = deepspeed.initialize(model=m, model_parameters=param_groups(m), config=cfg)
    run_from(engine, 0, 5)
    engine.save_checkpoint(directory, client_state={"step": 5, "note": "saved at 4 ranks"})
    curve = run_from(engine, 5, 5)
    if dist.get_rank() == 0:
        with open(os.path.join(directory, "curve.json"), "w") as f:
            json.dump(curve, f)
    engine.destroy()


def scenario_load(directory, stage):
    m = model()
    cfg = config(stage, optimizer={"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95]}})
    engine, _, _, _ = deepspeed.initialize(model=m, model_parameters=param_groups(m), config=cfg)
    path, client = engine.load_checkpoint(directory)
    assert client == {"step": 5, "note": "saved at 4 ranks"}, client
    assert path == os.path.join(directory, "global_step5"), path
    assert engine.global_steps == 5, engine.global_steps
    curve = run_from(engine, 5, 5)
    with open(os.path.join(directory, "curve.json")) as f:
        want = json.load(f)
    worst = max(abs(a - b) / abs(a) for a, b in zip(want, curve))
    if dist.get_rank() == 0:
        print(f"loaded at {dist.get_world_size()} ranks, stage {stage}: worst relative loss difference {worst:.2e}")
    assert worst <= 1e-5, (want, curve)
    engine.destroy()


def scenario_stage3mem():
    m = GPT(layers=2, width=32, heads=2, context=CONTEXT, seed=3)
    cfg = config(3, {"stage3_param_persistence_threshold": 100, "stage3_max_live_parameters": 8000,
                     "stage3_prefetch_bucket_size": 4000})
    engine, _, _, _ = deepspeed.initialize(model=m, model_parameters=param_groups(m),
                                           config=dict(cfg, optimizer={"type": "AdamW"}))
    n = dist.get_world_size()
    total = sum(p.ds_numel for p in engine._params)
    persistent = sum(p.ds_numel for p in engine._params if p.ds_numel <= 100)
    largest = max(p.ds_numel for p in engine._params)
    bound = total / n + persistent + 8000 + 4000 + largest  # shard + persistent + live window (+ one group)
    worst = [0]

    def probe(module, inputs):
        held = sum(p.numel() for p in m.parameters())  # elements whose storage is materialised now
        worst[0] = max(worst[0], held)

    for mod in m.modules():
        mod.register_forward_pre_hook(probe)
    run_from(engine, 0, 3)
    if dist.get_rank() == 0:
        print(f"stage 3: at most {worst[0]} parameter elements materialised (model {total}, bound {bound:.0f})")
    assert worst[0] < total and worst[0] <= bound, (worst[0], total, bound)
    engine.destroy()


def expect_refused(cfg, *words, **kw):
    m = model()
    try:
        deepspeed.initialize(model=m, model_parameters=param_groups(m), config=cfg, **kw)
    except (ValueError, RuntimeError) as e:
        for w in words:
            assert w in str(e), f"{w!r} not in: {e}"
        return
    raise AssertionError(f"accepted: {cfg}")


def scenario_config():
    base = config(2)
    m = model()
    expect_refused(dict(base, optimizer={"type": "AdamW"}), "optimizer", "both",
                   optimizer=torch.optim.AdamW(param_groups(m)))
    expect_refused(base, "SGD", optimizer=torch.optim.SGD(param_groups(m), lr=0.1))
    expect_refused(dict(base, optimizer={"type": "Lamb"}), "optimizer.type", "Lamb")
    expect_refused(dict(base, zero_optimization={"stage": 7}), "stage")


def main():
    torch.set_num_threads(1)
    dist.init_process_group("zcoll")
    scenario = sys.argv[1]
    if scenario == "equiv":
        scenario_equiv()
    elif scenario == "accum":
        scenario_accum()
    elif scenario == "save":
        scenario_save(sys.argv[2])
    elif scenario == "load":
        scenario_load(sys.argv[2], int(sys.argv[3]))
    elif scenario == "stage3mem":
        scenario_stage3mem()
    elif scenario == "config":
        scenario_config()
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    dist.barrier()
    print(f"OK {scenario}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
