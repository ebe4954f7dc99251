"""Every op of torch.ops.autocastgen that takes or returns tensors passes torch.library.opcheck
(schema, autograd registration, fake tensors, AOT dispatch) on the sample inputs below.

The ops are enumerated from the dispatcher, so an op added without sample inputs here (and so,
most likely, without a fake kernel) fails test_every_tensor_op_has_samples.
"""
from __future__ import annotations

import glob
import os

import pytest
import torch

from exact import assert_exact

# The fp8 GEMMs' kernels, fake ones included, refuse to run where PyTorch has no CPU _scaled_mm
# (2.11 and later have one; 2.4 and 2.7 do not): the fp8 policy runs such calls in the
# lower-precision dtype instead (docs/fp8.md), so there is no fp8 GEMM to check.
HAS_CPU_SCALED_MM = torch._C._dispatch_has_kernel_for_dispatch_key("aten::_scaled_mm", "CPU")
needs_cpu_scaled_mm = pytest.mark.skipif(
    not HAS_CPU_SCALED_MM, reason=f"torch {torch.__version__} has no CPU _scaled_mm kernel (2.11 and later have one)")
FP8_GEMMS = ("autocastgen::fp8_linear", "autocastgen::fp8_mm", "autocastgen::fp8_addmm")

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def _library_path():
    # ctest passes the built library; by hand, the newest build*/lib copy is used.
    path = os.environ.get("AUTOCASTGEN_RUNTIME_TORCH_LIB")
    if path:
        return path
    found = glob.glob(os.path.join(_REPO, "build*", "lib", "libautocastgen_runtime_torch.so"))
    return max(found, key=os.path.getmtime) if found else None


_PATH = _library_path()
if _PATH is None:
    pytest.skip("libautocastgen_runtime_torch.so is not built (set AUTOCASTGEN_RUNTIME_TORCH_LIB)", allow_module_level=True)
torch.ops.load_library(_PATH)
ops = torch.ops.autocastgen


def _rand(*shape, dtype=torch.float32, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).requires_grad_(requires_grad)


def _param(*shape, seed=0):
    return torch.nn.Parameter(_rand(*shape, seed=seed) * 0.1)


def _has_tensors(schema) -> bool:
    return any("Tensor" in str(a.type) for a in (*schema.arguments, *schema.returns))


def tensor_ops():
    """(qualified name, OpOverload) of every autocastgen overload whose schema has a tensor."""
    found = []
    for qualified in sorted(torch._C._dispatch_get_all_op_names()):
        if not qualified.startswith("autocastgen::"):
            continue
        name, _, overload = qualified[len("autocastgen::"):].partition(".")
        op = getattr(getattr(ops, name), overload or "default")
        if _has_tensors(op._schema):
            found.append((qualified, op))
    return found


ALL = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
# The fp8 GEMMs: static shapes (below), and no test_schema: PyTorch's SchemaCheckMode compares the
# inputs of every op inside with torch.allclose, which has no fp8 kernel, so aten._scaled_mm itself
# fails it (test_schema_check_cannot_compare_fp8_yet).
STATIC = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_static")
# opcheck's AOT check compares tensors only: ops that return a str or numbers skip it (the support
# rules are metadata-only composites, so the fake check runs them on fake tensors).
NO_AOT = ("test_schema", "test_autograd_registration", "test_faketensor")


def _linear():
    return (_rand(2, 16, 32, requires_grad=True), _param(16, 32), _param(16, seed=1)), {"out_dtype": torch.bfloat16}


def _mm():
    return (_rand(32, 32, requires_grad=True), _param(32, 16)), {"out_dtype": torch.bfloat16}


def _addmm():
    return (_param(16, seed=1), _rand(32, 32, requires_grad=True), _param(32, 16)), {
        "beta": 0.5, "alpha": 2.0, "out_dtype": torch.bfloat16}


def _grads():
    return [_rand(8, 4, seed=1), _rand(5, dtype=torch.bfloat16, seed=2)]


# name -> [(args factory, tests, why not ALL)]. The fp8 GEMMs decide fp8 or not by concrete
# shapes (Note [fp8 shapes]), so they are checked with static shapes, and dynamic ones must stop
# with a message (test_fp8_gemms_refuse_symbolic_shapes).
SAMPLES = {
    "autocastgen::fp8_quantize": [
        (lambda: ((_rand(32, 16, requires_grad=True), E4M3), {"margin": 1}), ALL, ""),
        (lambda: ((_rand(4, 8, dtype=torch.bfloat16), E5M2), {}), ALL, ""),
    ],
    "autocastgen::fp8_quantize_weight": [
        (lambda: ((_param(32, 16), E4M3), {}), ALL, ""),
        (lambda: ((_param(32, 16), E4M3), {"scaling": "delayed", "amax_history_len": 4, "margin": 1}), ALL, ""),
        (lambda: ((_param(16, 16), E4M3), {"cache": False, "fused": False}), ALL, ""),
    ],
    "autocastgen::fp8_quantize_weight_rowwise": [
        (lambda: ((_param(32, 16), E4M3, 1), {}), ALL, ""),
        (lambda: ((_param(32, 16), E4M3, 0), {"margin": 1}), ALL, ""),
        (lambda: ((_param(16, 32), E4M3, 0), {"cache": False}), ALL, ""),
    ],
    "autocastgen::fp8_quantize_rowwise": [
        (lambda: ((_rand(32, 16, requires_grad=True), E4M3, 1), {"margin": 1}), ALL, ""),
        (lambda: ((_rand(4, 8, dtype=torch.bfloat16), E4M3, 0), {}), ALL, ""),
        (lambda: ((_rand(5, 3, dtype=torch.float16), E5M2, 0), {"fused": False}), ALL, ""),
    ],
    "autocastgen::fp8_amax": [(lambda: ((_rand(7, 5, requires_grad=True),), {}), ALL, "")],
    "autocastgen::fp8_scale_cast": [(lambda: ((_rand(6, 3), torch.tensor(4.0), E4M3), {}), ALL, "")],
    "autocastgen::fp8_scale_from_amax": [(lambda: ((torch.tensor(3.5), E5M2), {"margin": 2}), ALL, "")],
    "autocastgen::fp8_linear": [(_linear, STATIC, "fp8 needs static shapes")],
    "autocastgen::fp8_mm": [(_mm, STATIC, "fp8 needs static shapes")],
    "autocastgen::fp8_addmm": [(_addmm, STATIC, "fp8 needs static shapes")],
    "autocastgen::fp8_linear_support": [
        (lambda: (_linear()[0] + (torch.bfloat16,), {}), NO_AOT, "returns str"),
    ],
    "autocastgen::fp8_mm_support": [(lambda: (_mm()[0] + (torch.bfloat16,), {}), NO_AOT, "returns str")],
    "autocastgen::fp8_addmm_support": [(lambda: (_addmm()[0] + (torch.bfloat16,), {}), NO_AOT, "returns str")],
    # Plain tensors are always "" here; DTensor's answer is tested in tests/distributed/test_dist_fp8.py.
    "autocastgen::fp8_layout_support": [
        (lambda: ((_rand(32, 32, requires_grad=True), _param(16, 32), _param(16, seed=1), True), {}), NO_AOT,
         "returns str"),
    ],
    # Reads a weight's recorded amaxes: eager only, refused on fake tensors
    # (test_delayed_scaling_state_refuses_fake_tensors).
    "autocastgen::fp8_delayed_scaling_state": [
        (lambda: ((_param(16, 16),), {}), ("test_schema", "test_autograd_registration"), "eager-only inspection"),
    ],
    "autocastgen::non_finite_check_and_unscale_": [
        (lambda: ((_grads(), torch.zeros(1), torch.full((1,), 0.5)), {}), ALL, ""),
    ],
    # What a traced driver call puts into a compiled graph (Note [insight in compiled code]); with
    # the insight off, as here, it does nothing.
    "autocastgen::observe_traced": [
        (lambda: (([_rand(4, 8, requires_grad=True)], [_rand(4, 4)], 0), {}), ALL, ""),
    ],
    # The drop-in schemas return an alias of a mutated argument; a Functionalize kernel runs their
    # functional twins under torch.compile (Note [functionalising the scale update]).
    "autocastgen::update_scale_": [
        (lambda: ((torch.full((1,), 4.0), torch.zeros(1, dtype=torch.int32), torch.zeros(1), 2.0, 0.5, 3), {}), ALL, ""),
        (lambda: ((torch.full((1,), 4.0), torch.full((1,), 2, dtype=torch.int32), torch.ones(1), 2.0, 0.5, 3), {}),
         ALL, ""),
    ],
    "autocastgen::update_scale_hysteresis_": [
        (lambda: ((torch.full((1,), 4.0), torch.zeros(1, dtype=torch.int32), torch.ones(1, dtype=torch.int32),
                   torch.ones(1), 2.0, 0.5, 3), {"hysteresis": 2, "max_scale": 8.0}), ALL, ""),
    ],
    "autocastgen::update_scale": [
        (lambda: ((torch.full((1,), 4.0), torch.full((1,), 2, dtype=torch.int32), torch.zeros(1), 2.0, 0.5, 3), {}),
         ALL, ""),
    ],
    "autocastgen::update_scale_hysteresis": [
        (lambda: ((torch.full((1,), 4.0), torch.zeros(1, dtype=torch.int32), torch.ones(1, dtype=torch.int32),
                   torch.ones(1), 2.0, 0.5, 3), {"hysteresis": 2, "max_scale": 8.0}), ALL, ""),
    ],
}


def test_every_tensor_op_has_samples():
    names = [name for name, _ in tensor_ops()]
    assert "autocastgen::fp8_linear" in names  # the enumeration sees the library's ops
    missing = [name for name in names if name not in SAMPLES]
    assert not missing, (
        f"{missing}: ops of torch.ops.autocastgen that take or return tensors need a fake (Meta) kernel, "
        "an autograd registration and sample inputs in SAMPLES (tests/python/runtime/test_custom_ops.py)")
    stale = sorted(set(SAMPLES) - set(names))
    assert not stale, f"{stale}: SAMPLES names ops that are not registered"


@pytest.fixture(autouse=True)
def fresh_fp8_state():
    ops.fp8_clear_weight_cache()
    ops.fp8_reset_delayed_scaling_state()
    yield
    ops.fp8_clear_weight_cache()
    ops.fp8_reset_delayed_scaling_state()


# (op, opcheck test) -> (the first release that passes it, why an older one cannot).
RELEASE_GAPS = {
    ("autocastgen::non_finite_check_and_unscale_", "test_aot_dispatch_dynamic"): (
        (2, 7), "PyTorch 2.4's functionalisation refuses a custom op that mutates a Tensor[] argument "
        "('Found a custom (non-ATen) operator whose output has alias annotations'); verified from 2.7"),
}
TORCH = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


def _marks(name, test):
    marks = [needs_cpu_scaled_mm] if name in FP8_GEMMS else []
    first, why = RELEASE_GAPS.get((name, test), ((0, 0), ""))
    if TORCH < first:
        marks.append(pytest.mark.skip(reason=f"torch {torch.__version__}: {why}"))
    return marks


@pytest.mark.parametrize("name,index,test", [
    pytest.param(n, i, t, marks=_marks(n, t))
    for n, samples in SAMPLES.items() for i, (_, tests, _) in enumerate(samples) for t in tests])
def test_opcheck(name, index, test):
    factory, _, _ = SAMPLES[name][index]
    args, kwargs = factory()
    overload = dict(tensor_ops())[name]
    results = torch.library.opcheck(overload, args, kwargs, test_utils=test, raise_exception=False)
    assert results == {test: "SUCCESS"}, f"{name}: {results}"


@needs_cpu_scaled_mm
def test_schema_check_cannot_compare_fp8_yet():
    # When this fails, PyTorch's SchemaCheckMode handles fp8: add test_schema to STATIC.
    a, b, one = _rand(32, 32).to(E4M3), _rand(16, 32).to(E4M3).t(), torch.tensor(1.0)
    results = torch.library.opcheck(torch.ops.aten._scaled_mm.default, (a, b, one, one), {"out_dtype": torch.bfloat16},
                                    test_utils="test_schema", raise_exception=False)
    assert "not implemented for 'Float8_e4m3fn'" in str(results["test_schema"])


def test_update_scale_compiles_and_steps_as_eager():
    # fullgraph, aot_eager bit for bit and Inductor, over steps with and without an overflow: the
    # graph holds the functional twin (Note [functionalising the scale update]).
    def step(scale, tracker, hysteresis_left, found):
        ops.update_scale_(scale, tracker, found, 2.0, 0.5, 2)
        ops.update_scale_hysteresis_(scale, tracker, hysteresis_left, found, 2.0, 0.5, 2, hysteresis=2)
        return scale * 1

    for backend in ("aot_eager", "inductor"):
        torch._dynamo.reset()
        compiled = torch.compile(step, backend=backend, fullgraph=True)
        eager_state = [torch.full((1,), 1024.0), torch.zeros(1, dtype=torch.int32), torch.full((1,), 2, dtype=torch.int32)]
        compiled_state = [t.clone() for t in eager_state]
        for found in (0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0):
            want = step(*eager_state, torch.full((1,), found))
            got = compiled(*compiled_state, torch.full((1,), found))
            assert_exact(got, want, backend)
            assert_exact(compiled_state, eager_state, backend)
    # The functionalised graph calls the twins, and copies the results back into the inputs.
    from torch._dynamo.backends.common import aot_autograd

    torch._dynamo.reset()
    forward_graphs = []
    recorder = aot_autograd(fw_compiler=lambda gm, _: forward_graphs.append(gm) or gm)
    torch.compile(step, backend=recorder, fullgraph=True)(
        torch.full((1,), 8.0), torch.zeros(1, dtype=torch.int32), torch.ones(1, dtype=torch.int32), torch.zeros(1))
    code = forward_graphs[0].code
    assert "autocastgen.update_scale.default" in code and "autocastgen.update_scale_hysteresis.default" in code
    assert "update_scale_." not in code and "update_scale_hysteresis_." not in code


def test_update_scale_of_a_scale_the_function_closes_over_lands_on_it():
    scale = torch.full((1,), 8.0)  # not an argument: Dynamo lifts it into the graph's inputs
    tracker = torch.zeros(1, dtype=torch.int32)

    @torch.compile(backend="aot_eager", fullgraph=True)
    def step(found):
        ops.update_scale_(scale, tracker, found * 1, 2.0, 0.5, 2)

    step(torch.ones(1))
    assert scale.item() == 4.0 and tracker.item() == 0
    step(torch.zeros(1))
    step(torch.zeros(1))
    assert scale.item() == 8.0 and tracker.item() == 0


@needs_cpu_scaled_mm
def test_fp8_gemms_refuse_symbolic_shapes():
    args, kwargs = _linear()
    with pytest.raises(Exception, match="concrete shapes"):
        torch.library.opcheck(ops.fp8_linear.default, args, kwargs, test_utils="test_aot_dispatch_dynamic")


def test_delayed_scaling_state_refuses_fake_tensors():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        weight = mode.from_tensor(_param(16, 16))
        with pytest.raises(RuntimeError, match="outside the compiled function"):
            ops.fp8_delayed_scaling_state(weight)


def test_weight_quantisation_never_reads_fake_data():
    # The fake kernels give shapes and dtypes; the weight cache and delayed state stay untouched.
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        w = mode.from_tensor(_param(32, 16))
        data, inv = ops.fp8_quantize_weight(w, E4M3, scaling="delayed")
        assert (data.shape, data.dtype, inv.shape, inv.dtype) == (w.shape, E4M3, torch.Size([]), torch.float32)
    assert ops.fp8_delayed_scaling_state_size() == 0
    assert ops.fp8_weight_cache_stats()[2] == 0


@needs_cpu_scaled_mm
def test_quantisation_never_reads_fake_data():
    # The fake kernels give shapes and dtypes; the weight cache and delayed state stay untouched.
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        w = mode.from_tensor(_param(32, 16))
        data, inv = ops.fp8_quantize_weight(w, E4M3, scaling="delayed")
        assert (data.shape, data.dtype, inv.shape, inv.dtype) == (w.shape, E4M3, torch.Size([]), torch.float32)
        y = ops.fp8_linear(mode.from_tensor(_rand(32, 16)), w, None, out_dtype=torch.bfloat16)
        assert (y.shape, y.dtype) == (torch.Size([32, 32]), torch.bfloat16)
    assert ops.fp8_delayed_scaling_state_size() == 0
    assert ops.fp8_weight_cache_stats()[2] == 0
