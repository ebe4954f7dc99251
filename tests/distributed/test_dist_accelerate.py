"""``accelerate launch`` with two CPU processes (DDP over gloo on 127.0.0.1) under a policy with a
precision rule and a place (docs/training.md, "Accelerate"): on each rank, a tiny transformers Llama
trained through ``Accelerator(mixed_precision="bf16", cpu=True)`` has the losses and weights of the
hand-written DDP loop under ``torch.autocast`` with the same policy, bit for bit (accelerate_ranks.py
runs both in each rank and writes what differed).

The launcher runs in a child bounded in time (its process group killed at the deadline); the ranks
find the build's package and the tests' support modules on PYTHONPATH. torchrun binds the port
``--main_process_port 0`` picks, on 127.0.0.1. The interpreter is the one configured by
-DAUTOCASTGEN_PYTHON=$(scripts/models-venv), which has transformers and Accelerate; a missing one there
is an error (tests/python/requires.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import dist_harness

dist_harness.setup_package_path()
if str(dist_harness.ROOT / "tests" / "python") not in sys.path:
    sys.path.append(str(dist_harness.ROOT / "tests" / "python"))

import requires  # noqa: E402

requires.module("transformers")
requires.module("accelerate")

from training_support import rules_policy, write  # noqa: E402

HERE = Path(__file__).resolve().parent
TIMEOUT_S = 200


def test_accelerate_launch_on_two_cpu_processes_is_the_hand_ddp_loop_bit_for_bit(tmp_path: Path) -> None:
    policy = write(tmp_path, "policy.yaml", rules_policy())
    environment = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
                       PYTHONPATH=os.pathsep.join([str(dist_harness.BUILD / "python"),
                                                   str(dist_harness.ROOT / "tests" / "python")]))
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--main_process_ip", "127.0.0.1", "--main_process_port", "0",
               "--mixed_precision", "bf16", "--dynamo_backend", "no", str(HERE / "accelerate_ranks.py"),
               str(policy), str(tmp_path)]
    launcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment,
                                cwd=tmp_path, start_new_session=True)
    try:
        output, _ = launcher.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(launcher.pid, signal.SIGKILL)
        output, _ = launcher.communicate()
        raise AssertionError(f"accelerate launch still running after {TIMEOUT_S} s:\n{output[-4000:]}") from None
    assert launcher.returncode == 0, output[-6000:]
    for rank in (0, 1):
        found = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert found == {"distributed_type": "DistributedType.MULTI_CPU", "backend": "gloo", "world": 2,
                         "losses": None, "weights": None}, (rank, found)
