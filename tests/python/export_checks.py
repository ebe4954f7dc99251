"""Saved programs run in a process that cannot import autocastgen: the check of docs/export.md's
"bit for bit after save and load" (test_export.py, test_export_models.py).

A case is a program saved with torch.export.save and the inputs and eager output it must give; the
child loads each, runs it plain and inside torch.autocast (float16 and bfloat16), and compares with
exact.exact (dtype, shape and bits, Note [exact results]). It runs with `python -I` (no PYTHONPATH, no user site) in an environment without
AUTOCASTGEN_*, asserts that `import autocastgen` fails, and reports whether any library of
autocastgen was mapped into it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from exact import CHILD_IMPORT

# The export and deploy issues' policy: differs from PyTorch's CPU lists (GELU in the lower-precision
# dtype, the GEMMs of linear layers in float32; matmul, so q @ k, stays lower as PyTorch's lists say).
ISSUE_POLICY = """\
autocast: {device: cpu, lower_precision: [bfloat16, float16]}
lists:
  lower_precision_fp: [gelu]
  fp32: [linear, addmm, mm]
"""

class Seq2Seq(torch.nn.Module):
    """An encoder-decoder transformers model on (input ids, decoder input ids), returning its logits."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=x, decoder_input_ids=y, use_cache=False).logits


def small_t5(transformers: Any) -> Seq2Seq:
    """A small T5ForConditionalGeneration from a config (test_export_models, test_deploy_models): its
    self-attention's sdpa mask is the relative position bias, made from a parameter."""
    config = transformers.T5Config(vocab_size=128, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2,
                                   num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=16,
                                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, use_cache=False)
    return Seq2Seq(transformers.T5ForConditionalGeneration(config))


CHILD = CHILD_IMPORT + r"""
import json, sys
try:
    import autocastgen  # noqa: F401
except ModuleNotFoundError:
    pass
else:
    raise SystemExit("autocastgen is importable in the child")
import importlib
import torch
folder = sys.argv[1]
# The libraries of the programs' custom ops, as the loading process of a deployment imports them.
child = json.load(open(f"{folder}/child.json"))
sys.path[:0] = child["path"]
for library in child["imports"]:
    importlib.import_module(library)
assert "autocastgen" not in sys.modules, "a custom-op library imported autocastgen"
results = {}
for name in json.load(open(f"{folder}/cases.json")):
    program = torch.export.load(f"{folder}/{name}.pt2")
    case = torch.load(f"{folder}/{name}.case.pt")
    module = program.module()
    out = module(*case["args"], **case["kwargs"])
    inside = {}
    for dtype in (torch.float16, torch.bfloat16):
        with torch.autocast(case["device"], dtype=dtype):
            inside[str(dtype)] = exact(module(*case["args"], **case["kwargs"]), case["expected"])
    custom = program.graph_module.meta.get("custom") or {}
    results[name] = {"equal": exact(out, case["expected"]), "dtype": str(out.dtype),
                     "inside_autocast": inside, "record": custom.get("autocastgen")}
# A library of autocastgen's (libautocastgen_*.so, the package's _C): by the file's name and folder,
# since the models venv itself lies under ~/.cache/autocastgen/ (transformers' own .so files).
mapped = {line.split()[-1] for line in open("/proc/self/maps") if "/" in line}
results["_autocastgen_mapped"] = sorted(path for path in mapped if path.rsplit("/", 1)[-1].startswith("libautocastgen")
                                        or path.rsplit("/", 2)[-2:-1] == ["autocastgen"])
print(json.dumps(results))
"""


class SavedCases:
    """Programs saved into one folder, checked by one child process. ``imports``: the modules that
    register the programs' custom ops (``transformers.integrations.moe``), imported by the child
    before it loads them, found on ``path`` (folders put first on its sys.path) or its own."""

    def __init__(self, folder: Path, imports: tuple[str, ...] = (), path: tuple[str | Path, ...] = ()) -> None:
        self.folder = folder
        self.names: list[str] = []
        self.imports, self.path = tuple(imports), [str(p) for p in path]
        folder.mkdir(parents=True, exist_ok=True)

    def add(self, name: str, program: torch.export.ExportedProgram, args: tuple, kwargs: dict,
            expected: torch.Tensor, device: str = "cpu") -> None:
        torch.export.save(program, self.folder / f"{name}.pt2")
        torch.save({"args": args, "kwargs": kwargs, "expected": expected, "device": device},
                   self.folder / f"{name}.case.pt")
        self.names.append(name)

    def check(self) -> dict[str, Any]:
        (self.folder / "cases.json").write_text(json.dumps(self.names))
        (self.folder / "child.json").write_text(json.dumps({"imports": self.imports, "path": self.path}))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOCASTGEN_", "PYTHON", "LD_PRELOAD"))}
        result = subprocess.run([sys.executable, "-I", "-c", CHILD, str(self.folder)], env=env,
                                capture_output=True, text=True, timeout=600, check=False)
        assert result.returncode == 0, result.stderr[-4000:]
        results = json.loads(result.stdout.strip().splitlines()[-1])
        mapped = results.pop("_autocastgen_mapped")
        assert mapped == [], mapped
        return results
