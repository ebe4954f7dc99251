"""Real models deployed to ONNX Runtime: transformers' Llama, GPT-2 and BERT from configs and a
ResNet, baked under a policy (attention and norms in float32, GEMMs and GELU in the lower-precision
dtype), exported with autocastgen.export_onnx and run on the CPU (docs/deploy.md). Their AOTInductor
packages: test_deploy_aoti.py. bfloat16 every run, float16 by the run's rotation.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import deploy_support as ds  # noqa: E402
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
