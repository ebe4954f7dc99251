"""Precision by place on a real model: a transformers Llama built from a config (no download).

The shipped CPU policy casts Llama's attention and its output projection to bfloat16 like every
other matrix product. llama_places.yaml keeps the shipped policy and adds two rules by place:
attention (aten::scaled_dot_product_attention) in float32 inside the attention modules, and the
lm_head module (the logits) with autocast off and its input in float32. The script compares the
logits against float32 and against plain bfloat16 autocast. docs/python.md, "Precision by place".

From the repository root, after building (needs `pip install transformers`):
  AUTOCASTGEN_RUNTIME_TORCH_LIB=build/lib/libautocastgen_runtime_torch.so PYTHONPATH=build/python \
      python3 examples/places/llama_places.py [FOLDER]
then: build/bin/autocastgen stats FOLDER/llama_bf16.stats.json            (plain bfloat16, per op)
      build/bin/autocastgen stats FOLDER/llama_places.stats.json --by module (by place, per module and op)
FOLDER: where the two statistics files go (default: the temporary folder).
"""

from __future__ import annotations

import pathlib
import sys
import tempfile

import torch
import transformers

import autocastgen  # noqa: E402

autocastgen.compile_policy(autocastgen.shipped_policy("cpu"))  # the shipped CPU policy, generated

HERE = pathlib.Path(__file__).resolve().parent
OUT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.gettempdir())
PLAIN_STATS, STATS = OUT / "llama_bf16.stats.json", OUT / "llama_places.stats.json"

config = transformers.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2)
torch.manual_seed(0)
model = transformers.LlamaForCausalLM(config).eval()
ids = torch.randint(0, config.vocab_size, (2, 32))

print("module paths (named_modules()):")
for path, module in model.named_modules():
    if path in ("", "model.layers.0.self_attn", "model.layers.0.mlp", "model.norm", "lm_head"):
        print(f"  {path!r:28} {type(module).__name__}")


def logits() -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


reference = logits()  # float32, no autocast
with autocastgen.attach(model), autocastgen.stats(str(PLAIN_STATS)), torch.autocast("cpu", dtype=torch.bfloat16):
    plain = logits()  # the generated CPU library: bfloat16 wherever the shipped policy says
# (attached with no module rules loaded: nothing changes but the statistics' rows, now per module)

entries = autocastgen.load_policy(HERE / "llama_places.yaml")
print(f"loaded llama_places.yaml: {entries} entries; module patterns: "
      f"{[(p, kind) for p, _, kind in autocastgen.places.registered_patterns()]}")

with autocastgen.attach(model, strict=True):  # strict: a pattern matching no module is an error
    with autocastgen.stats(str(STATS)), torch.autocast("cpu", dtype=torch.bfloat16):
        placed = logits()

with torch.autocast("cpu", dtype=torch.bfloat16):
    detached = logits()  # the same policy, model not attached: no place, the lists as everywhere

print(f"logits dtype: float32 {reference.dtype}, bf16 autocast {plain.dtype}, by place {placed.dtype}")
print(f"max |float32 logits| {reference.abs().max().item():.4g}; max |logits - float32 logits|: "
      f"bf16 autocast {max_abs_diff(plain, reference):.4g}, by place {max_abs_diff(placed, reference):.4g}, "
      f"by place but not attached {max_abs_diff(detached, reference):.4g}")
print(f"statistics by module: {PLAIN_STATS} (bf16 autocast), {STATS} (by place)")
