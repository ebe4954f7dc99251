"""Real models deployed to ONNX Runtime: transformers' Llama, GPT-2, BERT and T5 (encoder-decoder)
from configs and a ResNet, baked under a policy (attention and norms in float32, GEMMs and GELU in
the lower-precision dtype), exported with autocastgen.export_onnx and run on the CPU
(docs/deploy.md). Their AOTInductor packages: test_deploy_aoti.py. bfloat16 every run, float16 by
the run's rotation.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import deploy_support as ds  # noqa: E402
import requires  # noqa: E402
from exact import assert_exact  # noqa: E402
from export_checks import small_t5  # noqa: E402
from rotation import rotating  # noqa: E402

autocastgen = ds.import_autocastgen()

CASES = [(name, dtype) for dtype in (torch.bfloat16, torch.float16) for name in ds.REAL_MODELS]


@pytest.mark.parametrize("name,dtype", rotating(CASES[4:], 1, always=CASES[:4]),
                         ids=lambda v: str(v).removeprefix("torch."))
def test_a_real_model_runs_in_onnxruntime_as_eager_ran(name: str, dtype: torch.dtype, tmp_path: Path) -> None:
    model, args = ds.real_model(name)  # transformers: requires.py
    refs = ds.references(model, args[0], dtype, ds.REAL_POLICY)
    program = ds.baked_program(model, args, dtype=dtype, policy=ds.REAL_POLICY)
    export = autocastgen.export_onnx(program)
    (out, *_) = export.run(*args)
    modules = {p.value for n in export.model.graph.node for p in n.metadata_props if p.key == "pkg.autocastgen.module"}
    assert {"resnet": "layer2.1.conv2", "llama": "model.layers.1.self_attn.q_proj", "gpt2": "transformer.h.1.mlp.c_fc",
            "bert": "bert.encoder.layer.1.intermediate.dense"}[name] in modules
    # What differs is a last-bit difference of the GEMMs' float32 sums (ONNX Runtime adds in another
    # order than PyTorch's CPU kernels), so the measure is the mean error; the largest is a few bits.
    eager, float32, default = (ds.mean_distance(out, refs[k]) for k in ("eager", "float32", "default"))
    assert eager < float32 and eager < default, (eager, float32, default)
    ulp = torch.finfo(dtype).eps * refs["eager"].abs().max().item()
    assert ds.distance(out, refs["eager"]) <= 2 * ulp
    # What it pays over float32 is eager's rounding: no Cast ONNX Runtime runs could be left out.
    assert ds.wasted_casts(ds.graph_onnxruntime_runs(export, tmp_path)) == []


def t5() -> tuple[torch.nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """A small T5ForConditionalGeneration (test_export_models.py's): self-attention's sdpa mask is the
    relative position bias, made from a parameter."""
    transformers = requires.module("transformers")  # scripts/models-venv: a skip elsewhere, an error there
    torch.manual_seed(0)
    model = small_t5(transformers).eval()
    return model, (torch.randint(0, 128, (2, 16)), torch.randint(0, 128, (2, 12)))


@pytest.mark.parametrize("dtype", rotating([torch.bfloat16, torch.float16], 1, always=[torch.bfloat16]),
                         ids=lambda v: str(v).removeprefix("torch."))
def test_t5_runs_in_onnxruntime_as_eager_ran(dtype: torch.dtype, tmp_path: Path) -> None:
    """As the real models above, with two inputs; exported under no_grad (the test below: with
    gradients on torch.onnx's own passes fail at a view)."""
    model, args = t5()
    with torch.no_grad():
        float32 = model(*args)
        with torch.autocast("cpu", dtype=dtype):
            default = model(*args)
            with ds.policy_loaded(ds.REAL_POLICY):
                eager = model(*args)
        program = ds.baked_program(model, args, dtype=dtype, policy=ds.REAL_POLICY)
        export = autocastgen.export_onnx(program)
    (out, *_) = export.run(*args)
    modules = {p.value for n in export.model.graph.node for p in n.metadata_props if p.key == "pkg.autocastgen.module"}
    assert "model.decoder.block.1.layer.1.EncDecAttention.q" in modules
    distances = [ds.mean_distance(out, r) for r in (eager, float32, default)]
    assert distances[0] < distances[1] and distances[0] < distances[2], distances
    assert ds.distance(out, eager) <= 2 * torch.finfo(dtype).eps * eager.float().abs().max().item()
    assert ds.wasted_casts(ds.graph_onnxruntime_runs(export, tmp_path)) == []


def test_t5_exports_to_onnx_with_gradients_on() -> None:
    # torch.onnx decomposes the program under no_grad (a reshape made a view of the flash kernel's
    # layout) and propagated its types with gradients on (sdpa's math kernel, contiguous, since T5's
    # mask requires grad): export_onnx translates under no_grad, so the graph is the one no_grad gives.
    model, args = t5()
    program = ds.baked_program(model, args, dtype=torch.bfloat16, policy=ds.REAL_POLICY)
    with_grad = autocastgen.export_onnx(program)
    with torch.no_grad():
        without = autocastgen.export_onnx(program)
    assert_exact(with_grad.run(*args)[0], without.run(*args)[0])
