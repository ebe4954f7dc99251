"""examples/privateuse1/train.py: float32, float16 and bfloat16 autocast training on mydevice.

Run as the README's main job runs it (its own process, PYTHONPATH on the example's build); the
script checks learning, the lower-precision hidden layers and closeness to float32 itself, and
this test reads its JSON to check the same facts independently.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import MYDEVICE_DIR, ROOT


def test_training_on_mydevice(mydevice_module) -> None:
    env = dict(os.environ, PYTHONPATH=str(MYDEVICE_DIR))
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "privateuse1" / "train.py"), "--steps", "300", "--json"],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["problems"] == []
    runs = {run["dtype"]: run for run in report["runs"]}
    assert set(runs) == {"float32", "float16", "bfloat16"}
    for dtype, run in runs.items():
        assert run["params_fp32_on_device"], dtype
        assert run["hidden_dtypes"] == [dtype], dtype
        assert run["final_full_batch_loss"] < 0.25 * run["first_loss"], dtype
        assert 0.8 < run["vs_fp32"] < 1.25, dtype
    assert runs["float16"]["scale"] > 0 and runs["float32"]["scale"] is None
    print({dtype: round(run["final_full_batch_loss"], 5) for dtype, run in runs.items()})
