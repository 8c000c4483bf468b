"""zcoll_torch: the torch.distributed backend, tested beside gloo with 2 and 4 processes.

Run by tools/test (PYTHONPATH=build/integrations/torch), or by hand:
    PYTHONPATH=build/integrations/torch /usr/bin/python3 -m pytest -v integrations/torch/tests
"""
import os
import socket
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "worker.py")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(n, scenario, timeout=600, env=None, worker=WORKER):
    """Starts n ranks of worker.py SCENARIO (a list: with arguments) with torchrun's variables;
    returns [(rc, output)]."""
    args = scenario if isinstance(scenario, list) else [scenario]
    port = free_port()
    procs = []
    for rank in range(n):
        e = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                 WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n), OMP_NUM_THREADS="1", **(env or {}))
        procs.append(subprocess.Popen([PYTHON, worker] + args, env=e, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    out = []
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            text, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            text, _ = p.communicate()
            text += f"\n[killed after {timeout} s]"
        out.append((p.returncode, text))
    return out


def check_all_ok(results, scenario):
    for rank, (rc, text) in enumerate(results):
        assert rc == 0 and f"OK {scenario}" in text, f"rank {rank} (exit {rc}):\n{text}"


@pytest.mark.parametrize("n", [2, 4])
def test_every_operation_matches_gloo(n):
    check_all_ok(launch(n, "ops"), "ops")


@pytest.mark.parametrize("n", [2, 4])
def test_ddp_training_matches_gloo(n):
    check_all_ok(launch(n, "ddp"), "ddp")


def test_ddp_under_torchrun():
    # Debian 12's torchrun (torch 1.13 on Python 3.11) cannot parse its own default "--redirects 0"
    # (an IntFlag change in Python 3.11; fixed in later torch): name the streams explicitly.
    port = free_port()
    p = subprocess.run([PYTHON, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
                        "--nnodes", "1", "--nproc_per_node", "2",
                        "--master_addr", "127.0.0.1", "--master_port", str(port), WORKER, "ddp"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode == 0 and p.stdout.count("OK ddp") == 2, p.stdout


@pytest.mark.parametrize("n", [2, 4])
def test_zero_redundancy_optimizer_matches_gloo(n):
    check_all_ok(launch(n, "zero"), "zero")


def test_bad_arguments_raise_and_name_the_argument():
    check_all_ok(launch(2, "errors"), "errors")


def test_a_killed_rank_makes_the_others_raise_within_the_timeout():
    timeout_s = 5
    start = time.monotonic()
    results = launch(3, "kill", timeout=120, env={"ZCOLL_TEST_TIMEOUT_S": str(timeout_s)})
    took = time.monotonic() - start
    assert results[1][0] == 3, results[1][1]  # the rank that died
    for rank in (0, 2):
        rc, text = results[rank]
        assert rc == 0 and "raised after" in text, f"rank {rank} (exit {rc}):\n{text}"
    assert took < 60, f"the job took {took:.0f} s"
