"""autocastgen.GradScaler against torch.amp.GradScaler (CPU): same trajectories, state dicts, errors.

What is checked:

1. the interface: every public method of torch.amp.GradScaler exists with the same parameters;
2. 3,000 steps of a small model trained under torch.autocast("cpu", float16) with injected infs
   and NaNs, natural overflows, unscale_ + clipping on some steps and two optimizers: the scale,
   the growth tracker and every parameter equal PyTorch's scaler's bit for bit after every step;
   the same for float16 parameters with a fused Adam (the optimizer unscales itself);
3. state dicts: round trip, each scaler loads the other's, pickling, disabled scalers;
4. bfloat16 gradients are unscaled (and checked) like float32 ones;
5. the extras (hysteresis, min_scale, max_scale) follow docs/scaler.md;
6. bad arguments and misuse raise clear errors;
7. the unscale's direct Python entry (autocastgen._C, Note [unscale from Python]) is built, does
   what torch.ops does bit for bit, and leaves to torch.ops what it must (subclasses, modes).

ctest sets AUTOCASTGEN_BUILD_DIR (the package in <build>/python loads <build>/lib's runtime);
run by hand, build/ is used: python3 -m pytest tests/python/grad_scaler/test_grad_scaler_dropin.py
"""

from __future__ import annotations

import copy
import inspect
import math
import os
import pickle
import warnings
from pathlib import Path

import pytest
import torch

import requires
from built_tree import require_built

ROOT = Path(__file__).resolve().parents[3]
BUILD = Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", ROOT / "build"))
require_built(BUILD, "python/autocastgen/grad_scaler.py")

import autocastgen  # noqa: E402
from exact import assert_exact, exact  # noqa: E402

# One intra-op thread: these tensors are tiny, and on a busy machine a pool only waits for cores.
torch.set_num_threads(1)

TorchScaler = getattr(getattr(torch, "amp", None), "GradScaler", None)
# What PyTorch releases have or lack: skipped with another release, an error under ctest with the
# pinned one (requires.supported_mark), where a probe that fails is a failure (ours breaking autocast).
needs_torch_scaler = requires.supported_mark(
    None if TorchScaler is not None and "device" in inspect.signature(TorchScaler.__init__).parameters
    else "this PyTorch has no torch.amp.GradScaler(device=...) (2.3 and later have)")

INF, NAN = math.inf, math.nan


def cpu_fp16_autocast_works() -> bool:
    try:
        with torch.autocast("cpu", dtype=torch.float16):
            return torch.nn.functional.linear(torch.ones(2, 2), torch.ones(2, 2)).dtype == torch.float16
    except RuntimeError:
        return False


def make_model(dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
    ).to(dtype)


def inject(model: torch.nn.Module, step: int) -> None:
    """Puts an inf or a NaN into one gradient on some steps (the same for every model)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if step % 97 == 5:
        grads[step % len(grads)].view(-1)[0] = INF
    elif step % 131 == 7:
        grads[(step + 1) % len(grads)].view(-1)[-1] = NAN
    elif step % 173 == 11:
        grads[0].view(-1)[1] = -INF


# ---------------------------------------------------------------------------------------------
# 1. The interface.


@needs_torch_scaler
def test_same_public_methods_and_parameters():
    ours = autocastgen.GradScaler
    for name, member in inspect.getmembers(TorchScaler, inspect.isfunction):
        if name.startswith("__"):
            continue
        if name.startswith("_") and name not in ("_get_scale_async", "_get_growth_tracker"):
            continue
        assert hasattr(ours, name), f"autocastgen.GradScaler lacks {name}"
        theirs = list(inspect.signature(member).parameters)
        mine = [p.name for p in inspect.signature(getattr(ours, name)).parameters.values()
                if p.kind is not inspect.Parameter.KEYWORD_ONLY]
        assert mine == theirs, name
    theirs = inspect.signature(TorchScaler.__init__).parameters
    mine = inspect.signature(ours.__init__).parameters
    for name, parameter in theirs.items():
        assert name in mine, name
        assert mine[name].default == parameter.default, name


def test_exported():
    assert "GradScaler" in autocastgen.__all__
    assert autocastgen.GradScaler.__doc__ and autocastgen.GradScaler.update.__doc__


# ---------------------------------------------------------------------------------------------
# 2. Trajectories.


def train_pair(steps, ours, theirs, make, dtype, optimizer_factory, forward, unscale_every=3):
    """Trains two copies of a model, one per scaler, on the same data; returns per-step records."""
    model_a, model_b = make(dtype), make(dtype)
    opt_a, opt_b = optimizer_factory(model_a), optimizer_factory(model_b)
    gen = torch.Generator().manual_seed(1)
    records = {"skipped": 0, "scales": set()}
    for step in range(steps):
        x = torch.randn(8, 16, generator=gen, dtype=dtype) * (1 + (step % 50) * 40)
        y = torch.randn(8, 4, generator=gen, dtype=dtype)
        for model, opt, scaler in ((model_a, opt_a, ours), (model_b, opt_b, theirs)):
            for o in opt:
                o.zero_grad(set_to_none=True)
            loss = forward(model, x, y)
            scaler.scale(loss).backward()
            inject(model, step)
            if unscale_every and step % unscale_every == 0:  # unscale_ + clipping before step
                # Clipped per optimizer: a NaN norm over another optimizer's gradients would
                # poison gradients this one found finite (as it would with PyTorch's scaler).
                for o in opt:
                    scaler.unscale_(o)
                    torch.nn.utils.clip_grad_norm_([p for g in o.param_groups for p in g["params"]], 1.0)
            for o in opt:
                scaler.step(o)
            scaler.update()
        assert ours.get_scale() == theirs.get_scale(), step
        assert ours._get_growth_tracker() == theirs._get_growth_tracker(), step
        assert_exact(list(model_a.parameters()), list(model_b.parameters()), step)
        if not math.isfinite(sum(p.grad.float().sum().item() for p in model_a.parameters())):
            records["skipped"] += 1
        records["scales"].add(ours.get_scale())
    return records


def two_sgds(model):
    params = list(model.parameters())
    return [torch.optim.SGD(params[:2], lr=1e-3, momentum=0.9), torch.optim.SGD(params[2:], lr=1e-3)]


def autocast_fp16_forward(model, x, y):
    with torch.autocast("cpu", dtype=torch.float16):
        out = model(x)
        return torch.nn.functional.mse_loss(out.float(), y)


@needs_torch_scaler
@requires.supported_mark(None if cpu_fp16_autocast_works() else "this PyTorch has no float16 CPU autocast")
def test_fp16_autocast_trajectory_3000_steps_bit_identical():
    kwargs = dict(init_scale=2.0**14, growth_factor=2.0, backoff_factor=0.5, growth_interval=25)
    ours, theirs = autocastgen.GradScaler("cpu", **kwargs), TorchScaler("cpu", **kwargs)
    records = train_pair(3000, ours, theirs, make_model, torch.float32, two_sgds, autocast_fp16_forward)
    # The run must have exercised growth and backoff: injected (~60) and natural overflows.
    assert records["skipped"] > 60
    assert len(records["scales"]) > 5


@needs_torch_scaler
@requires.supported_mark(None if cpu_fp16_autocast_works() else "this PyTorch has no float16 CPU autocast")
def test_odd_factors_trajectory_bit_identical():
    # Factors that are not floats: the scale is multiplied in double and rounded to float.
    kwargs = dict(init_scale=3000.0, growth_factor=1.1, backoff_factor=0.7, growth_interval=7)
    ours, theirs = autocastgen.GradScaler("cpu", **kwargs), TorchScaler("cpu", **kwargs)
    train_pair(600, ours, theirs, make_model, torch.float32, two_sgds, autocast_fp16_forward)


def fused_adam(model):
    return [torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)]


def plain_forward(model, x, y):
    return torch.nn.functional.mse_loss(model(x).float(), y.float())


def fused_adam_works(dtype):
    try:
        p = torch.nn.Parameter(torch.ones(2, dtype=dtype))
        p.grad = torch.ones(2, dtype=dtype)
        torch.optim.Adam([p], fused=True).step()
        return True
    except (RuntimeError, TypeError, ValueError):
        return False


@needs_torch_scaler
@requires.supported_mark(None if fused_adam_works(torch.float16) else "this PyTorch has no fused float16 Adam on CPU")
def test_fp16_params_fused_adam_trajectory_bit_identical():
    # float16 gradients reach the scaler's inf check; the fused optimizer unscales them itself.
    kwargs = dict(init_scale=2.0**10, growth_interval=10)
    ours, theirs = autocastgen.GradScaler("cpu", **kwargs), TorchScaler("cpu", **kwargs)
    # No unscale_: both scalers refuse float16 gradients there.
    records = train_pair(1000, ours, theirs, make_model, torch.float16, fused_adam, plain_forward, unscale_every=0)
    assert records["skipped"] > 10
    assert len(records["scales"]) > 3


@needs_torch_scaler
def test_update_with_new_scale_and_get_scale_async():
    ours, theirs = autocastgen.GradScaler("cpu", init_scale=8.0), TorchScaler("cpu", init_scale=8.0)
    for scaler in (ours, theirs):
        assert scaler._get_scale_async() is None
        scaler.scale(torch.ones(()))
        scaler.update(4.0)
        assert scaler.get_scale() == 4.0
        scaler.update(torch.tensor(2.5))
        assert scaler.get_scale() == 2.5
        assert scaler._get_scale_async().dtype == torch.float32
    ours.update(torch.tensor([1.5]))  # any one-element shape
    assert ours.get_scale() == 1.5


def test_scale_nested_outputs():
    scaler = autocastgen.GradScaler("cpu", init_scale=4.0)
    a, b, c = torch.ones(2), torch.full((3,), 2.0), torch.full((1,), 3.0)
    out = scaler.scale([a, (b, c)])
    assert isinstance(out, list) and isinstance(out[1], tuple)
    assert_exact(out, [a * 4, (b * 4, c * 4)])
    mapped = list(scaler.scale(iter([a, b])))
    assert_exact(mapped[1], b * 4)
    with pytest.raises(ValueError, match="must be a Tensor or an iterable of Tensors"):
        scaler.scale(3.0)


# ---------------------------------------------------------------------------------------------
# 3. State dicts.


def one_step(scaler, model, opt, poison=False):
    opt.zero_grad()
    scaler.scale(model(torch.ones(1, 16)).sum()).backward()
    if poison:
        next(model.parameters()).grad.view(-1)[0] = INF
    scaler.step(opt)
    scaler.update()


@needs_torch_scaler
def test_state_dict_interchange_with_torch():
    kwargs = dict(init_scale=512.0, growth_factor=3.0, backoff_factor=0.25, growth_interval=4)
    ours, theirs = autocastgen.GradScaler("cpu", **kwargs), TorchScaler("cpu", **kwargs)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    for scaler in (ours, theirs):
        for i in range(6):
            one_step(scaler, model, opt, poison=(i == 1))
    assert ours.state_dict() == theirs.state_dict()
    # 512, clean, inf (x0.25: 128), four clean (x3: 384).
    assert ours.state_dict() == {"scale": 384.0, "growth_factor": 3.0, "backoff_factor": 0.25,
                                 "growth_interval": 4, "_growth_tracker": 0}
    # Each loads the other's, before and after its tensors exist, and they keep agreeing.
    fresh_ours, fresh_theirs = autocastgen.GradScaler("cpu"), TorchScaler("cpu")
    fresh_ours.load_state_dict(theirs.state_dict())
    fresh_theirs.load_state_dict(ours.state_dict())
    assert fresh_ours.state_dict() == fresh_theirs.state_dict() == theirs.state_dict()
    for i in range(9):
        for scaler in (fresh_ours, fresh_theirs):
            one_step(scaler, model, opt, poison=(i == 5))
        assert fresh_ours.state_dict() == fresh_theirs.state_dict()
    ours.load_state_dict(fresh_theirs.state_dict())  # the tensors exist: they are filled
    assert ours.state_dict() == fresh_theirs.state_dict()


def test_state_dict_round_trip_and_pickle():
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    a = autocastgen.GradScaler("cpu", init_scale=64.0, growth_interval=3, hysteresis=2, min_scale=1.0, max_scale=1e6)
    for i in range(5):
        one_step(a, model, opt, poison=(i == 0))
    state = a.state_dict()
    assert state == {"scale": 128.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 3,
                     "_growth_tracker": 1, "hysteresis": 2, "_hysteresis_tracker": 2, "min_scale": 1.0,
                     "max_scale": 1e6}
    b = autocastgen.GradScaler("cpu")
    b.load_state_dict(state)
    assert b.state_dict() == state
    c = pickle.loads(pickle.dumps(a))
    assert c.state_dict() == state
    d = copy.deepcopy(a)
    for scaler in (a, b, c, d):
        one_step(scaler, model, opt, poison=True)
    assert a.state_dict() == b.state_dict() == c.state_dict() == d.state_dict()
    # Inside an iteration the scaler refuses to be pickled.
    opt.zero_grad()
    a.scale(model(torch.ones(1, 16)).sum()).backward()
    a.unscale_(opt)
    with pytest.raises(RuntimeError, match="pickle it before scale"):
        pickle.dumps(a)


@needs_torch_scaler
def test_torch_loads_ours_with_extras_ignoring_them():
    ours = autocastgen.GradScaler("cpu", init_scale=32.0, hysteresis=3)
    theirs = TorchScaler("cpu")
    theirs.load_state_dict(ours.state_dict())
    assert theirs.get_scale() == 32.0
    assert theirs.state_dict() == {k: v for k, v in ours.state_dict().items()
                                   if k in ("scale", "growth_factor", "backoff_factor", "growth_interval",
                                            "_growth_tracker")}
    # Loading PyTorch's dict turns the extras off.
    ours.load_state_dict(theirs.state_dict())
    assert ours.get_hysteresis() == 1 and "hysteresis" not in ours.state_dict()


def test_disabled_scaler_is_a_no_op():
    scaler = autocastgen.GradScaler("cpu", enabled=False)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.ones(1, 16)).sum()
    assert scaler.scale(loss) is loss
    loss.backward()
    next(model.parameters()).grad.view(-1)[0] = INF
    before = [p.clone() for p in model.parameters()]
    scaler.unscale_(opt)
    scaler.step(opt)  # steps even with an inf
    scaler.update()
    assert not exact(before, list(model.parameters()))
    assert scaler.get_scale() == 1.0 and not scaler.is_enabled()
    assert scaler.state_dict() == {}
    scaler.load_state_dict({})  # ignored
    enabled = autocastgen.GradScaler("cpu")
    with pytest.raises(RuntimeError, match="state dict is empty"):
        enabled.load_state_dict(scaler.state_dict())


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available")
def test_cuda_without_cuda_warns_and_disables():
    with pytest.warns(UserWarning, match="CUDA is not available"):
        scaler = autocastgen.GradScaler()
    assert not scaler.is_enabled()


# ---------------------------------------------------------------------------------------------
# 4. bfloat16 gradients.


def test_bfloat16_gradients_unscaled_and_checked():
    model = make_model(torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    scaler = autocastgen.GradScaler("cpu", init_scale=2.0**12, growth_interval=1000)
    loss = model(torch.randn(4, 16, dtype=torch.bfloat16)).float().pow(2).sum()
    scaler.scale(loss).backward()
    scaled = [p.grad.clone() for p in model.parameters()]
    assert all(g.dtype == torch.bfloat16 for g in scaled)
    scaler.unscale_(opt)
    for before, p in zip(scaled, model.parameters()):
        # Product in float, rounded once to bfloat16 (a power-of-two scale is exact).
        assert_exact(p.grad, (before.float() * 2.0**-12).to(torch.bfloat16))
    assert scaler.step(opt) is None or True
    scaler.update()
    assert scaler.get_scale() == 2.0**12
    # An inf in a bfloat16 gradient skips the step and backs off.
    before = [p.clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    opt.zero_grad()
    scaler.scale(model(torch.randn(4, 16, dtype=torch.bfloat16)).float().sum()).backward()
    next(model.parameters()).grad.view(-1)[3] = INF
    assert scaler.step(opt) is None
    scaler.update()
    assert scaler.get_scale() == 2.0**11
    assert_exact(list(model.parameters()), before)


@needs_torch_scaler
def test_bfloat16_trajectory_matches_torch_cpu():
    # PyTorch's CPU op takes bfloat16 too (its CUDA op does not): compare where both run.
    kwargs = dict(init_scale=2.0**8, growth_interval=9)
    ours, theirs = autocastgen.GradScaler("cpu", **kwargs), TorchScaler("cpu", **kwargs)
    try:
        train_pair(1, TorchScaler("cpu"), TorchScaler("cpu"), make_model, torch.bfloat16,
                   lambda m: [torch.optim.SGD(m.parameters(), lr=1e-3)], plain_forward)
    except (RuntimeError, ValueError) as error:
        requires.supported(f"this PyTorch's scaler refuses bfloat16 on CPU: {error}")
    records = train_pair(400, ours, theirs, make_model, torch.bfloat16,
                         lambda m: [torch.optim.SGD(m.parameters(), lr=1e-3)], plain_forward)
    assert records["skipped"] > 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_bfloat16_gradients_on_cuda():
    # PyTorch's CUDA op refuses bfloat16; ours unscales it (the kernels: tests/kernels, docs/scaler.md).
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4).to("cuda", torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    scaler = autocastgen.GradScaler("cuda", init_scale=2.0**12)
    scaler.scale(model(torch.randn(8, 16, device="cuda", dtype=torch.bfloat16)).float().sum()).backward()
    scaled = [p.grad.clone() for p in model.parameters()]
    scaler.unscale_(opt)
    for before, p in zip(scaled, model.parameters()):
        assert_exact(p.grad, (before.float() * 2.0**-12).to(torch.bfloat16))
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 2.0**12  # finite: no backoff (growth only after 2000 steps)
    # An overflow is seen where the step unscales (after unscale_ the gradients are not looked at
    # again, as with torch.amp.GradScaler).
    opt.zero_grad()
    scaler.scale(model(torch.randn(8, 16, device="cuda", dtype=torch.bfloat16)).float().sum()).backward()
    model.weight.grad[0, 0] = INF
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 2.0**11


# ---------------------------------------------------------------------------------------------
# 5. The extras.


def run_flags(scaler, flags):
    """Runs update() after a step with found_inf = each flag; returns the scale after each."""
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    scales = []
    for flag in flags:
        opt.zero_grad()
        scaler.scale(model(torch.ones(1, 2)).sum()).backward()
        if flag:
            model.weight.grad[0, 0] = INF
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    return scales


def test_hysteresis_tolerates_n_minus_1_overflows_and_refills_on_growth():
    scaler = autocastgen.GradScaler("cpu", init_scale=64.0, growth_interval=3, hysteresis=3)
    # Two overflows tolerated, the third backs off; 3 clean steps grow and refill the budget.
    assert run_flags(scaler, [1, 1, 1]) == [64.0, 64.0, 32.0]
    assert run_flags(scaler, [1]) == [16.0]  # no refill yet: every overflow now backs off
    assert run_flags(scaler, [0, 0, 0]) == [16.0, 16.0, 32.0]
    assert scaler.state_dict()["_hysteresis_tracker"] == 3
    assert run_flags(scaler, [1, 0, 1, 1]) == [32.0, 32.0, 32.0, 16.0]  # an overflow resets growth
    # hysteresis=1 with the extras path (min_scale set) is PyTorch's rule.
    plain, floored = autocastgen.GradScaler("cpu", init_scale=64.0, growth_interval=2), autocastgen.GradScaler(
        "cpu", init_scale=64.0, growth_interval=2, min_scale=1e-30)
    flags = [1, 0, 0, 1, 1, 0, 0, 0, 0, 1]
    assert run_flags(plain, flags) == run_flags(floored, flags)


def test_min_and_max_scale():
    scaler = autocastgen.GradScaler("cpu", init_scale=8.0, growth_interval=1, min_scale=2.0, max_scale=40.0)
    assert run_flags(scaler, [1, 1, 1, 1]) == [4.0, 2.0, 2.0, 2.0]
    assert run_flags(scaler, [0, 0, 0, 0, 0]) == [4.0, 8.0, 16.0, 32.0, 40.0]
    assert scaler.get_min_scale() == 2.0 and scaler.get_max_scale() == 40.0
    # A growth that would overflow float lands on a finite cap.
    capped = autocastgen.GradScaler("cpu", init_scale=3e38, growth_interval=1, max_scale=3.3e38)
    assert run_flags(capped, [0]) == [pytest.approx(3.3e38, rel=1e-7)]
    uncapped = autocastgen.GradScaler("cpu", init_scale=3e38, growth_interval=1)
    assert run_flags(uncapped, [0]) == [pytest.approx(3e38, rel=1e-7)]  # PyTorch's rule: no growth to inf


def test_default_extras_give_torch_state_dict_keys():
    scaler = autocastgen.GradScaler("cpu", hysteresis=1, min_scale=0.0, max_scale=None)
    assert set(scaler.state_dict()) == {"scale", "growth_factor", "backoff_factor", "growth_interval",
                                        "_growth_tracker"}
    assert scaler.get_max_scale() is None


# ---------------------------------------------------------------------------------------------
# 6. Errors.


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        (dict(growth_factor=1.0), ValueError, "growth_factor must be > 1.0, got 1.0"),
        (dict(backoff_factor=1.0), ValueError, r"backoff_factor must be in \(0, 1\), got 1.0"),
        (dict(backoff_factor=0.0), ValueError, r"backoff_factor must be in \(0, 1\)"),
        (dict(growth_interval=0), ValueError, "growth_interval must be >= 1, got 0"),
        (dict(growth_interval=2.5), TypeError, "growth_interval must be an int, not float"),
        (dict(init_scale="big"), TypeError, "init_scale must be a number, not str"),
        (dict(hysteresis=0), ValueError, r"hysteresis must be an integer >= 1 \(1 turns it off\), got 0"),
        (dict(min_scale=4.0, max_scale=2.0), ValueError, "need 0 <= min_scale <= max_scale, got min_scale=4.0"),
        (dict(min_scale=-1.0), ValueError, "need 0 <= min_scale <= max_scale"),
        (dict(min_scale=math.nan), ValueError, "need 0 <= min_scale <= max_scale"),
    ],
)
def test_bad_constructor_arguments(kwargs, error, text):
    with pytest.raises(error, match=text):
        autocastgen.GradScaler("cpu", **kwargs)


def test_bad_device_argument():
    with pytest.raises(TypeError, match="device must be a device type name"):
        autocastgen.GradScaler(torch.device("cpu"))


def test_misuse_raises():
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = autocastgen.GradScaler("cpu")
    with pytest.raises(RuntimeError, match="the scale is not initialized"):
        scaler.unscale_(opt)
    scaler.scale(model(torch.ones(1, 16)).sum()).backward()
    with pytest.raises(RuntimeError, match="no inf checks were recorded in this iteration"):
        scaler.update()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="already called for this optimizer"):
        scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="closures are not supported"):
        scaler.step(opt, closure=lambda: None)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="step: already called"):
        scaler.step(opt)
    with pytest.raises(RuntimeError, match="called after step"):
        scaler.unscale_(opt)
    scaler.update()
    with pytest.raises(ValueError, match="new_scale must be a float or a 1-element cpu tensor"):
        scaler.update(torch.ones(2))
    with pytest.raises(KeyError, match="no key 'growth_interval'"):
        scaler.load_state_dict({"scale": 1.0, "growth_factor": 2.0, "backoff_factor": 0.5, "_growth_tracker": 0})
    with pytest.raises(ValueError, match="hysteresis must be an integer >= 1"):
        scaler.load_state_dict(dict(scaler.state_dict(), hysteresis=0))
    assert scaler.get_hysteresis() == 1  # nothing changed


@needs_torch_scaler
def test_errors_torch_reports_as_assertions_are_assertions_too():
    # Code written against torch.amp.GradScaler that catches AssertionError keeps working.
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for scaler_type in (TorchScaler, autocastgen.GradScaler):
        with pytest.raises(AssertionError):
            scaler_type("cpu", growth_factor=0.5)
        scaler = scaler_type("cpu")
        with pytest.raises(AssertionError):
            scaler.step(opt)  # no scale yet
        scaler.scale(torch.ones(()))
        with pytest.raises(AssertionError):
            scaler.update()  # no inf checks
        with pytest.raises(AssertionError):
            scaler.update(torch.ones(2))
    with pytest.raises(RuntimeError):
        autocastgen.GradScaler("cpu").update()
    with pytest.raises(ValueError):
        autocastgen.GradScaler("cpu", growth_factor=0.5)


def test_float16_gradients_refused_by_unscale():
    model = make_model(torch.float16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = autocastgen.GradScaler("cpu")
    scaler.scale(model(torch.ones(1, 16, dtype=torch.float16)).float().sum()).backward()
    with pytest.raises(ValueError, match="cannot unscale float16 gradients"):
        scaler.step(opt)


def test_optimizer_without_gradients():
    model = make_model()
    used, unused = torch.optim.SGD(model[0].parameters(), lr=0.1), torch.optim.SGD(model[4].parameters(), lr=0.1)
    scaler = autocastgen.GradScaler("cpu")
    scaler.scale(model[0](torch.ones(1, 16)).sum()).backward()
    scaler.step(used)
    with pytest.raises(RuntimeError, match="none of its parameters has a gradient"):
        scaler.step(unused)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaler.update()


# -- 7. the unscale's direct Python entry ---------------------------------------------------------

from autocastgen import grad_scaler as _grad_scaler  # noqa: E402


def random_lists(seed: int):
    """Gradients of every dtype and shape class the op takes: empty, strided, with infs and NaNs."""
    gen = torch.Generator().manual_seed(seed)
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        grads = [(torch.randn(n, generator=gen) * 2.0 ** torch.randint(-12, 12, (1,), generator=gen)).to(dtype)
                 for n in (0, 1, 7, 4099, 70000)]
        grads.append(torch.randn(40, 30, generator=gen).to(dtype).t())  # not contiguous
        yield [g.clone() for g in grads]
        grads[2][3] = INF
        grads[5][1, 2] = NAN
        yield grads


def test_direct_unscale_is_built_and_equals_torch_ops():
    assert _grad_scaler._C is not None, "autocastgen._C was not built (python/CMakeLists.txt needs Python's headers)"
    for grads in random_lists(0):
        for inv in (0.5, 1 / 3, 1.0):
            ours = [g.clone() for g in grads]
            theirs = [g.clone() for g in grads]
            found_ours, found_theirs = torch.zeros(1), torch.zeros(1)
            assert _grad_scaler._C.non_finite_check_and_unscale_(ours, found_ours, torch.full((1,), inv)) is True
            torch.ops.autocastgen.non_finite_check_and_unscale_(theirs, found_theirs, torch.full((1,), inv))
            assert_exact(found_ours, found_theirs)
            assert_exact(ours, theirs, strides=True)


def test_direct_unscale_leaves_other_inputs_to_torch_ops():
    class Marked(torch.Tensor):  # a subclass with its own (inherited) __torch_function__
        pass

    direct = _grad_scaler._C.non_finite_check_and_unscale_
    marked = torch.full((3,), 4.0).as_subclass(Marked)
    found, half = torch.zeros(1), torch.full((1,), 0.5)
    # A tuple, or a list holding a subclass: nothing done, False returned.
    grads = (torch.full((3,), 4.0),)
    assert direct(grads, found, half) is False
    assert_exact(grads[0], torch.full((3,), 4.0))
    first = torch.full((3,), 4.0)
    assert direct([first, marked], found, half) is False
    assert_exact(first, torch.full((3,), 4.0))
    assert_exact(marked.as_subclass(torch.Tensor), first)
    # found_inf or inv_scale a subclass: the same.
    assert direct([first], torch.zeros(1).as_subclass(Marked), half) is False
    assert direct([first], found, torch.full((1,), 0.5).as_subclass(Marked)) is False
    assert_exact(first, torch.full((3,), 4.0))
    # An nn.Parameter is a plain tensor to PyTorch, and so to the direct entry.
    parameter = torch.nn.Parameter(torch.full((3,), 4.0), requires_grad=False)
    assert direct([parameter], found, half) is True
    assert_exact(parameter.detach(), torch.full((3,), 2.0))
    # The package's entry then goes through torch.ops, which a torch function mode sees too.
    seen = []

    class Spy(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    _grad_scaler.non_finite_check_and_unscale_([marked], found, half)
    assert_exact(marked.as_subclass(torch.Tensor), torch.full((3,), 2.0))
    with Spy():
        _grad_scaler.non_finite_check_and_unscale_([torch.ones(2)], found, half)
    assert any("non_finite_check_and_unscale_" in name for name in seen), seen
    # Errors are the op's own, word for word.
    for call in (direct, torch.ops.autocastgen.non_finite_check_and_unscale_):
        with pytest.raises(RuntimeError, match=r"gradient 0 has dtype Int; supported dtypes are Float"):
            call([torch.ones(3, dtype=torch.int32)], found, half)
