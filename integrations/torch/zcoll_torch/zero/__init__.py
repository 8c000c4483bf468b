"""ZeRO from PyTorch on zcoll's C++ engine, with DeepSpeed's API and config files.

    import zcoll_torch.zero as deepspeed
    engine, optimizer, _, lr_scheduler = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                                              config="ds_config.json")
    for batch in data:
        loss = engine(batch)
        engine.backward(loss)
        engine.step()

The engine (include/zcoll/zero.hpp) holds the parameters, gradients and optimizer states and shards them
by the config's "zero_optimization.stage" (1: optimizer states, 2: and gradients, 3: and parameters); the
module's parameters are views of its buffers. See docs/user-guide.md ("ZeRO from PyTorch") and
integrations/torch/README.md for what differs from DeepSpeed.
"""
import sys as _sys

from .engine import ZeroEngine, ZeroOptimizer, GatheredParameters, initialize
from .init import Init

# DeepSpeed spells these deepspeed.zero.Init and deepspeed.zero.GatheredParameters.
zero = _sys.modules[__name__]

__all__ = ["initialize", "ZeroEngine", "ZeroOptimizer", "GatheredParameters", "Init", "zero"]
