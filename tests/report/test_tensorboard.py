"""autocastgen.insight.TensorBoard (docs/insight.md, TensorBoard): per-step figures and the
GradScaler's scale and skipped steps written with torch.utils.tensorboard.SummaryWriter, read back
with TensorBoard's own event reader. tensorboard is pinned in scripts/requirements.txt: missing, an error
under ctest with the pinned PyTorch, else a skip (tests/python/requires.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
sys.path.insert(0, str(REPO / "tests" / "python"))  # built_tree, requires
import requires  # noqa: E402
from built_tree import require_built  # noqa: E402

require_built(BUILD, "python/autocastgen/__init__.py")  # an error under ctest where missing
import torch  # noqa: E402

requires.module("tensorboard")


def test_scaler_and_step_figures_reach_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    import autocastgen

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = autocastgen.GradScaler("cpu", init_scale=2.0**10, growth_interval=1)
    writer = SummaryWriter(str(tmp_path))
    board = autocastgen.insight.TensorBoard(writer)
    autocastgen.register_runtime_policy("aten::linear", "lower_precision_fp", "cpu")
    try:
        logged, bad_steps = [], {2, 3}
        for step in range(5):
            with autocastgen.stats() as s:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = model(torch.randn(16, 8)).float().pow(2).mean()
            scaler.scale(loss * (float("inf") if step in bad_steps else 1.0)).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            logged.append(board.log(step, stats=s, scaler=scaler))
    finally:
        autocastgen.clear_runtime_policies()
    writer.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    scalars = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    assert [v for _, v in scalars["autocastgen/scaler/skipped_steps"]] == [0, 0, 1, 2, 2]
    scales = [v for _, v in scalars["autocastgen/scaler/scale"]]
    assert scales == [2.0**11, 2.0**12, 2.0**11, 2.0**10, 2.0**11]  # grows each good step, halves at each inf
    assert [v for _, v in scalars["autocastgen/calls/bfloat16"]] == [1.0] * 5
    assert [v for _, v in scalars["autocastgen/casts"]] == [s["casts"] for s in logged]
    assert [step for step, _ in scalars["autocastgen/casts"]] == list(range(5))
