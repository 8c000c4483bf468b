"""Start-up and end shared by the parallelism examples."""
import argparse

import torch
import torch.distributed as dist

import zcoll_torch  # noqa: F401  (registers the "zcoll" backend)


def start(doc, **options):
    """Parses --NAME options given as NAME=(type, default, help) and joins the job on the zcoll backend
    (zcoll-run's or torchrun's environment). Returns (args, rank, ranks)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, (kind, default, text) in options.items():
        ap.add_argument("--" + name.replace("_", "-"), type=kind, default=default, help=text)
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("zcoll")
    return args, dist.get_rank(), dist.get_world_size()


def finish(name):
    """Every rank's verdict line (the tests look for it), then the process group's end."""
    print(f"OK {name}", flush=True)
    dist.destroy_process_group()
