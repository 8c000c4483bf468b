"""zcoll_torch.zero: ZeRO from PyTorch with DeepSpeed's API, against DDP + torch.optim.AdamW.

Run by tools/test with the backend's suite; by hand:
    PYTHONPATH=build/integrations/torch /usr/bin/python3 -m pytest -v integrations/torch/tests/test_zero.py
"""
import os
import subprocess
import tempfile

import pytest

from test_backend import PYTHON, check_all_ok, free_port, launch

HERE = os.path.dirname(os.path.abspath(__file__))
ZERO_WORKER = os.path.join(HERE, "zero_worker.py")
EXAMPLE = os.path.join(HERE, "..", "..", "..", "examples", "torch_zero", "train_gpt.py")


def zlaunch(n, *args, timeout=600):
    return launch(n, list(args), timeout=timeout, worker=ZERO_WORKER)


@pytest.mark.parametrize("n", [2, 4])
def test_every_stage_matches_ddp_with_param_groups_a_frozen_embedding_and_a_scheduler(n):
    check_all_ok(zlaunch(n, "equiv"), "equiv")


def test_gradient_accumulation_and_no_sync_match_ddp():
    check_all_ok(zlaunch(2, "accum"), "accum")


def test_a_checkpoint_saved_at_4_ranks_continues_its_curve_at_2_and_3():
    with tempfile.TemporaryDirectory() as d:
        check_all_ok(zlaunch(4, "save", d), "save")
        check_all_ok(zlaunch(2, "load", d, "1"), "load")
        check_all_ok(zlaunch(3, "load", d, "2"), "load")


def test_stage3_materialises_only_a_window_of_the_model():
    check_all_ok(zlaunch(2, "stage3mem"), "stage3mem")


def test_config_conflicts_are_refused_with_the_key_named():
    check_all_ok(zlaunch(2, "config"), "config")


def test_a_model_built_in_init_is_never_whole_on_a_rank_and_trains_the_same():
    check_all_ok(zlaunch(2, "init"), "init")


def test_deepspeed_keys_are_honoured_with_deepspeeds_meaning():
    with tempfile.TemporaryDirectory() as d:
        check_all_ok(zlaunch(2, "keys", d), "keys")


def test_cpu_adam_step_is_torch_adamw():
    import torch
    from zcoll_torch import _C
    torch.manual_seed(0)
    p = torch.randn(10007)
    ref = torch.nn.Parameter(p.clone())
    opt = torch.optim.AdamW([ref], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    m, v = torch.zeros_like(p), torch.zeros_like(p)
    for step in range(1, 6):
        g = torch.randn_like(p)
        ref.grad = g.clone()
        opt.step()
        _C.cpu_adam_step(p, g, m, v, lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, step=step)
    assert (p - ref.detach()).abs().max().item() <= 1e-6
    with pytest.raises(ValueError, match="float32"):
        _C.cpu_adam_step(p.double(), g, m, v, lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, step=1)


def zcoll_run():
    path = os.environ.get("PYTHONPATH", "").split(":")[0]
    run = os.path.join(path, "..", "..", "tools", "zcoll-run")
    if not os.path.exists(run):
        pytest.skip(f"no zcoll-run beside PYTHONPATH's zcoll_torch ({run})")
    return run


@pytest.mark.parametrize("n", [2, 4])
def test_the_gpt_example_runs_under_zcoll_run(n):
    p = subprocess.run([zcoll_run(), "-n", str(n), PYTHON, EXAMPLE, "--steps", "5"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode == 0 and "step 5 loss" in p.stdout and f"{n} ranks" in p.stdout, p.stdout


def test_the_gpt_example_runs_under_torchrun():
    # --redirects/--tee named: Debian 12's torchrun cannot parse its own default (see test_backend.py).
    p = subprocess.run([PYTHON, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1", "--nnodes", "1",
                        "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
                        EXAMPLE, "--steps", "5"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode == 0 and "step 5 loss" in p.stdout, p.stdout
