"""autocastgen.GradScaler where autocastgen's CUDA kernels cannot run (Note [PyTorch's kernels where ours
cannot run] in autocastgen/_core/runtime.py): PyTorch's own scaler kernels run instead, with the same
results, and a warning says so once a process.

No GPU here: the choice is forced for the CPU device (pytorch_kernels_instead answers True), where
PyTorch's scaler kernels run too, and the training must be bit for bit the one on autocastgen's
kernels, PyTorch's kernels must be the ones called, and the extras (hysteresis, clamps, which PyTorch
lacks) must still follow autocastgen's rule. What answers for a real GPU (the CUDA part missing, or
older than the part's oldest architecture) is checked with the runtime's facts stubbed.
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path

import pytest
import torch

from built_tree import require_built

ROOT = Path(__file__).resolve().parents[3]
BUILD = Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", ROOT / "build"))
require_built(BUILD, "python/autocastgen/grad_scaler.py")

import autocastgen  # noqa: E402
import autocastgen._core.runtime as runtime  # noqa: E402
import autocastgen.grad_scaler as grad_scaler  # noqa: E402
from exact import assert_exact  # noqa: E402

torch.set_num_threads(1)


def train(scaler_kwargs: dict[str, object], bursts: int = 1) -> tuple[list[torch.Tensor], list[float], list[int]]:
    """A small model trained 40 steps with overflows injected in bursts of `bursts` steps; its
    parameters, and the scale and growth tracker after each step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = autocastgen.GradScaler("cpu", init_scale=2.0**10, growth_interval=3, **scaler_kwargs)
    scales, trackers = [], []
    for step in range(40):
        x = torch.randn(4, 8)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        scaler.scale(loss).backward()
        if 3 <= step % 10 < 3 + bursts:  # an overflow: the step is skipped and the scale backs off
            next(model.parameters()).grad[0, 0] = math.inf
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        scales.append(scaler.get_scale())
        trackers.append(scaler._get_growth_tracker())
    return [p.detach().clone() for p in model.parameters()], scales, trackers


@pytest.fixture
def pytorch_kernels(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Forces PyTorch's kernels for the CPU device and counts the calls of each."""
    calls = {"unscale": 0, "update": 0}
    unscale, update = torch._amp_foreach_non_finite_check_and_unscale_, torch._amp_update_scale_

    def counted_unscale(*args: object) -> None:
        calls["unscale"] += 1
        unscale(*args)

    def counted_update(*args: object) -> torch.Tensor:
        calls["update"] += 1
        return update(*args)

    monkeypatch.setattr(torch, "_amp_foreach_non_finite_check_and_unscale_", counted_unscale)
    monkeypatch.setattr(torch, "_amp_update_scale_", counted_update)
    monkeypatch.setattr(grad_scaler, "cuda_kernels_missing", lambda device_index: "forced by the test")
    monkeypatch.setattr(grad_scaler, "_told_pytorch_kernels", False)
    original = grad_scaler.pytorch_kernels_instead

    def forced(device: torch.device) -> bool:
        return original(torch.device("cuda", 0)) if device.type == "cpu" else original(device)

    monkeypatch.setattr(grad_scaler, "pytorch_kernels_instead", forced)
    return calls


def test_pytorch_kernels_train_bit_for_bit_as_ours_and_say_so_once(pytorch_kernels: dict[str, int]) -> None:
    with pytest.MonkeyPatch.context() as unforced:  # autocastgen's kernels
        unforced.setattr(grad_scaler, "pytorch_kernels_instead", lambda device: False)
        ours = train({})
    assert pytorch_kernels == {"unscale": 0, "update": 0}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        theirs = train({})
    assert pytorch_kernels == {"unscale": 40, "update": 40}
    assert_exact(theirs, ours)
    told = [str(w.message) for w in caught if "PyTorch's own scaler kernels" in str(w.message)]
    assert told == ["autocastgen.GradScaler: forced by the test: PyTorch's own scaler kernels run on cuda:0 instead "
                    "(the same results)"]


def test_the_extras_keep_autocastgens_rule_where_pytorchs_kernels_run(pytorch_kernels: dict[str, int]) -> None:
    extras = {"hysteresis": 2, "min_scale": 2.0**8, "max_scale": 2.0**11}
    with pytest.MonkeyPatch.context() as unforced:
        unforced.setattr(grad_scaler, "pytorch_kernels_instead", lambda device: False)
        ours = train(extras, bursts=5)
    theirs = train(extras, bursts=5)
    assert pytorch_kernels == {"unscale": 40, "update": 0}  # PyTorch has no hysteresis: our CPU op ran
    assert_exact(theirs, ours)
    assert min(ours[1]) == 2.0**8 and max(ours[1]) == 2.0**11  # the clamps were reached, both ways


def test_why_ours_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    runtime.cuda_kernels_missing.cache_clear()
    monkeypatch.setattr(runtime, "_cuda_kernels_registered", lambda: False)
    monkeypatch.setattr(runtime, "_cuda_part", "not loaded: a custom torch build")
    assert runtime.cuda_kernels_missing(0) == "autocastgen's CUDA part is not loaded: a custom torch build"
    runtime.cuda_kernels_missing.cache_clear()
    monkeypatch.setattr(runtime, "_cuda_kernels_registered", lambda: True)
    monkeypatch.setattr(runtime, "release_build_info", lambda: {"oldest_cuda_arch": 70})
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: (6, 1))
    assert runtime.cuda_kernels_missing(0) == (
        "autocastgen's CUDA part has code for sm_70 and newer, and this GPU is sm_61")
    runtime.cuda_kernels_missing.cache_clear()
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: (7, 0))
    assert runtime.cuda_kernels_missing(0) is None
    runtime.cuda_kernels_missing.cache_clear()
    monkeypatch.setattr(runtime, "release_build_info", lambda: None)  # a build of the clone: its own archs
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: (5, 0))
    assert runtime.cuda_kernels_missing(0) is None
    runtime.cuda_kernels_missing.cache_clear()


def test_cpu_tensors_never_take_pytorchs_kernels() -> None:
    assert grad_scaler.pytorch_kernels_instead(torch.device("cpu")) is False
