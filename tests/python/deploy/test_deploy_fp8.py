"""fp8 policies deployed (Note [fp8 in a deployed program] in python/autocastgen/deploy/_fp8.py): a
program autocastgen.export baked with fp8 GEMMs as PyTorch's ops, as ONNX FP8 QuantizeLinear /
DequantizeLinear that ONNX Runtime runs as eager ran, and the paths that cannot be deployed refused
with what to do. (AOTInductor with PyTorch's _scaled_mm: the "fp8" case of test_deploy_aoti.py.)
"""
from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import deploy_support as ds  # noqa: E402
from exact import assert_exact  # noqa: E402

autocastgen = ds.import_autocastgen()
import onnx  # noqa: E402

# Our fp8 ops come with the build's runtime library for every PyTorch release
# (runtime/torch/fp8/primitive_ops.cpp): one missing is a broken build, an error and not a skip.
if not hasattr(torch.ops.autocastgen, "fp8_quantize_weight"):
    raise RuntimeError("torch.ops.autocastgen.fp8_quantize_weight is not registered: the autocastgen package loaded a "
                       "runtime library without it (build the default targets)")
# What depends on the PyTorch release: its CPU _scaled_mm kernel (2.4 and 2.7 have none), which the
# policy's fp8 GEMMs run eager and the deployed programs call.
if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_scaled_mm", "CPU"):
    pytest.skip(f"PyTorch {torch.__version__} has no CPU kernel for aten::_scaled_mm: no fp8 policy runs on the CPU",
                allow_module_level=True)


@functools.cache
def program(scaling: str, granularity: str) -> tuple:
    model, x = ds.fp8_model()
    policy = ds.FP8_POLICY % (scaling, granularity)
    return x, ds.references(model, x, torch.bfloat16, policy), ds.baked_program(model, (x,), dtype=torch.bfloat16,
                                                                                 policy=policy)


def test_fp8_onnx_as_quantize_and_dequantize_linear_runs_as_eager() -> None:
    x, refs, baked = program("current", "tensorwise")
    nodes = list(autocastgen._export.program.unguarded(baked).graph.nodes)
    assert sum(n.target is torch.ops.aten._scaled_mm.default for n in nodes) == 2
    assert not any(getattr(n.target, "namespace", None) == "autocastgen" for n in nodes)
    export = autocastgen.export_onnx(baked)
    onnx.checker.check_model(export.model, full_check=True)
    ops = [n.op_type for n in export.model.graph.node]
    assert ops.count("QuantizeLinear") == export.quantize_linear == 2  # the two activations
    assert ops.count("DequantizeLinear") == 4  # both operands of both GEMMs
    assert min(o.version for o in export.model.opset_import if o.domain == "") >= 19
    fp8_weights = [i for i in export.model.graph.initializer if i.data_type == onnx.TensorProto.FLOAT8E4M3FN
                   and len(i.dims) == 2]
    assert len(fp8_weights) == 2  # quantised when exported: the model holds float8 weights
    (out,) = export.run(x)
    assert_exact(out, refs["eager"])
    assert ds.distance(out, refs["eager"]) < ds.distance(out, refs["default"])


def test_what_cannot_be_deployed_is_refused_with_what_to_do() -> None:
    x, _, rowwise = program("current", "rowwise")
    with pytest.raises(autocastgen.DeployError, match="fp8 with row-wise scales .* does not export to ONNX: use "
                       "granularity: tensorwise for ONNX, or export_aoti"):
        autocastgen.export_onnx(rowwise)
    _, _, tensorwise = program("current", "tensorwise")
    with pytest.raises(autocastgen.DeployError, match="opset=18: float8 types need opset 19 or later"):
        autocastgen.export_onnx(tensorwise, opset=18)
    model, x = ds.fp8_model()
    with pytest.raises(RuntimeError, match="delayed scaling takes a weight's scale from the amaxes of earlier calls"):
        autocastgen.export_onnx(model, (x,), device="cpu", dtype=torch.bfloat16,
                                policy=ds.FP8_POLICY % ("delayed", "tensorwise"))


def test_aoti_refuses_fp8_gemms_a_release_has_no_kernel_for(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # As PyTorch 2.4 and 2.7 would, whose CPU has no _scaled_mm (refused before Inductor compiles).
    _, _, baked = program("current", "tensorwise")
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    monkeypatch.setattr(torch._C, "_dispatch_has_kernel_for_dispatch_key",
                        lambda op, key: op != "aten::_scaled_mm" and has_kernel(op, key))
    with pytest.raises(autocastgen.DeployError, match=r"fp8 GEMM _scaled_mm: PyTorch .* has no cpu kernel for "
                       r"aten::_scaled_mm"):
        autocastgen.export_aoti(baked, package_path=tmp_path / "fp8.pt2")
    assert not (tmp_path / "fp8.pt2").exists()


def test_the_opaque_route_exports_pytorch_ops_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # AUTOCASTGEN_FP8_TRACE=opaque (docs/fp8.md) traces activations as our op fp8_quantize under
    # torch.compile; autocastgen.export writes PyTorch's ops whatever it says.
    monkeypatch.setenv("AUTOCASTGEN_FP8_TRACE", "opaque")
    model, x = ds.fp8_model()
    policy = ds.FP8_POLICY % ("current", "tensorwise")
    baked = ds.baked_program(model, (x,), dtype=torch.bfloat16, policy=policy)
    nodes = autocastgen._export.program.unguarded(baked).graph.nodes
    assert not any(getattr(n.target, "namespace", None) == "autocastgen" for n in nodes)
    (out,) = autocastgen.export_onnx(baked).run(x)
    assert_exact(out, ds.references(model, x, torch.bfloat16, policy)["eager"])
