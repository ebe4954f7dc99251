"""transformers' own exporters (issue 57, item 3; docs/export.md, "transformers' exporters"): a
program from ``transformers.exporters``' Dynamo exporter (its model patches, the Cache classes
registered as pytrees, Dim.AUTO with ``DynamoConfig(dynamic=True)``) takes the policy by
``autocastgen.apply_policy`` and gives eager's bits under the policy: a small Llama's logits and its
DynamicCache's keys and values (the values in float32, where eager keeps the lower precision:
as_the_program_caches), the shipped CPU policy plus a place (one layer's MLP in float32),
bfloat16 and float16; with dynamic shapes at batch sizes and sequence lengths other than the trace's;
and put back into transformers' ``ExportedModel``, saved with ``save_pretrained`` and loaded with
``ExportedModel.from_pretrained`` in a process that cannot import autocastgen.

ctest sets AUTOCASTGEN_BUILD_DIR; by hand (transformers from scripts/models-venv):
  AUTOCASTGEN_BUILD_DIR=build $(scripts/models-venv) -m pytest tests/python/export/test_export_transformers_exporters.py
"""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import warnings
from typing import Any

import pytest
import torch

import requires
from built_tree import require_built

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
require_built(BUILD, "python/autocastgen/__init__.py")

import autocastgen  # noqa: E402
from exact import CHILD_IMPORT, assert_exact  # noqa: E402

transformers = requires.module("transformers")
exporters = requires.module("transformers.exporters", "transformers")  # the pinned 5.24 has it

# autocastgen.export with the pinned PyTorch: an error under ctest where it says no (requires.py).
requires.supported(autocastgen._export.supported())

# Over the shipped CPU policy: the second layer's MLP in float32 (a place).
PLACE = """\
autocast: {device: cpu, lower_precision: [bfloat16, float16]}
modules:
  model.layers.1.mlp: fp32
"""


def small_llama() -> torch.nn.Module:
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def inputs(batch: int, length: int, seed: int = 1) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 128, (batch, length), generator=torch.Generator().manual_seed(seed))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def leaves(output: Any) -> list[torch.Tensor]:
    """The logits and the cache's keys and values, in order."""
    cache = output.cache if hasattr(output, "cache") else output.past_key_values
    return [output.logits, *(t for layer in cache.layers for t in (layer.keys, layer.values))]


def eager(model: torch.nn.Module, kwargs: dict[str, torch.Tensor], dtype: torch.dtype) -> list[torch.Tensor]:
    """The model under the shipped CPU policy and PLACE, attached, in torch.autocast (as the exporter
    traces: under no_grad)."""
    autocastgen.load_policy(autocastgen.shipped_policy("cpu"))
    autocastgen.load_policy(PLACE)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.filterwarnings("ignore", message="autocastgen.attach: .* matches no module")
            with autocastgen.attach(model), torch.autocast("cpu", dtype=dtype):
                return leaves(model(**kwargs))
    finally:
        autocastgen.clear_runtime_policies()


def as_the_program_caches(expected: list[torch.Tensor]) -> list[torch.Tensor]:
    """eager's logits, keys and values as the exporter's program returns them: its graph starts each
    layer's cache as an empty float32 tensor and concatenates the keys and values onto it (aten.cat,
    which autocast runs in the widest dtype of its inputs), so the values, which eager keeps in the
    lower precision, come out float32 with eager's values (the keys are float32 in both)."""
    return [expected[0], *(t.float() for t in expected[1:])]


def baked(program: torch.export.ExportedProgram, dtype: torch.dtype) -> torch.export.ExportedProgram:
    """apply_policy with the shipped CPU policy in force and PLACE over it."""
    autocastgen.load_policy(autocastgen.shipped_policy("cpu"))
    try:
        return autocastgen.apply_policy(program, device="cpu", dtype=dtype, policy=PLACE)
    finally:
        autocastgen.clear_runtime_policies()


def exported(model: torch.nn.Module, dynamic: bool) -> Any:
    """transformers' DynamoExporter's ExportedModel of the model on inputs(2, 8)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return exporters.DynamoExporter().export(model, inputs(2, 8), exporters.DynamoConfig(dynamic=dynamic))


@pytest.fixture(autouse=True)
def no_runtime_policies():
    autocastgen.clear_runtime_policies()
    yield
    autocastgen.clear_runtime_policies()


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16), ids=str)
def test_a_dynamo_exporter_program_takes_the_policy(dtype: torch.dtype) -> None:
    model = small_llama()
    program = exported(model, dynamic=False).program
    assert isinstance(program, torch.export.ExportedProgram)
    with_policy = baked(program, dtype)
    expected = eager(model, inputs(2, 8), dtype)
    assert expected[0].dtype == dtype  # the logits; the cache keys are float32 (rotary embedding)
    assert_exact(leaves(with_policy.module()(**inputs(2, 8))), as_the_program_caches(expected))
    # The place: layer 1's MLP GEMMs in float32, layer 0's in the lower-precision dtype.
    low = str(dtype).removeprefix("torch.")
    ran = {row["module"]: row["ran_in"] for row in autocastgen.precision_map(with_policy)["rows"]
           if row["op"] == "aten::linear"}
    assert ran["model.layers.1.mlp.down_proj"] == {"float32": 1} and ran["model.layers.0.mlp.down_proj"] == {low: 1}, ran


def test_with_dynamic_shapes_at_other_batches_and_lengths() -> None:
    model = small_llama()
    with_policy = baked(exported(model, dynamic=True).program, torch.bfloat16)
    for batch, length in ((2, 8), (1, 5), (3, 13)):
        kwargs = inputs(batch, length, seed=batch * 100 + length)
        assert_exact(leaves(with_policy.module()(**kwargs)), as_the_program_caches(eager(model, kwargs, torch.bfloat16)),
                     (batch, length))


CHILD = CHILD_IMPORT + r"""
import json, sys
try:
    import autocastgen  # noqa: F401
except ModuleNotFoundError:
    pass
else:
    raise SystemExit("autocastgen is importable in the child")
import torch
from transformers.exporters import ExportedModel
folder = sys.argv[1]
case = torch.load(f"{folder}/case.pt")
model = ExportedModel.from_pretrained(f"{folder}/exported", trust_remote_code=True)
out = model(**case["inputs"])
cache = out.cache if hasattr(out, "cache") else out.past_key_values
got = [out.logits, *(t for layer in cache.layers for t in (layer.keys, layer.values))]
print(json.dumps({"equal": [exact(a, b) for a, b in zip(got, case["expected"], strict=True)],
                  "mapped": sorted(p for p in {l.split()[-1] for l in open("/proc/self/maps") if "/" in l}
                                   if p.rsplit("/", 1)[-1].startswith("libautocastgen")
                                   or p.rsplit("/", 2)[-2:-1] == ["autocastgen"])}))
"""


def test_the_baked_program_in_transformers_exported_model_after_save_and_load(tmp_path: pathlib.Path) -> None:
    """The route's own deployment: the baked program as the ExportedModel's component, written by
    save_pretrained and run by ExportedModel.from_pretrained in a process without autocastgen."""
    model = small_llama()
    export = exported(model, dynamic=True)
    component = export.components["model"]
    export.components["model"] = dataclasses.replace(component, program=baked(component.program, torch.bfloat16))
    export.save_pretrained(tmp_path / "exported")
    kwargs = inputs(3, 11, seed=7)
    torch.save({"inputs": kwargs, "expected": as_the_program_caches(eager(model, kwargs, torch.bfloat16))},
               tmp_path / "case.pt")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOCASTGEN_", "PYTHON", "LD_PRELOAD"))}
    result = subprocess.run([sys.executable, "-I", "-c", CHILD, str(tmp_path)], env=env, capture_output=True,
                            text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["mapped"] == [] and report["equal"] == [True] * 5, report
