"""autocastgen.GradScaler's update and unscale path at their edges: the checks of the extras at
their bounds, which gradients reach the unscale (none, sparse, several optimizers), the errors'
whole text, the scaler's own tensors whatever the default dtype and device, and which entry the
unscale takes (Note [unscale from Python]). Each against torch.amp.GradScaler where it has the same
behaviour. The short tests scripts/mutants runs for each mutant of grad_scaler.py (docs/testing.md);
the long trajectories are test_grad_scaler_dropin.py's.

ctest sets AUTOCASTGEN_BUILD_DIR; by hand:
  AUTOCASTGEN_BUILD_DIR=build python3 -m pytest tests/python/grad_scaler/test_scaler_checks.py
"""
from __future__ import annotations

import inspect
import math
import os
from pathlib import Path

import pytest
import torch

import requires
from built_tree import require_built

ROOT = Path(__file__).resolve().parents[3]
BUILD = Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", ROOT / "build"))
require_built(BUILD, "python/autocastgen/grad_scaler.py")

import autocastgen  # noqa: E402
from autocastgen import grad_scaler as _grad_scaler  # noqa: E402
from exact import assert_exact  # noqa: E402

torch.set_num_threads(1)

TorchScaler = getattr(getattr(torch, "amp", None), "GradScaler", None)
needs_torch_scaler = requires.supported_mark(
    None if TorchScaler is not None and "device" in inspect.signature(TorchScaler.__init__).parameters
    else "this PyTorch has no torch.amp.GradScaler(device=...) (2.3 and later have)")

INF = math.inf
NOT_INITIALIZED = "the scale is not initialized; call scale(loss or outputs) earlier in the iteration"


def params(*grads: torch.Tensor | None) -> list[torch.nn.Parameter]:
    out = []
    for grad in grads:
        p = torch.nn.Parameter(torch.zeros(3))
        p.grad = None if grad is None else grad.clone()
        out.append(p)
    return out


# -- the checks of the extras -----------------------------------------------------------------------

def test_hysteresis_is_at_most_int32s_largest() -> None:
    assert autocastgen.GradScaler("cpu", hysteresis=2**31 - 1).get_hysteresis() == 2**31 - 1
    for bad in (2**31, 0, -1):
        with pytest.raises(ValueError) as error:
            autocastgen.GradScaler("cpu", hysteresis=bad)
        assert str(error.value) == f"autocastgen.GradScaler: hysteresis must be an integer >= 1 (1 turns it off), got {bad}"


def test_min_scale_may_equal_max_scale() -> None:
    scaler = autocastgen.GradScaler("cpu", init_scale=4.0, min_scale=4.0, max_scale=4.0, growth_interval=1)
    p = params(torch.ones(3))
    opt = torch.optim.SGD(p, lr=0.1)
    for grad in (torch.ones(3), torch.full((3,), INF)):  # growth, then backoff: both clamped to 4
        scaler.scale(torch.ones(()))
        p[0].grad = grad.clone()
        scaler.step(opt)
        scaler.update()
        assert scaler.get_scale() == 4.0
    for lo, hi in ((4.0, 3.0), (-1.0, 2.0), (math.nan, 2.0), (1.0, math.nan)):
        with pytest.raises(ValueError) as error:
            autocastgen.GradScaler("cpu", min_scale=lo, max_scale=hi)
        assert str(error.value) == (f"autocastgen.GradScaler: need 0 <= min_scale <= max_scale, got min_scale={lo} "
                                    f"max_scale={hi}")


# -- which gradients reach the unscale --------------------------------------------------------------

def test_parameters_without_a_gradient_are_passed_over() -> None:
    p = params(None, torch.full((3,), 8.0), None, torch.full((3,), -2.0))
    scaler = autocastgen.GradScaler("cpu", init_scale=4.0)
    opt = torch.optim.SGD(p, lr=1.0)
    scaler.scale(torch.ones(()))
    scaler.unscale_(opt)
    assert p[0].grad is None and p[2].grad is None
    assert_exact(p[1].grad, torch.full((3,), 2.0))
    assert_exact(p[3].grad, torch.full((3,), -0.5))


def test_what_is_no_tensor_and_float16_gradients_are_refused_in_so_many_words() -> None:
    p = params(torch.ones(3))
    opt = torch.optim.SGD(p, lr=1.0)
    opt.param_groups[0]["params"].append("weight")
    scaler = autocastgen.GradScaler("cpu")
    scaler.scale(torch.ones(()))
    with pytest.raises(TypeError) as error:
        scaler.unscale_(opt)
    assert str(error.value) == "autocastgen.GradScaler: optimizer parameters must be Tensors, not str"
    half = torch.nn.Parameter(torch.zeros(3, dtype=torch.float16))
    half.grad = torch.ones(3, dtype=torch.float16)
    with pytest.raises(ValueError) as error:
        scaler.unscale_(torch.optim.SGD([half], lr=1.0))
    assert str(error.value) == ("autocastgen.GradScaler: cannot unscale float16 gradients; keep the optimizer's "
                                "parameters in float32 (autocast casts them for the forward pass)")


def sparse(dtype: torch.dtype, values: list[float]) -> torch.Tensor:
    """Values at indices 0, 0, 2 (a duplicate): not coalesced."""
    return torch.sparse_coo_tensor(torch.tensor([[0, 0, 2]]), torch.tensor(values, dtype=dtype), (3,), check_invariants=True)


@needs_torch_scaler
@pytest.mark.parametrize("values", [[8.0, 4.0, -2.0], [8.0, INF, -2.0]])
def test_sparse_gradients_are_unscaled_as_pytorch_does(values: list[float]) -> None:
    # float32: the values unscaled in place, the gradient left uncoalesced, as PyTorch leaves it.
    grads = []
    for scaler_type in (autocastgen.GradScaler, TorchScaler):
        p = torch.nn.Parameter(torch.zeros(3))
        p.grad = sparse(torch.float32, values)
        scaler = scaler_type("cpu", init_scale=4.0)
        opt = torch.optim.SGD([p], lr=1.0)
        scaler.scale(torch.ones(()))
        scaler.unscale_(opt)
        scaler.update()
        grads.append((p.grad.is_coalesced(), p.grad._indices(), p.grad._values(), scaler.get_scale()))
    assert_exact(grads[0], grads[1])
    assert grads[0][0] is False


class Fused(torch.optim.SGD):
    """An optimizer that unscales and skips by itself (PyTorch's fused ones): it records what the
    scaler hands it."""

    _step_supports_amp_scaling = True

    def step(self, closure=None):  # noqa: ANN001, ANN201 - torch.optim's signature
        self.handed = (self.grad_scale.clone(), self.found_inf.clone())


@needs_torch_scaler
def test_a_sparse_float16_gradient_is_checked_coalesced() -> None:
    # 40000 + 40000 at one index is inf in float16 only once coalesced: the check finds it (as
    # PyTorch's does), and the optimizer's gradient is the coalesced one.
    handed = []
    for scaler_type in (autocastgen.GradScaler, TorchScaler):
        p = torch.nn.Parameter(torch.zeros(3, dtype=torch.float16))
        p.grad = sparse(torch.float16, [40000.0, 40000.0, 1.0])
        opt = Fused([p], lr=1.0)
        scaler = scaler_type("cpu", init_scale=1.0)
        scaler.scale(torch.ones(()))
        scaler.step(opt)
        handed.append((*opt.handed, p.grad.is_coalesced(), p.grad._values()))
    assert_exact(handed[0], handed[1])
    assert handed[0][1].item() == 1.0 and handed[0][2] is True


@needs_torch_scaler
@pytest.mark.parametrize("pattern", [(INF, INF, 1.0), (1.0, INF, 1.0), (INF, 1.0), (1.0, 1.0, 1.0), (1.0, 1.0, INF)])
def test_every_optimizers_inf_checks_decide_the_update(pattern: tuple[float, ...]) -> None:
    # One optimizer per parameter, each gradient finite or not: the scale and its tracker after
    # update() are PyTorch's scaler's.
    results = []
    for scaler_type in (autocastgen.GradScaler, TorchScaler):
        scaler = scaler_type("cpu", init_scale=8.0, growth_interval=1)
        p = params(*(torch.full((3,), value) for value in pattern))
        optimizers = [torch.optim.SGD([q], lr=1.0) for q in p]
        for step in range(2):
            scaler.scale(torch.ones(()))
            for q, value in zip(p, pattern):
                q.grad = torch.full((3,), value if step else 1.0)
            for opt in optimizers:
                scaler.step(opt)
            scaler.update()
            results.append((scaler_type.__name__, scaler.get_scale(), scaler._get_growth_tracker()))
    ours, theirs = results[:2], results[2:]
    assert [r[1:] for r in ours] == [r[1:] for r in theirs]
    assert ours[1][1] == (8.0 if INF in pattern else 32.0)


# -- the errors -------------------------------------------------------------------------------------

def test_misuse_is_refused_in_so_many_words() -> None:
    p = params(torch.ones(3))
    opt = torch.optim.SGD(p, lr=1.0)
    scaler = autocastgen.GradScaler("cpu")
    for call, name in ((lambda: scaler.unscale_(opt), "unscale_"), (scaler.update, "update"),
                       (lambda: scaler.step(opt), "step")):
        with pytest.raises(RuntimeError) as error:
            call()
        assert str(error.value) == f"autocastgen.GradScaler.{name}: {NOT_INITIALIZED}"
    scaler.scale(torch.ones(()))
    with pytest.raises(RuntimeError) as error:
        scaler.update()
    assert str(error.value) == ("autocastgen.GradScaler.update: no inf checks were recorded in this iteration; "
                                "call step() or unscale_() before update()")
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError) as error:
        scaler.unscale_(opt)
    assert str(error.value) == ("autocastgen.GradScaler.unscale_: already called for this optimizer since the last "
                                "update()")
    scaler.step(opt)
    with pytest.raises(RuntimeError) as error:
        scaler.unscale_(opt)
    assert str(error.value) == "autocastgen.GradScaler.unscale_: called after step() for this optimizer; call update() first"
    scaler.update()
    for new_scale in (torch.ones(2), torch.ones((), requires_grad=True), torch.ones((), device="meta")):
        with pytest.raises(ValueError) as error:
            scaler.update(new_scale)
        assert str(error.value) == ("autocastgen.GradScaler.update: new_scale must be a float or a 1-element cpu "
                                    "tensor with requires_grad=False")
    for new_scale, kind in (("2.0", "str"), (True, "bool"), ([2.0], "list")):
        with pytest.raises(TypeError) as error:
            scaler.update(new_scale)
        assert str(error.value) == f"autocastgen.GradScaler: new_scale must be a number, not {kind}"
    scaler.update(torch.full((1,), 3.0))
    assert scaler.get_scale() == 3.0
    scaler.update(5)
    assert scaler.get_scale() == 5.0


# -- the scaler's own tensors -----------------------------------------------------------------------

@needs_torch_scaler
def test_the_scalers_tensors_are_its_own_whatever_the_defaults() -> None:
    # A float64 default dtype and a meta default device change none of the scaler's tensors:
    # found_inf is float32 on the scale's device, and the steps are PyTorch's scaler's.
    before = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        with torch.device("meta"):
            results = []
            for scaler_type in (autocastgen.GradScaler, TorchScaler):
                scaler = scaler_type("cpu", init_scale=4.0, growth_interval=1)
                p = [torch.nn.Parameter(torch.zeros(3, dtype=torch.float32, device="cpu"))]
                opt = torch.optim.SGD(p, lr=1.0)
                for value in (8.0, INF, 2.0):
                    scaler.scale(torch.ones((), dtype=torch.float32, device="cpu"))
                    p[0].grad = torch.full((3,), value, dtype=torch.float32, device="cpu")
                    scaler.unscale_(opt)
                    found = scaler._per_optimizer_states[id(opt)]["found_inf_per_device"]
                    assert [(f.dtype, f.device.type) for f in found.values()] == [(torch.float32, "cpu")]
                    scaler.step(opt)
                    scaler.update()
                    results.append((scaler.get_scale(), p[0].detach().clone()))
    finally:
        torch.set_default_dtype(before)
    assert_exact(results[:3], results[3:])


# -- which entry the unscale takes ------------------------------------------------------------------

class Recording:
    """autocastgen._C with its unscale entry's calls counted, and those it did (it answers False for
    what it leaves to torch.ops)."""

    def __init__(self, inner: object) -> None:
        self.inner, self.calls, self.done = inner, 0, 0

    def non_finite_check_and_unscale_(self, grads: list, found: torch.Tensor, inv: torch.Tensor) -> bool:
        self.calls += 1
        done = self.inner.non_finite_check_and_unscale_(grads, found, inv)
        self.done += done is True
        return done


def test_the_unscale_takes_the_direct_entry_in_eager_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # Eager, plain tensors in a list: autocastgen._C's entry, not the dispatcher (cheaper); while
    # torch.compile traces, or without _C, torch.ops. The same results either way.
    assert _grad_scaler._C is not None
    recording = Recording(_grad_scaler._C)
    monkeypatch.setattr(_grad_scaler, "_C", recording)

    def unscale() -> tuple[torch.Tensor, torch.Tensor]:
        grads, found = [torch.tensor([4.0, INF])], torch.zeros(())
        _grad_scaler.non_finite_check_and_unscale_(grads, found, torch.full((), 0.5))
        return grads[0], found

    want = (torch.tensor([2.0, INF]), torch.ones(()))
    assert_exact(unscale(), want)
    assert recording.calls == 1 and recording.done == 1
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert_exact(unscale(), want)
    assert recording.calls == 1
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: False)
    monkeypatch.setattr(_grad_scaler, "_C", None)
    assert_exact(unscale(), want)


def test_which_cuda_device_is_asked_whether_our_kernels_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # The device's own index, or the current device's for "cuda"; never asked for the CPU.
    asked: list[int] = []
    monkeypatch.setattr(_grad_scaler, "cuda_kernels_missing", lambda index: asked.append(index) or None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert _grad_scaler.pytorch_kernels_instead(torch.device("cuda", 1)) is False
    assert _grad_scaler.pytorch_kernels_instead(torch.device("cuda")) is False
    assert _grad_scaler.pytorch_kernels_instead(torch.device("cpu")) is False
    assert asked == [1, 3]
