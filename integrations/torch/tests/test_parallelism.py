"""examples/parallelism: tensor, pipeline and 3D parallelism and the parameter server on zcoll, each equal
to one process's training (the examples check it on every rank; here they run short).

Run by tools/test with the backend's suite; by hand:
    PYTHONPATH=build/integrations/torch /usr/bin/python3 -m pytest -v integrations/torch/tests/test_parallelism.py
"""
import os

import pytest

from test_backend import check_all_ok, launch

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "parallelism")


def run(n, script, *args):
    name = script[:-3]
    check_all_ok(launch(n, list(args), timeout=300, worker=os.path.join(EXAMPLES, script)), name)


@pytest.mark.parametrize("n", [2, 4])
def test_tensor_parallel_layers_and_training_equal_one_process(n):
    run(n, "tensor_parallel.py", "--steps", "5")


@pytest.mark.parametrize("schedule_ranks", [2, 4])
def test_gpipe_and_1f1b_equal_one_process(schedule_ranks):
    run(schedule_ranks, "pipeline_parallel.py", "--steps", "2")


def test_3d_data_tensor_pipeline_on_8_ranks_equals_one_process():
    run(8, "three_d.py", "--steps", "3")


@pytest.mark.parametrize("n", [2, 3])
def test_parameter_server_and_all_reduce_train_alike(n):
    run(n, "parameter_server.py", "--steps", "2", "--features", "512")
