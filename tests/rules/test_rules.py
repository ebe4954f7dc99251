"""Precision rules (Note [precision rules]; docs/policy-language.md) on CPU, through every route.

examples/recipes/precision_rules.yaml uses the three rule kinds: per-dtype entries (`dtypes:`),
argument conditions (`when:` / `unless:`) and per-argument casts (`args:`). This file shows what
each rule does to a call (a dispatch mode records what the wrapper passed down) and the numeric
reason for it (a float16 overflow avoided; batch-norm parameters kept float32 while a model
trains in bfloat16). ctest runs it once per route ($AUTOCASTGEN_RULES_ROUTE):
- generated-torch: the library add_autocast_ops() generated (STATE torch), under torch.autocast;
- generated-autocastgen: its STATE autocastgen twin, under autocastgen.autocast;
- runtime: the same file loaded as a runtime policy, under both (the kernel follows either).
"""
from __future__ import annotations

import contextlib
import math
import os
import pathlib
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

REPO = pathlib.Path(__file__).resolve().parents[2]
POLICY = REPO / "examples" / "recipes" / "precision_rules.yaml"
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build"))
ROUTE = os.environ.get("AUTOCASTGEN_RULES_ROUTE", "")
LIB = os.environ.get("AUTOCASTGEN_RULES_LIB")
sys.path.insert(0, str(BUILD / "python"))
sys.path.append(str(REPO / "tests" / "python"))

import autocastgen  # noqa: E402
from exact import assert_exact  # noqa: E402

F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32
SCOPES = {"generated-torch": ["torch"], "generated-autocastgen": ["autocastgen"], "runtime": ["torch", "autocastgen"]}
if ROUTE not in SCOPES:
    if "AUTOCASTGEN_BUILD_DIR" in os.environ:  # ctest sets both
        raise RuntimeError(f"AUTOCASTGEN_RULES_ROUTE is {ROUTE!r}, not one of {sorted(SCOPES)}")
    pytest.skip("set AUTOCASTGEN_RULES_ROUTE (ctest does)", allow_module_level=True)


@pytest.fixture(scope="module", autouse=True)
def route():
    if ROUTE == "runtime":
        assert autocastgen.load_policy(POLICY) == 7  # overloads: pow, mse_loss, norm, layer_norm, batch_norm, linear, conv2d
    else:
        torch.ops.load_library(LIB)
    yield
    if ROUTE == "runtime":
        autocastgen.clear_runtime_policies()


@pytest.fixture(params=SCOPES[ROUTE])
def scope(request):
    """scope(dtype): the autocast state this route's kernels follow, on for CPU in `dtype`."""
    def enter(dtype):
        if request.param == "torch":
            return torch.autocast("cpu", dtype=dtype)
        return autocastgen.autocast("cpu", dtype=dtype)
    return enter


class Record(TorchDispatchMode):
    """The ops that reached the CPU kernels (below autocast) and their tensor arguments' dtypes."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.calls.append((func.overloadpacket.__name__, [a.dtype if isinstance(a, torch.Tensor) else None for a in args]))
        return func(*args, **kwargs)

    def first(self, *names):
        for name, dtypes in self.calls:
            if name in names:
                return dtypes
        raise AssertionError(f"none of {names} ran: {[n for n, _ in self.calls]}")


def twenty(dtype=F32):
    return torch.full((4,), 20.0, dtype=dtype)


# ---- per-dtype entries and conditions: pow.Tensor_Scalar -------------------------------------------


def test_pow_float16_overflow_is_why(scope):
    # Without a rule, float16 overflows: 20**4 = 160000 > 65504.
    assert torch.isinf(torch.pow(twenty(F16), 4)).all()
    with scope(F16):
        out = torch.pow(twenty(), 4)  # fp32 entry (dtypes: [float16], unless exponent 1 or 2)
    assert_exact(out, torch.full((4,), 160000.0))


def test_pow_square_runs_in_lower_precision(scope):
    for dtype in (F16, BF16):
        with scope(dtype):
            out = torch.pow(twenty(), 2)  # lower_precision_fp entry (when exponent is 1 or 2)
        assert_exact(out, torch.full((4,), 400.0, dtype=dtype))
    with scope(F16):
        assert torch.pow(twenty(), 2.0).dtype == F16  # numbers compare by value: 2.0 is 2


def test_pow_bfloat16_other_exponents_fall_through(scope):
    # bfloat16 has float32's range, so no entry applies: the op runs untouched, in its input's dtype.
    with scope(BF16), Record() as record:
        out = torch.pow(twenty(), 4)
    assert out.dtype == F32 and out[0].item() == 160000.0
    assert record.first("pow")[0] == F32
    assert "_to_copy" not in [name for name, _ in record.calls]  # nothing was cast


# ---- conditions: mse_loss by reduction ------------------------------------------------------------


def test_mse_loss_sum_in_float16_overflows_without_the_rule(scope):
    a, b = torch.full((1000,), 200.0), torch.zeros(1000)
    assert torch.isinf(F.mse_loss(a.half(), b.half(), reduction="sum"))
    with scope(F16):
        total = F.mse_loss(a, b, reduction="sum")  # fp32 unless reduction is none
        elementwise = F.mse_loss(a, b, reduction="none")  # lower_precision_fp when it is
    assert total.dtype == F32 and total.item() == 4e7
    assert_exact(elementwise, torch.full((1000,), 40000.0, dtype=F16))


def test_norm_inf_falls_through_and_p2_runs_in_fp32(scope):
    x = torch.tensor([3.0, -4.0], dtype=F16)
    with scope(F16):
        inf_norm = torch.ops.aten.norm.ScalarOpt_dim(x, math.inf, [0])
        two_norm = torch.ops.aten.norm.ScalarOpt_dim(x, 2, [0])
    assert inf_norm.dtype == F16 and inf_norm.item() == 4.0
    assert two_norm.dtype == F32 and two_norm.item() == 5.0


# ---- per-argument casts: layer_norm and batch_norm -------------------------------------------------


def test_layer_norm_bfloat16_keeps_affine_parameters_fp32(scope):
    x, w, b = torch.randn(2, 8), torch.randn(8), torch.randn(8)
    with scope(BF16), Record() as record:
        out = F.layer_norm(x, [8], w, b)
    assert out.dtype == BF16
    input_dtype, weight_dtype, bias_dtype = (record.first("native_layer_norm")[i] for i in (0, 2, 3))
    assert (input_dtype, weight_dtype, bias_dtype) == (BF16, F32, F32)
    # float16 has its own entry: fp32 throughout.
    with scope(F16):
        assert F.layer_norm(x, [8], w, b).dtype == F32


BATCH_NORM_OPS = ("native_batch_norm", "_native_batch_norm_legit", "_batch_norm_with_update")


def test_batch_norm_parameters_and_statistics_stay_fp32(scope):
    bn = torch.nn.BatchNorm2d(3)
    mean_storage = bn.running_mean.data_ptr()
    with scope(BF16), Record() as record:
        out = bn(torch.randn(4, 3, 5, 5) + 2.0)
    assert out.dtype == BF16
    assert record.first(*BATCH_NORM_OPS)[:5] == [BF16, F32, F32, F32, F32]
    # The statistics were updated in place, in float32: no lower-precision copy was made of them.
    assert bn.running_mean.dtype == F32 and bn.running_mean.data_ptr() == mean_storage
    assert (bn.running_mean > 0.1).all()


def test_batch_norm_model_trains_close_to_fp32(scope):
    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Flatten(),
                                   torch.nn.Linear(8 * 6 * 6, 4))

    torch.manual_seed(1)
    data = [(torch.randn(16, 3, 8, 8), torch.randint(0, 4, (16,))) for _ in range(4)]

    def train(net, autocast):
        opt = torch.optim.SGD(net.parameters(), lr=0.05)
        losses = []
        for step in range(12):
            x, y = data[step % len(data)]
            with autocast:
                loss = F.cross_entropy(net(x).float(), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    reference = train(model(), contextlib.nullcontext())
    net = model()
    mixed = train(net, scope(BF16))
    bn = net[1]
    assert all(p.dtype == F32 for p in net.parameters())
    assert bn.running_mean.dtype == F32 and bn.running_var.dtype == F32
    assert mixed[-1] < mixed[0]  # it learns
    for a, b in zip(reference, mixed):
        assert abs(a - b) <= 0.05 * abs(a) + 0.02, (reference, mixed)


# ---- runtime registration with a rule --------------------------------------------------------------


@pytest.mark.skipif(ROUTE != "runtime", reason="runtime policies only")
def test_register_runtime_policy_with_rule(scope):
    a, b = torch.full((1000,), 200.0), torch.zeros(1000)
    autocastgen.register_runtime_policy("mse_loss", "fp32", "cpu", dtypes=["float16"], unless={"reduction": "none"})
    try:
        with scope(F16):
            assert F.mse_loss(a, b, reduction="sum").dtype == F32
            assert F.mse_loss(a, b, reduction="none").dtype == F32  # unlisted now: falls through in float32
        with scope(BF16):
            assert F.mse_loss(a, b, reduction="sum").dtype == F32  # falls through: the input's dtype
        autocastgen.register_runtime_policy("norm.ScalarOpt_dim", "lower_precision_fp", "cpu", when={"p": math.inf})
        with scope(BF16):
            assert torch.ops.aten.norm.ScalarOpt_dim(torch.ones(2), math.inf, [0]).dtype == BF16
            assert torch.ops.aten.norm.ScalarOpt_dim(torch.ones(2), 2, [0]).dtype == F32
    finally:
        autocastgen.clear_runtime_policies()
        autocastgen.load_policy(POLICY)


@pytest.mark.skipif(ROUTE != "runtime", reason="runtime policies only")
def test_register_runtime_policy_rule_errors():
    with pytest.raises(autocastgen.PolicyError, match=r"'mse_loss' has no argument 'reductoin'; did you mean 'reduction'\?"):
        autocastgen.register_runtime_policy("mse_loss", "fp32", "cpu", unless={"reductoin": "none"})
    with pytest.raises(autocastgen.PolicyError, match=r"'avg' is not a value of 'reduction' \(int\); write none, mean or sum"):
        autocastgen.register_runtime_policy("mse_loss", "fp32", "cpu", when={"reduction": "avg"})
    with pytest.raises(autocastgen.PolicyError, match=r"a Tensor argument of 'mse_loss'"):
        autocastgen.register_runtime_policy("mse_loss", "fp32", "cpu", when={"target": 1})
    with pytest.raises(autocastgen.PolicyError, match=r"'args:' is only meaningful in lower_precision_fp, fp32 and promote"):
        autocastgen.register_runtime_policy("sum", "fp32_set_opt_dtype", "cpu", args={"self": "keep"})
