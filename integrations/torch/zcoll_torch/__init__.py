"""zcoll as a torch.distributed process-group backend.

    import zcoll_torch                      # registers the backend "zcoll"
    torch.distributed.init_process_group("zcoll", ...)

Every CPU tensor operation of torch.distributed runs on zcoll: all_reduce, all_gather(_into_tensor),
reduce_scatter(_tensor), broadcast, reduce, all_to_all(_single), gather, scatter, send/recv
(batch_isend_irecv too) and barrier, with async_op=True, wait() and futures. See
integrations/torch/README.md.
"""
import torch  # noqa: F401  (loads libtorch before the extension)
import torch.distributed as dist

from . import _C

__all__ = ["create_process_group"]


def create_process_group(store, rank, size, timeout):
    """torch.distributed's creator function for the backend "zcoll"."""
    return _C.create_process_group(store, rank, size, timeout)


if not hasattr(dist.Backend, "ZCOLL"):
    try:  # torch 2.x: the devices the backend serves
        dist.Backend.register_backend("zcoll", create_process_group, devices=["cpu"])
    except TypeError:  # torch 1.13
        dist.Backend.register_backend("zcoll", create_process_group)
