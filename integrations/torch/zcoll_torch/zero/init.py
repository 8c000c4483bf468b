"""zcoll_torch.zero.Init: a model built inside it is sharded module by module as it is constructed.

As DeepSpeed's zero.Init: when a module's constructor returns, rank 0's values of its own parameters
are broadcast and each rank keeps 1/N of each (a flat slice, the last one zero-padded); the parameter's
storage becomes empty. So no rank holds more than one module's parameters in full at a time. initialize()
then gives the engine each parameter, gathered one at a time. GatheredParameters reads or changes them
before that; module.apply (a custom weight init) sees each module's parameters gathered, rank 0's changes
kept.
"""
import contextlib

import torch
import torch.distributed as dist


def is_sharded(p):
    """Whether p is a parameter that Init sharded and no engine has taken yet."""
    return getattr(p, "_zcoll_shard", None) is not None


def _shard_size(numel, n):
    return (numel + n - 1) // n


def _keep_slice(p, full):
    """p keeps this rank's slice of full (zero-padded to a multiple of the ranks); its storage empties."""
    n, r = dist.get_world_size(), dist.get_rank()
    s = _shard_size(full.numel(), n)
    piece = full.reshape(-1)[r * s:(r + 1) * s]
    p._zcoll_shard = torch.zeros(s, dtype=full.dtype)
    p._zcoll_shard[:piece.numel()] = piece
    p.data = torch.empty(0, dtype=full.dtype)


def _shard(p):
    """Keeps this rank's slice of p (rank 0's values)."""
    with torch.no_grad():
        full = p.data.contiguous()
        dist.broadcast(full, src=0)
        p.ds_shape = full.shape
        p.ds_numel = full.numel()
        _keep_slice(p, full)


def gather(p):
    """p's full value (a new tensor), gathered from every rank's slice. Collective."""
    n = dist.get_world_size()
    parts = [torch.empty_like(p._zcoll_shard) for _ in range(n)]
    dist.all_gather(parts, p._zcoll_shard)
    return torch.cat(parts)[:p.ds_numel].reshape(p.ds_shape)


def take(p):
    """p's full value, gathered; p is Init's no more (an engine, or the module, holds it from now on)."""
    full = gather(p)
    del p._zcoll_shard
    return full


def _reshard(p, modifier_rank):
    """Back to a slice: modifier_rank's values (None: the slice it had, unchanged)."""
    with torch.no_grad():
        full = p.data.contiguous()
        if modifier_rank is None:
            p.data = torch.empty(0, dtype=full.dtype)
            return
        dist.broadcast(full, src=modifier_rank)
        _keep_slice(p, full)


@contextlib.contextmanager
def gathered(params, modifier_rank=None):
    """Init's sharded parameters in full inside the block (GatheredParameters before initialize)."""
    params = [p for p in params if is_sharded(p)]
    for p in params:
        p.data = gather(p)
    try:
        yield
    finally:
        for p in params:
            _reshard(p, modifier_rank)


def _all_module_classes(cls=torch.nn.Module):
    out = [cls]
    for sub in cls.__subclasses__():
        out.extend(_all_module_classes(sub))
    return out


class Init:
    """with zcoll_torch.zero.Init(): model = Model(...)  (DeepSpeed's zero.Init, for ZeRO stage 3)."""

    _active = 0

    def __init__(self, module=None, data_parallel_group=None, mem_efficient_linear=True, remote_device=None,
                 pin_memory=False, config_dict_or_path=None, config=None, enabled=True, dtype=None, mpu=None):
        if data_parallel_group is not None or mpu is not None:
            raise ValueError("Init: data_parallel_group / mpu: zcoll_torch.zero shards over the whole world")
        if remote_device not in (None, "none", "cpu"):
            raise ValueError(f"Init: remote_device={remote_device!r} is not supported (none or cpu)")
        if not mem_efficient_linear:
            raise ValueError("Init: mem_efficient_linear=False is not supported (stage 3 runs its own linear)")
        self.enabled = enabled
        self.dtype = dtype
        self._patched = []
        if module is not None and enabled:  # an existing module: shard it now
            if not dist.is_initialized():
                raise RuntimeError("Init: torch.distributed is not initialized")
            for m in module.modules():
                for p in m.parameters(recurse=False):
                    if not is_sharded(p):
                        _shard(p)

    def __enter__(self):
        if not self.enabled:
            return self
        if not dist.is_initialized():
            raise RuntimeError("Init: torch.distributed is not initialized (call init_process_group first)")
        if Init._active == 0:
            self._patch()
        Init._active += 1
        return self

    def __exit__(self, *exc):
        if not self.enabled:
            return False
        Init._active -= 1
        if Init._active == 0:
            self._unpatch()
        return False

    def _post_init(self, module):
        for p in module.parameters(recurse=False):
            if not is_sharded(p):
                if self.dtype is not None and p.is_floating_point():
                    p.data = p.data.to(self.dtype)
                _shard(p)

    def _wrap_init(self, cls):
        original = cls.__dict__["__init__"]
        init = self

        def __init__(module, *args, **kwargs):
            depth = module.__dict__.get("_zcoll_init_depth", 0)
            module.__dict__["_zcoll_init_depth"] = depth + 1
            try:
                original(module, *args, **kwargs)
            finally:
                module.__dict__["_zcoll_init_depth"] = depth
            if depth == 0:  # the outermost constructor of this object has returned
                del module.__dict__["_zcoll_init_depth"]
                init._post_init(module)

        __init__.__wrapped__ = original
        cls.__init__ = __init__
        self._patched.append((cls, original))

    def _patch(self):
        for cls in _all_module_classes():
            if "__init__" in cls.__dict__ and cls is not torch.nn.Module:
                self._wrap_init(cls)
        init = self
        self._init_subclass = torch.nn.Module.__dict__.get("__init_subclass__")

        def __init_subclass__(cls, **kwargs):  # classes defined inside the block
            super(torch.nn.Module, cls).__init_subclass__(**kwargs)
            if "__init__" in cls.__dict__:
                init._wrap_init(cls)

        torch.nn.Module.__init_subclass__ = classmethod(__init_subclass__)
        self._apply = torch.nn.Module.apply

        def apply(module, fn):  # each module's fn sees its own parameters gathered; rank 0's result kept
            for child in module.children():
                child.apply(fn)
            with gathered(list(module.parameters(recurse=False)), modifier_rank=0):
                fn(module)
            return module

        torch.nn.Module.apply = apply

    def _unpatch(self):
        for cls, original in reversed(self._patched):
            cls.__init__ = original
        self._patched.clear()
        if self._init_subclass is None:
            del torch.nn.Module.__init_subclass__
        else:
            torch.nn.Module.__init_subclass__ = self._init_subclass
        torch.nn.Module.apply = self._apply
