"""zcoll_torch.zero's engine: DeepSpeed's DeepSpeedEngine API over the C++ ZeRO engine (_C.ZeroEngine).

Every parameter the optimizer trains is one engine group, registered in the module's parameter order.
Stages 0-2: the parameter is a view of the engine's full parameter buffer, updated in place by the step;
at stages 0-1 its .grad is a view of the engine's gradient buffer, into which autograd accumulates.
Stage 2: a gradient-accumulator hook adds the fresh gradient into the engine's bucket and hands it over.
Stage 3: the parameter's storage is empty between uses; module hooks gather it for forward and for
backward (and release it after), and frozen parameters are sharded too (no gradient, no optimizer state).
"""
import contextlib
import json
import logging
import os
import time
import warnings
import weakref

import torch
import torch.distributed as dist

from .. import _C
from . import init as _init

_ADAM_TYPES = (torch.optim.Adam, torch.optim.AdamW)
log = logging.getLogger("zcoll_torch.zero")  # steps_per_print, wall_clock_breakdown, ... (rank 0), as DeepSpeed logs


def _load_config(config, config_params, args):
    if config is None:
        config = config_params
    if config is None and args is not None:
        config = getattr(args, "deepspeed_config", None) or getattr(args, "deepspeed", None)
        if config is True:
            config = None
    if config is None:
        raise ValueError("initialize: config: no DeepSpeed config given (config=, config_params= or "
                         "args.deepspeed_config)")
    if isinstance(config, (str, os.PathLike)):
        try:
            with open(config) as f:
                return json.load(f)
        except OSError as e:
            raise ValueError(f"initialize: config: cannot read {config}: {e.strerror}") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"initialize: config: {config} is not JSON: {e}") from None
    if not isinstance(config, dict):
        raise ValueError(f"initialize: config: expected a path or a dict, got {type(config).__name__}")
    return json.loads(json.dumps(config))  # a copy: the caller's dict is left as it was


def _param_groups(model, optimizer, model_parameters):
    """The optimizer's parameter groups, as lists of dicts (torch's param_groups shape)."""
    if optimizer is not None:
        return optimizer.param_groups
    if model_parameters is None:
        model_parameters = model.parameters()
    params = list(model_parameters)
    if not params:
        raise ValueError("initialize: model_parameters is empty")
    if isinstance(params[0], dict):
        return [dict(g, params=list(g["params"])) for g in params]
    return [{"params": params}]


class ZeroOptimizer(torch.optim.Optimizer):
    """What initialize() returns as the optimizer: its param_groups (lr, betas, eps, weight_decay per
    group) are read at every step, so torch lr schedulers work on it. The engine runs the step:
    call engine.step(), not this one's."""

    def __init__(self, engine, param_groups):
        self._engine = weakref.ref(engine)
        self.defaults = {}
        self.state = {}
        self.param_groups = param_groups  # shared with a client optimizer: its scheduler moves our lr
        self._hook_for_profile = lambda *a, **k: None

    def step(self, closure=None):
        raise RuntimeError("ZeroOptimizer.step: the engine steps the optimizer: call engine.step()")

    def zero_grad(self, set_to_none=False):
        pass  # the engine zeroes its gradients after each step

    def state_dict(self):
        raise RuntimeError("ZeroOptimizer.state_dict: the optimizer state is sharded: use engine.save_checkpoint()")

    def load_state_dict(self, state_dict):
        raise RuntimeError("ZeroOptimizer.load_state_dict: use engine.load_checkpoint()")


class _ConfigScheduler:
    """The config's "scheduler" section, computed by the engine (DeepSpeed returns its own scheduler)."""

    def __init__(self, engine):
        self._engine = weakref.ref(engine)

    def step(self, *args, **kwargs):
        pass  # the engine advances it at each optimizer step

    def get_last_lr(self):
        return self._engine().get_lr()

    get_lr = get_last_lr

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class _FetchForBackward(torch.autograd.Function):
    """Stage 3: passes a module's output through; on the way back, gathers the module's parameters
    before its backward runs."""

    @staticmethod
    def forward(ctx, engine, module, tensor):
        ctx.engine, ctx.module = engine, module
        return tensor.detach()

    @staticmethod
    def backward(ctx, grad):
        ctx.engine._fetch_for_backward(ctx.module)
        return None, None, grad


class _Zero3Linear(torch.autograd.Function):
    """Stage 3's linear: saves the weight itself (not a transposed view of its storage, which the
    engine reuses once the weight is released), so that backward sees the re-gathered weight."""

    @staticmethod
    def forward(ctx, input, weight, bias):
        ctx.save_for_backward(input, weight, bias)
        out = input.matmul(weight.t())
        if bias is not None:
            out += bias
        return out

    @staticmethod
    def backward(ctx, grad):
        input, weight, bias = ctx.saved_tensors
        grad_input = grad.matmul(weight) if ctx.needs_input_grad[0] else None
        grad_weight = grad_bias = None
        if ctx.needs_input_grad[1]:
            grad_weight = grad.reshape(-1, grad.shape[-1]).t().matmul(input.reshape(-1, input.shape[-1]))
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = grad.reshape(-1, grad.shape[-1]).sum(0)
        return grad_input, grad_weight, grad_bias


def _linear_forward(module, input):
    return _Zero3Linear.apply(input, module.weight, module.bias)


class ZeroEngine(torch.nn.Module):
    """DeepSpeed's engine: engine(x) runs the module; backward(loss); step(); save/load_checkpoint."""

    def __init__(self, model, param_groups, config, client_optimizer=None, lr_scheduler=None, training_data=None,
                 collate_fn=None):
        super().__init__()
        if not dist.is_initialized():
            raise RuntimeError("zcoll_torch.zero: torch.distributed is not initialized")
        self.module = model
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self._config = config
        self.global_steps = 0
        self.micro_steps = 0
        self._no_sync = False
        self._closed = False

        # The parameters the optimizer trains, by identity, with their group's index.
        group_of = {}
        for k, g in enumerate(param_groups):
            for p in g["params"]:
                if not isinstance(p, torch.Tensor):
                    raise ValueError(f"initialize: param group {k} holds a {type(p).__name__}, not a parameter")
                group_of.setdefault(id(p), k)
        named = []
        seen = set()
        for name, p in model.named_parameters():
            if id(p) not in seen:
                seen.add(id(p))
                named.append((name, p))
        names_in_model = {id(p) for _, p in named}
        for k, g in enumerate(param_groups):
            for p in g["params"]:
                if id(p) not in names_in_model:
                    raise ValueError(f"initialize: param group {k} holds a parameter that is not the model's")

        json_config = json.dumps(config)
        uid = [_C.ZeroEngine.unique_id() if self.rank == 0 else None]
        dist.broadcast_object_list(uid, src=0)
        # Every rank starts from rank 0's values (DeepSpeed broadcasts the model the same way).
        with torch.no_grad():
            for _, p in named:
                if not _init.is_sharded(p):  # Init's parameters are rank 0's values already
                    dist.broadcast(p.data, src=0)
            for b in model.buffers():
                dist.broadcast(b.data, src=0)

        stage = int(config.get("zero_optimization", {}).get("stage", 0)) if isinstance(
            config.get("zero_optimization", {}), dict) else 0
        self._stage = stage
        managed = []  # (name, param, param group, frozen)
        self._local = []  # frozen parameters kept out of the engine (stages 0-2)
        for name, p in named:
            trainable = p.requires_grad and id(p) in group_of
            if trainable or stage == 3:
                managed.append((name, p, group_of.get(id(p), 0), not trainable))
            else:
                if _init.is_sharded(p):
                    p.data = _init.take(p)
                self._local.append(p)
        if not managed:
            raise ValueError("initialize: no parameter to train (every parameter is frozen or outside the optimizer)")
        self._params = [p for _, p, _, _ in managed]
        self._names = [n for n, _, _, _ in managed]
        self._frozen = [f for _, _, _, f in managed]
        self._shapes = [list(p.ds_shape if _init.is_sharded(p) else p.shape) for p in self._params]
        pgroups = [k for _, _, k, _ in managed]
        self._n_pgroups = max(pgroups) + 1  # the engine's param groups: up to the last one it holds
        self._e = _C.ZeroEngine(uid[0], self.rank, self.world_size, json_config, self._names, self._shapes, pgroups,
                                self._frozen)
        for w in self._e.warnings():
            if self.rank == 0:
                warnings.warn(f"zcoll_torch.zero: config: {w}", stacklevel=3)
        self._cfg = self._e.config()
        self._times = {"forward": 0.0, "backward": 0.0, "step": 0.0}
        if self._cfg["dump_state"] and self.rank == 0:
            log.info("zcoll_torch.zero: config %s", json.dumps(config, sort_keys=True))
        self._dtype = getattr(torch, self._e.dtype())
        self._index = {id(p): g for g, p in enumerate(self._params)}
        for group in param_groups:  # the config's settings where a group has none (as torch optimizers fill them)
            for key, value in (("lr", self._cfg["lr"]), ("betas", tuple(self._cfg["betas"])),
                               ("eps", self._cfg["eps"]), ("weight_decay", self._cfg["weight_decay"])):
                group.setdefault(key, value)
        self.param_groups = param_groups
        self.optimizer = ZeroOptimizer(self, param_groups)
        if client_optimizer is not None:
            client_optimizer.param_groups = param_groups
        if callable(lr_scheduler) and not hasattr(lr_scheduler, "step"):
            lr_scheduler = lr_scheduler(self.optimizer)  # DeepSpeed's form: a function of the optimizer
        self.lr_scheduler = lr_scheduler if lr_scheduler is not None else (
            _ConfigScheduler(self) if self._cfg["scheduler"] else None)

        with torch.no_grad():
            for g, p in enumerate(self._params):
                if _init.is_sharded(p):  # one parameter in full at a time
                    self._e.init_params(g, _init.take(p).to(torch.float32))
                else:
                    self._e.init_params(g, p.detach().to(torch.float32).contiguous().reshape(self._shapes[g]))
        self._grad_accs = []
        if stage <= 2:
            for g, p in enumerate(self._params):
                p.data = self._e.params(g)
            for p in self._local:
                if self._dtype != torch.float32 and p.is_floating_point():
                    p.data = p.data.to(self._dtype)
            if stage <= 1:
                self._attach_grads()
            for g, p in enumerate(self._params):
                self._hook_grad(g, p, accumulate=stage == 2)
        else:
            self._setup_stage3()
        for p in self._params:
            p._zcoll_zero = (weakref.ref(self), self._index[id(p)])

        self.training_dataloader = None
        if training_data is not None:
            sampler = torch.utils.data.distributed.DistributedSampler(training_data, num_replicas=self.world_size,
                                                                      rank=self.rank)
            self.training_dataloader = torch.utils.data.DataLoader(
                training_data, batch_size=self._cfg["train_micro_batch_size_per_gpu"], sampler=sampler,
                collate_fn=collate_fn, drop_last=self._cfg["dataloader_drop_last"])

    # ---------------------------------------------------------------------------------------------
    # Gradients

    def _attach_grads(self):
        """Stages 0-1: .grad is the engine's gradient buffer (autograd accumulates into it in place)."""
        for g, p in enumerate(self._params):
            view = self._e.grads(g)
            if p.grad is None or p.grad.data_ptr() != view.data_ptr():
                p.grad = view

    def _hook_grad(self, g, p, accumulate):
        if self._frozen[g]:
            return
        acc = p.expand_as(p).grad_fn.next_functions[0][0]  # the parameter's grad accumulator (kept alive)
        engine = weakref.ref(self)

        def ready(*_):
            e = engine()
            if e is None:
                return
            if accumulate:  # stages 2-3: into the engine's bucket, then hand it over
                with torch.no_grad():
                    e._e.grads(g).add_(p.grad.reshape(e._shapes[g]))
                p.grad = None
            e._e.grads_ready(g)
            if e._stage == 3:
                e._release_after_backward(g)

        acc.register_hook(ready)
        self._grad_accs.append(acc)

    # ---------------------------------------------------------------------------------------------
    # Stage 3

    def _setup_stage3(self):
        self._empty = torch.empty(0, dtype=self._dtype)
        self._refs = [0] * len(self._params)
        for g, p in enumerate(self._params):
            if p.numel() != torch.Size(self._shapes[g]).numel():  # built in Init: storage for its shape for the hook
                p.data = torch.empty(self._shapes[g], dtype=self._dtype)
            if self._dtype != torch.float32:
                p.data = p.data.to(self._dtype)
            self._hook_grad(g, p, accumulate=True)  # while p is full: its accumulator expects that shape
            p.data = self._empty
            p.ds_shape = torch.Size(self._shapes[g])
            p.ds_numel = p.ds_shape.numel()
        self._module_groups = {}
        self._fetched_for_backward = set()
        for m in self.module.modules():
            groups = [self._index[id(p)] for p in m.parameters(recurse=False) if id(p) in self._index]
            if not groups:
                continue
            self._module_groups[m] = groups
            m.register_forward_pre_hook(self._pre_forward)
            m.register_forward_hook(self._post_forward)
            if isinstance(m, torch.nn.Linear):
                m.forward = _linear_forward.__get__(m)

    def _gather(self, g):
        if self._refs[g] == 0:
            self._e.fetch(g)
            self._params[g].data = self._e.params(g)
        self._refs[g] += 1

    def _drop(self, g):
        if self._refs[g] == 0:
            return
        self._refs[g] -= 1
        if self._refs[g] == 0:
            self._params[g].data = self._empty
            self._e.release(g)

    def _pre_forward(self, module, inputs):
        for g in self._module_groups[module]:
            self._gather(g)

    def _post_forward(self, module, inputs, output):
        for g in self._module_groups[module]:
            self._drop(g)
        if not torch.is_grad_enabled():
            return output
        return self._wrap(module, output)

    def _wrap(self, module, output):
        if isinstance(output, torch.Tensor):
            return _FetchForBackward.apply(self, module, output) if output.requires_grad else output
        if isinstance(output, tuple):
            return tuple(self._wrap(module, o) for o in output)
        if isinstance(output, list):
            return [self._wrap(module, o) for o in output]
        if isinstance(output, dict):
            return {k: self._wrap(module, v) for k, v in output.items()}
        return output

    def _fetch_for_backward(self, module):
        if module in self._fetched_for_backward:
            return
        self._fetched_for_backward.add(module)
        for g in self._module_groups[module]:
            self._gather(g)

    def _release_after_backward(self, g):
        while self._refs[g] > 0:
            self._drop(g)

    def _release_all(self):
        for g in range(len(self._params)):
            if self._refs[g]:
                self._refs[g] = 0
                self._params[g].data = self._empty
        self._fetched_for_backward.clear()

    # ---------------------------------------------------------------------------------------------
    # Training

    def forward(self, *args, **kwargs):
        if self._stage <= 1:
            self._attach_grads()  # in case the caller set .grad to None (zero_grad(set_to_none=True))
        if self._cfg["auto_cast"] and self._cfg["fp16"]:  # fp16.auto_cast: floating inputs to half, as DeepSpeed
            args, kwargs = _to_half(args), _to_half(kwargs)
        t0 = time.perf_counter()
        out = self.module(*args, **kwargs)
        self._times["forward"] += time.perf_counter() - t0
        return out

    def backward(self, loss, retain_graph=False):
        """The gradient of loss (times the fp16 loss scale) into the engine; buckets are reduced as
        backward goes on (every micro-batch at stages 2-3, at the accumulation boundary at 0-1)."""
        if self._no_sync:
            self._e.set_boundary("no")
        scale = self._e.loss_scale()
        t0 = time.perf_counter()
        (loss * scale if scale != 1 else loss).backward(retain_graph=retain_graph)
        self._times["backward"] += time.perf_counter() - t0
        return loss

    def step(self, lr_kwargs=None):
        """Ends the micro-batch; at the accumulation boundary the engine reduces what is left,
        unscales, clips, runs AdamW on this rank's shard and updates every rank's parameters."""
        boundary = self._e.at_boundary()
        if boundary:
            for k, group in enumerate(self.param_groups[:self._n_pgroups]):
                betas = group.get("betas", self._cfg["betas"])
                self._e.set_param_group(k, float(group.get("lr", self._cfg["lr"])), float(betas[0]),
                                        float(betas[1]), float(group.get("eps", self._cfg["eps"])),
                                        float(group.get("weight_decay", self._cfg["weight_decay"])))
        t0 = time.perf_counter()
        stepped = self._e.step()
        self._times["step"] += time.perf_counter() - t0
        self.micro_steps += 1
        if self._stage == 3:
            self._release_all()
        if boundary:
            self.global_steps += 1
            if stepped and self.lr_scheduler is not None and not isinstance(self.lr_scheduler, _ConfigScheduler):
                opt = getattr(self.lr_scheduler, "optimizer", None)
                if opt is not None:  # torch's schedulers count the steps of the optimizer they were made on
                    opt._step_count = getattr(opt, "_step_count", 0) + 1
                self.lr_scheduler.step(**(lr_kwargs or {}))
            if self.global_steps % self._cfg["steps_per_print"] == 0:
                self._report()
        return stepped

    def _report(self):
        """DeepSpeed's periodic lines (steps_per_print), on rank 0, through the logging module."""
        times, self._times = self._times, {k: 0.0 for k in self._times}
        if self.rank != 0:
            return
        s = self._e.stats()
        log.info("step=%d, skipped=%d, lr=%s, loss_scale=%g", self.global_steps, s["skipped_steps"], self.get_lr(),
                 s["loss_scale"])
        if self._cfg["wall_clock_breakdown"]:
            n = self._cfg["steps_per_print"]
            log.info("time (ms) per step, last %d steps | forward: %.2f | backward: %.2f | step: %.2f", n,
                     *(1e3 * times[k] / n for k in ("forward", "backward", "step")))
        if self._cfg["memory_breakdown"]:
            log.info("engine memory (bytes): %s", self._e.memory())

    def zero_grad(self):
        """The engine zeroes its gradients after each optimizer step: nothing to do."""

    @contextlib.contextmanager
    def no_sync(self):
        """Micro-batches run inside do not end the gradient accumulation (no reduction at stages 0-1).
        DeepSpeed refuses it at stages 2-3 (gradients are partitioned as they come): so does this."""
        if self._stage >= 2:
            raise RuntimeError(f"no_sync: not available at ZeRO stage {self._stage} (gradients are reduce-scattered "
                               "as backward goes on); use gradient_accumulation_steps")
        prev, self._no_sync = self._no_sync, True
        try:
            yield
        finally:
            self._no_sync = prev

    def is_gradient_accumulation_boundary(self):
        return not self._no_sync and self._e.at_boundary()

    def gradient_accumulation_steps(self):
        return self._cfg["gradient_accumulation_steps"]

    def train_micro_batch_size_per_gpu(self):
        return self._cfg["train_micro_batch_size_per_gpu"]

    def train_batch_size(self):
        return self._cfg["train_batch_size"]

    def zero_optimization_stage(self):
        return self._stage

    def get_lr(self):
        if self._cfg["scheduler"]:
            return [self._e.learning_rate()] * len(self.param_groups)
        return [float(g.get("lr", self._cfg["lr"])) for g in self.param_groups]

    def get_global_grad_norm(self):
        return self._e.stats()["grad_norm"]

    def engine_stats(self):
        """The C++ engine's counters (steps, bytes reduced and gathered, time waiting)."""
        return self._e.stats()

    def engine_memory(self):
        """Bytes of parameters, gradients, optimizer states and buffers this rank allocated."""
        return self._e.memory()

    # ---------------------------------------------------------------------------------------------
    # Checkpoints

    def save_checkpoint(self, save_dir, tag=None, client_state=None, save_latest=True):
        """Each rank writes its shard into save_dir/tag (any rank count and stage loads it); rank 0
        adds client_state and the lr scheduler's state. Collective."""
        if tag is None:
            tag = f"global_step{self.global_steps}"
        tag = str(tag)
        if self._cfg["tag_validation"] != "Ignore":  # checkpoint.tag_validation: every rank must pass the same tag
            tags = [None] * self.world_size
            dist.all_gather_object(tags, tag)
            if len(set(tags)) > 1:
                msg = f"save_checkpoint: ranks passed different tags {sorted(set(tags))} (checkpoint.tag_validation)"
                if self._cfg["tag_validation"] == "Fail":
                    raise ValueError(msg)
                warnings.warn(msg, stacklevel=2)
        self._e.save_checkpoint(str(save_dir), tag)
        if self.rank == 0:
            state = {"client_state": dict(client_state or {}), "global_steps": self.global_steps,
                     "micro_steps": self.micro_steps,
                     "lr_scheduler": self.lr_scheduler.state_dict() if self.lr_scheduler is not None else None}
            torch.save(state, os.path.join(str(save_dir), tag, "client_state.pt"))
        dist.barrier()
        return True

    def load_checkpoint(self, load_dir, tag=None, load_module_strict=True, load_optimizer_states=True,
                        load_lr_scheduler_states=True, load_module_only=False):
        """Loads save_dir/tag (tag None: the latest), written at any rank count and stage. Returns
        (path, client_state). Collective."""
        if not load_optimizer_states or load_module_only:
            raise ValueError("load_checkpoint: load_optimizer_states=False / load_module_only=True are not supported "
                             "(the engine restores parameters and optimizer states together)")
        load_dir = str(load_dir)
        if tag is None:
            try:
                with open(os.path.join(load_dir, "latest")) as f:
                    tag = f.read().strip()
            except OSError:
                return None, None  # DeepSpeed's answer when there is no checkpoint
        tag = str(tag)
        self._e.load_checkpoint(load_dir, tag)
        if self._stage <= 2:
            for g, p in enumerate(self._params):
                p.data = self._e.params(g)
        path = os.path.join(load_dir, tag)
        state = {}
        extra = os.path.join(path, "client_state.pt")
        if os.path.exists(extra):
            state = torch.load(extra)
        if load_lr_scheduler_states and self.lr_scheduler is not None and state.get("lr_scheduler") is not None:
            self.lr_scheduler.load_state_dict(state["lr_scheduler"])
        self.global_steps = self._e.stats()["steps"]
        self.micro_steps = self._e.stats()["micro_steps"]
        return path, state.get("client_state", {})

    def save_16bit_model(self, save_dir, save_filename="model.safetensors"):
        """Rank 0 writes the parameters (in the training precision) as safetensors. Collective."""
        self._e.save_model(os.path.join(str(save_dir), save_filename))
        return True

    def destroy(self):
        """Frees the engine and its communicator (the module's parameters then hold copies)."""
        if self._closed:
            return
        if self._stage <= 2:
            for p in self._params:
                p.data = p.data.clone()
        self._e.close()
        self._closed = True


def _to_half(x):
    if isinstance(x, torch.Tensor):
        return x.half() if x.is_floating_point() else x
    if isinstance(x, (list, tuple)):
        return type(x)(_to_half(v) for v in x)
    if isinstance(x, dict):
        return {k: _to_half(v) for k, v in x.items()}
    return x


@contextlib.contextmanager
def GatheredParameters(params, modifier_rank=None, fwd_module=None, enabled=True):
    """Full parameters inside the block (stage 3 gathers them; collective: every rank enters with the
    same parameters). With modifier_rank, that rank's changes are given to every rank and to the
    engine (its master weights and shards) on exit."""
    if isinstance(params, torch.Tensor):
        params = [params]
    params = list(params or [])
    sharded = [p for p in params if _init.is_sharded(p)]
    if enabled and sharded:  # built in Init, not yet given to an engine
        others = [p for p in params if not _init.is_sharded(p)]
        with _init.gathered(sharded, modifier_rank), GatheredParameters(others, modifier_rank, fwd_module, enabled):
            yield
        return
    params = [p for p in params if getattr(p, "_zcoll_zero", None) is not None]
    if not enabled or not params:
        yield
        return
    engine = params[0]._zcoll_zero[0]()
    groups = [p._zcoll_zero[1] for p in params]
    if engine._stage == 3:
        for g in groups:
            engine._gather(g)
    try:
        yield
    finally:
        try:
            if modifier_rank is not None:
                with torch.no_grad():
                    for g, p in zip(groups, params):
                        full = p.data.to(torch.float32).contiguous()
                        dist.broadcast(full, src=modifier_rank)
                        engine._e.init_params(g, full)
                        if engine._stage <= 2:
                            p.data = engine._e.params(g)
        finally:
            if engine._stage == 3:
                for g in groups:
                    engine._drop(g)


def initialize(args=None, model=None, optimizer=None, model_parameters=None, training_data=None, lr_scheduler=None,
               distributed_port=None, mpu=None, dist_init_required=None, collate_fn=None, config=None,
               config_params=None):
    """deepspeed.initialize: returns (engine, optimizer, training_dataloader, lr_scheduler)."""
    if model is None:
        raise ValueError("initialize: model is required")
    if mpu is not None:
        raise ValueError("initialize: mpu (model parallelism) is not supported")
    cfg = _load_config(config, config_params, args)
    if not dist.is_initialized():
        if dist_init_required is False:
            raise RuntimeError("initialize: torch.distributed is not initialized and dist_init_required is False")
        import zcoll_torch  # noqa: F401  (registers the backend)
        dist.init_process_group("zcoll")
    if callable(optimizer) and not isinstance(optimizer, torch.optim.Optimizer):
        params = model_parameters if model_parameters is not None else model.parameters()
        optimizer = optimizer(params)
    if optimizer is not None:
        if not isinstance(optimizer, _ADAM_TYPES):
            raise ValueError(f"initialize: optimizer: {type(optimizer).__name__} is not supported: the engine runs "
                             "Adam or AdamW (pass torch.optim.AdamW/Adam, or an \"optimizer\" config section)")
        if "optimizer" in cfg:
            raise ValueError("initialize: optimizer: given both as an argument and in the config's \"optimizer\" "
                             "section: keep one")
        d = optimizer.defaults
        for key in ("amsgrad", "maximize", "foreach", "capturable", "differentiable", "fused"):
            if d.get(key) and key in ("amsgrad", "maximize", "capturable", "differentiable", "fused"):
                raise ValueError(f"initialize: optimizer: {key}=True is not supported")
        adamw = isinstance(optimizer, torch.optim.AdamW)
        cfg["optimizer"] = {"type": "AdamW" if adamw else "Adam",
                            "params": {"lr": d["lr"], "betas": list(d["betas"]), "eps": d["eps"],
                                       "weight_decay": d["weight_decay"], "adam_w_mode": adamw}}
    elif not cfg.get("optimizer"):
        raise ValueError("initialize: no optimizer: pass optimizer= (torch.optim.AdamW or Adam) or give the config an "
                         "\"optimizer\" section (DeepSpeed needs one of them too)")
    groups = _param_groups(model, optimizer, model_parameters)
    engine = ZeroEngine(model, groups, cfg, client_optimizer=optimizer, lr_scheduler=lr_scheduler,
                        training_data=training_data, collate_fn=collate_fn)
    return engine, engine.optimizer, engine.training_dataloader, engine.lr_scheduler
