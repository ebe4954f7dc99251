"""autocastgen.export_aoti: baked programs as AOTInductor packages that run in a process without
autocastgen and round as eager does under the policy (docs/deploy.md).

Each case compiles (12-26 s on two cores): the MLP every run, one other case by the run's rotation
(tests/python/rotation.py); AUTOCASTGEN_ALL_CASES=1 runs them all.
  AUTOCASTGEN_BUILD_DIR=build python3 -m pytest tests/python/deploy/test_deploy_aoti.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import deploy_support as ds  # noqa: E402
from exact import assert_exact  # noqa: E402
from rotation import rotating  # noqa: E402

autocastgen = ds.import_autocastgen()

# "plain": the MLP without emulated precision casts (PyTorch's default), to show what they do.
MODELS = [("block", torch.bfloat16), ("mlp", torch.float16), ("llama", torch.bfloat16), ("gpt2", torch.float16),
          ("bert", torch.bfloat16), ("resnet", torch.float16), ("fp8", torch.bfloat16), ("plain", torch.bfloat16)]


def model_case(name: str, dtype: torch.dtype) -> tuple[torch.nn.Module, tuple, str]:
    if name in ("mlp", "block", "plain"):
        model, x = ds.make("block" if name == "block" else "mlp")
        return model, (x,), ds.POLICY
    if name == "fp8":
        model, x = ds.fp8_model()
        return model, (x,), ds.FP8_POLICY % ("current", "tensorwise")
    model, args = ds.real_model(name)
    return model, args, ds.REAL_POLICY


@pytest.mark.parametrize("name,dtype", rotating(MODELS, 1, always=[("mlp", torch.bfloat16)]),
                         ids=lambda v: str(v).removeprefix("torch."))
def test_a_package_runs_without_autocastgen_as_eager_ran(name: str, dtype: torch.dtype, tmp_path: Path) -> None:
    model, args, policy = model_case(name, dtype)
    refs = ds.references(model, args[0], dtype, policy)
    program = ds.baked_program(model, args, dtype=dtype, policy=policy)
    package = autocastgen.export_aoti(program, package_path=tmp_path / f"{name}.pt2",
                                      emulate_precision_casts=name != "plain")
    out = ds.run_without_autocastgen(package, args, tmp_path,
                                     ("transformers.modeling_outputs",) if name in ("llama", "gpt2", "bert") else ())
    if name == "plain":  # Inductor computes fused low-precision chains in float32
        assert ds.distance(out, refs["float32"]) < ds.distance(out, refs["eager"])
        return
    assert ds.distance(out, refs["eager"]) < ds.distance(out, refs["float32"])
    if name == "mlp":
        assert ds.distance(out, refs["eager"]) < 1e-7  # LayerNorm and softmax in Inductor's float32 order
    elif name in ("block", "fp8"):
        # One rounding per op where eager rounds (emulated precision casts), scalars as eager's
        # opmath (Note [scalar operands]), fp8 through PyTorch's _scaled_mm: eager's bits.
        assert_exact(out, refs["eager"])
    else:  # real models: Inductor's GEMMs and convolutions sum in their own order (last bits)
        assert ds.mean_distance(out, refs["eager"]) < ds.mean_distance(out, refs["float32"])
        assert ds.distance(out, refs["eager"]) <= 2 * torch.finfo(dtype).eps * refs["eager"].abs().max().item()
