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
  init      zcoll_torch.zero.Init: no rank holds more than one module's parameters while the model is
            built; GatheredParameters and module.apply change them; stage 3 then trains as the model
            built outside Init
  keys      DeepSpeed keys honoured: "Adam" is AdamW unless adam_w_mode is false (each equals its torch
            optimizer), a 0 bucket, legacy cpu_offload and bfloat16, fp16.auto_cast, steps_per_print and
            wall_clock_breakdown, dataloader_drop_last, checkpoint.tag_validation
Prints "OK <scenario>" at the end; any failure raises.
"""
import json
import os
import sys

import logging

import torch
import torch.distributed as dist
import torch.nn.functional as F

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


def reference(steps, accum=1, mean=True, opt_cls=torch.optim.AdamW):
    """DDP + torch.optim.AdamW on the zcoll backend: the losses per step and the final parameters
    (micro-batches' gradients averaged, or with mean=False summed: DeepSpeed's no_sync with
    gradient_accumulation_steps 1)."""
    div = accum if mean else 1
    rank, n = dist.get_rank(), dist.get_world_size()
    m = model()
    ddp = torch.nn.parallel.DistributedDataParallel(m)
    opt = opt_cls(param_groups(m), lr=3e-3, betas=(0.9, 0.95))
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


def compute_in_fp32(m):
    """fp16 parameters, fp32 arithmetic: torch 1.13 has no fp16 matmul, layer norm or GELU on the CPU.
    Autograd saves the fp32 copies, so stage 3 may release the fp16 storage after forward."""
    for mod in m.modules():
        if isinstance(mod, torch.nn.Linear):
            mod.forward = (lambda mod: lambda x: F.linear(x.float(), mod.weight.float(),
                                                          None if mod.bias is None else mod.bias.float()))(mod)
        elif isinstance(mod, torch.nn.LayerNorm):
            mod.forward = (lambda mod: lambda x: F.layer_norm(x.float(), mod.normalized_shape, mod.weight.float(),
                                                              mod.bias.float(), mod.eps))(mod)
        elif isinstance(mod, torch.nn.Embedding):
            mod.forward = (lambda mod: lambda i: F.embedding(i, mod.weight.float()))(mod)


def train(cfg, steps, accum=1, no_sync=False, engine_out=None, fp32_compute=False, client_optimizer=True):
    rank, n = dist.get_rank(), dist.get_world_size()
    m = model()
    if client_optimizer:  # a torch optimizer and scheduler handed to initialize
        opt = torch.optim.AdamW(param_groups(m), lr=3e-3, betas=(0.9, 0.95))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup)
        engine, _, _, _ = deepspeed.initialize(model=m, optimizer=opt, lr_scheduler=sched, config=cfg)
    else:  # the config's optimizer section; the scheduler made on the optimizer initialize returns
        engine, _, _, _ = deepspeed.initialize(model=m, model_parameters=param_groups(m), config=cfg,
                                               lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, warmup))
    if fp32_compute:
        compute_in_fp32(m)
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
        got = train(config(stage, fp16={"enabled": True, "initial_scale_power": 8}), steps, fp32_compute=True)
        compare(f"stage {stage} fp16", ref, got, 3e-2, 3e-2)


def check_memory(engine, stage, zero):
    """The engine's parameter, gradient and optimizer bytes, measured from the buffers it holds, beside
    the estimator's formula for fp32 (4 bytes of parameter, 4 of gradient, 8 of moments)."""
    n = dist.get_world_size()
    numel = [torch.Size(s).numel() for s in engine._shapes]
    held = sum(numel)
    trained = sum(k for k, f in zip(numel, engine._frozen) if not f)  # frozen: no gradient or moments
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
    stage = int(stage)
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
    expect_refused(dict(base, zero_optimization={"stage": 7}, optimizer={"type": "AdamW"}), "stage")
    expect_refused(base, "no optimizer")  # DeepSpeed too needs a client optimizer or an "optimizer" section
    adamw = {"type": "AdamW"}
    for extra, words in (({"optimizer": {"type": "AdamW", "params": {"amsgrad": True}}}, ("amsgrad",)),
                         ({"optimizer": adamw, "communication_data_type": "bf16"}, ("communication_data_type",)),
                         ({"optimizer": adamw, "tensorboard": {"enabled": True}}, ("tensorboard",)),
                         ({"optimizer": adamw, "amp": {"enabled": True}}, ("amp",)),
                         ({"optimizer": adamw, "zero_optimization": {"stage": 2, "unknown_knob": 1}},
                          ("zero_optimization.unknown_knob",)),
                         ({"optimizer": {"type": "AdamW", "params": {"lr": "auto"}}}, ("optimizer.params.lr", "auto"))):
        expect_refused(dict(base, **extra), *words)


def scenario_init():
    from zcoll_torch.zero import init as zinit
    n = dist.get_world_size()
    held, tracked, worst = [0], [], [0]
    original = zinit.Init._post_init

    def post_init(self, module):  # every parameter made so far that still has its storage
        tracked.extend(module.parameters(recurse=False))
        worst[0] = max(worst[0], sum(p.numel() for p in tracked))
        original(self, module)

    zinit.Init._post_init = post_init
    try:
        with deepspeed.zero.Init():
            m = model()
    finally:
        zinit.Init._post_init = original
    total = sum(p.ds_numel for p in m.parameters())
    largest_module = max(sum(p.ds_numel for p in mod.parameters(recurse=False)) for mod in m.modules())
    shards = sum(p._zcoll_shard.numel() for p in m.parameters())
    assert all(p.numel() == 0 for p in m.parameters())
    assert worst[0] <= largest_module < total, (worst[0], largest_module, total)
    assert shards <= total / n + len(tracked), (shards, total, n)
    if dist.get_rank() == 0:
        print(f"Init: at most {worst[0]} of {total} parameter elements held while building; shard {shards}")

    # GatheredParameters before initialize: rank 0's change reaches every rank.
    with deepspeed.zero.GatheredParameters([m.head.bias], modifier_rank=0):
        if dist.get_rank() == 0:
            m.head.bias.data.fill_(0.5)
    with deepspeed.zero.GatheredParameters([m.head.bias]):
        assert torch.all(m.head.bias == 0.5)
    assert m.head.bias.numel() == 0

    # module.apply inside Init sees each module's parameters (a custom weight init).
    def init_weights(mod):
        if isinstance(mod, torch.nn.Linear) and mod.bias is not None:
            mod.bias.data.fill_(0.25)

    with deepspeed.zero.Init():
        m2 = GPT(layers=1, width=16, heads=2, context=CONTEXT, seed=5)
        m2.apply(init_weights)
    with deepspeed.zero.GatheredParameters([m2.head.bias, m2.blocks[0].up.bias]):
        assert torch.all(m2.head.bias == 0.25) and torch.all(m2.blocks[0].up.bias == 0.25)

    # Stage 3 on the model built in Init trains as the one built outside it.
    steps = 10
    ref = train(config(3), steps)
    with deepspeed.zero.Init():
        got = train(config(3), steps)
    compare("stage 3, model built in Init", ref, got, 1e-5, 1e-4)


def scenario_keys(directory):
    steps = 20
    adam = {"lr": 3e-3, "betas": [0.9, 0.95]}
    ref = reference(steps)
    got = train(config(2, optimizer={"type": "Adam", "params": adam}), steps, client_optimizer=False)
    compare("\"Adam\" (DeepSpeed: AdamW)", ref, got, 1e-5, 1e-4)
    got = train(config(2, {"reduce_bucket_size": 0}), steps)
    compare("reduce_bucket_size 0", ref, got, 1e-5, 1e-4)
    ref = reference(steps, opt_cls=torch.optim.Adam)
    got = train(config(1, optimizer={"type": "Adam", "params": dict(adam, adam_w_mode=False)}), steps,
                client_optimizer=False)
    compare("\"Adam\", adam_w_mode false (torch.optim.Adam)", ref, got, 1e-5, 1e-4)

    def start(cfg, **kw):
        m = model()
        return m, deepspeed.initialize(model=m, model_parameters=param_groups(m),
                                       config=dict(cfg, optimizer={"type": "AdamW"}), **kw)[0]

    # The legacy names: DeepSpeed offloads and trains in bf16 with them.
    _, e = start(config(2, {"cpu_offload": True}, bfloat16={"enabled": True}))
    assert e._dtype == torch.bfloat16, e._dtype
    mem = e.engine_memory()
    assert mem["host_bytes"] >= mem["optimizer_bytes"] > 0, mem
    e.destroy()

    # fp16.auto_cast: floating inputs reach the module in fp16.
    class Probe(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(4))
            self.seen = None

        def forward(self, x):
            self.seen = x.dtype
            return (x.float() * self.w.float()).sum()

    for cast in (True, False):
        probe = Probe()
        e, _, _, _ = deepspeed.initialize(model=probe, model_parameters=probe.parameters(), config={
            "train_batch_size": dist.get_world_size(), "optimizer": {"type": "AdamW"},
            "fp16": {"enabled": True, "auto_cast": cast}})
        e.backward(e(torch.ones(4)))
        e.step()
        assert probe.seen == (torch.float16 if cast else torch.float32), (cast, probe.seen)
        e.destroy()

    # steps_per_print and wall_clock_breakdown: DeepSpeed's lines, on rank 0, through logging.
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("zcoll_torch.zero")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    m, e = start(config(2, steps_per_print=2, wall_clock_breakdown=True, dump_state=True))
    run_from(e, 0, 4)
    e.destroy()
    logger.removeHandler(handler)
    lines = [r.getMessage() for r in records]
    if dist.get_rank() == 0:
        assert sum(line.startswith("step=") for line in lines) == 2, lines
        assert sum("forward:" in line and "backward:" in line for line in lines) == 2, lines
        assert any("config" in line and "steps_per_print" in line for line in lines), lines
    else:
        assert not lines, lines

    # dataloader_drop_last: the last short batch is dropped.
    data = torch.utils.data.TensorDataset(torch.arange(10 * dist.get_world_size() + 1).float())
    for drop, batches in ((True, 2), (False, 3)):
        m = model()
        e, _, loader, _ = deepspeed.initialize(model=m, model_parameters=param_groups(m), training_data=data,
                                               config=dict(config(1, train_batch_size=4 * dist.get_world_size(),
                                                                  dataloader_drop_last=drop),
                                                           optimizer={"type": "AdamW"}))
        assert len(loader) == batches, (drop, len(loader))
        e.destroy()

    # checkpoint.tag_validation: ranks that pass different tags fail (Fail) or are warned about (Warn).
    _, e = start(config(2, checkpoint={"tag_validation": "Fail"}))
    try:
        e.save_checkpoint(directory, tag=f"rank{dist.get_rank()}")
        raise AssertionError("different tags were saved")
    except ValueError as err:
        assert "tag_validation" in str(err), err
    e.destroy()


SCENARIOS = {
    "equiv": scenario_equiv, "accum": scenario_accum, "save": scenario_save, "load": scenario_load,
    "stage3mem": scenario_stage3mem, "config": scenario_config, "init": scenario_init, "keys": scenario_keys,
}


def main():
    torch.set_num_threads(1)
    dist.init_process_group("zcoll")
    scenario = sys.argv[1]
    if scenario not in SCENARIOS:
        raise SystemExit(f"unknown scenario {scenario}")
    SCENARIOS[scenario](*sys.argv[2:])
    dist.barrier()
    print(f"OK {scenario}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
