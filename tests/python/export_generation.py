"""Greedy decoding with a KV cache, eager or with exported programs, and the check of docs/export.md's
"Dynamic shapes and generation" after save and load in a process without autocastgen
(test_export_generation.py).

The loops take callables, so the same code decodes with eager modules (under the policy) and with
the programs' modules: with transformers' DynamicCache, a prefill program (token ids -> logits and
the cache) and a decode-step program (one token and the cache -> logits and the grown cache); with
a static cache held as the program's buffers, one program fed a token and its position at a time
(the prompt too, as transformers' TorchExportableModuleWithStaticCache.generate feeds it).

Run as a script (`python -I export_generation.py FOLDER`), it is the process that checks saved
programs: cases.json lists the cases, each `NAME.case.pt` their prompts and eager's tokens and
logits, `NAME.{prefill,decode,step}.pt2` the programs. Like export_checks.SavedCases' child it
asserts that `import autocastgen` fails and reports the libraries of autocastgen mapped (none). A
program with a DynamicCache in its signature loads only where that type is registered as a pytree
under the name the program was saved with: the child shows that torch.export.load fails before
transformers' register_dynamic_cache_export_support() runs, and loads after it. Each case decodes
plain and inside torch.autocast (float16 and bfloat16), each compared with eager's tokens and logits
bit for bit, or the error it raised: the DynamicCache is rebuilt from the program's outputs by its
pytree unflatten, in Python outside the program, and its torch.cat of a bfloat16 (float16) tensor
fails inside torch.autocast(float16 (bfloat16)) on the CPU (PyTorch's at::autocast::prioritize,
pytorch/pytorch#100932).
This module imports neither autocastgen nor, until a case needs it, transformers.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

# exact.py lies beside this file; the checking process runs the file with -I, so without it on sys.path.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.append(str(Path(__file__).resolve().parent))
from exact import exact  # noqa: E402

Tensors = tuple[torch.Tensor, list[torch.Tensor]]


def greedy_with_cache(prefill: Callable, decode: Callable, prompt: torch.Tensor, new_tokens: int) -> Tensors:
    """`new_tokens` tokens by greedy decoding: the prefill on the prompt gives the first, then a
    decode step per token on the cache the step before returned. The tokens (batch, new_tokens)
    and every call's logits (the prefill's, then each step's)."""
    logits, cache = prefill(prompt)
    tokens, all_logits = [], [logits]
    while True:
        token = logits[:, -1:].argmax(-1)
        tokens.append(token)
        if len(tokens) == new_tokens:
            return torch.cat(tokens, dim=1), all_logits
        logits, cache = decode(token, cache)
        all_logits.append(logits)


def greedy_static(step: Callable, prompt: torch.Tensor, new_tokens: int) -> Tensors:
    """The same with one call per position, the prompt's included (a static cache of batch 1)."""
    for position in range(prompt.shape[1]):
        logits = step(input_ids=prompt[:, position:position + 1], cache_position=torch.tensor([position]))
    tokens, all_logits, position = [], [logits], prompt.shape[1]
    while True:
        token = logits[:, -1:].argmax(-1)
        tokens.append(token)
        if len(tokens) == new_tokens:
            return torch.cat(tokens, dim=1), all_logits
        logits = step(input_ids=token, cache_position=torch.tensor([position]))
        all_logits.append(logits)
        position += 1


def same(got: Tensors, expected: Tensors) -> dict[str, bool]:
    """Whether the tokens, and every call's logits, are exact (dtype, shape and bits: exact.py)."""
    return {"tokens": exact(got[0], expected[0]), "logits": exact(got[1], expected[1])}


class SavedGenerations:
    """Programs and eager's decodings saved into one folder, checked by one child process."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.cases: dict[str, str] = {}
        folder.mkdir(parents=True, exist_ok=True)

    def add(self, name: str, kind: str, programs: dict[str, torch.export.ExportedProgram],
            runs: list[tuple[torch.Tensor, Tensors]], new_tokens: int) -> None:
        """`kind` "dynamic" (programs prefill and decode) or "static" (program step); `runs` the
        prompts and eager's (tokens, logits) for each."""
        for role, program in programs.items():
            torch.export.save(program, self.folder / f"{name}.{role}.pt2")
        torch.save({"runs": runs, "new_tokens": new_tokens}, self.folder / f"{name}.case.pt")
        self.cases[name] = kind

    def check(self) -> dict[str, Any]:
        (self.folder / "cases.json").write_text(json.dumps(self.cases))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOCASTGEN_", "PYTHON", "LD_PRELOAD"))}
        result = subprocess.run([sys.executable, "-I", __file__, str(self.folder)], env=env,
                                capture_output=True, text=True, timeout=600, check=False)
        assert result.returncode == 0, result.stderr[-4000:]
        results = json.loads(result.stdout.strip().splitlines()[-1])
        assert results.pop("_autocastgen_mapped") == []
        return results


def _child(folder: str) -> None:
    try:
        import autocastgen  # noqa: F401
    except ModuleNotFoundError:
        pass
    else:
        raise SystemExit("autocastgen is importable in the child")
    cases = json.loads(Path(folder, "cases.json").read_text())
    results: dict[str, Any] = {}
    registered = False
    for name, kind in cases.items():
        case = torch.load(f"{folder}/{name}.case.pt")
        if kind == "dynamic":
            if not registered:
                try:
                    torch.export.load(f"{folder}/{name}.decode.pt2")
                    results["_loads_unregistered"] = True
                except RuntimeError:
                    results["_loads_unregistered"] = False
                from transformers.integrations.executorch import register_dynamic_cache_export_support

                register_dynamic_cache_export_support()
                registered = True
            prefill = torch.export.load(f"{folder}/{name}.prefill.pt2").module()
            decode = torch.export.load(f"{folder}/{name}.decode.pt2").module()

            def run(prompt: torch.Tensor, prefill: Any = prefill, decode: Any = decode,
                    new_tokens: int = case["new_tokens"]) -> Tensors:
                return greedy_with_cache(prefill, decode, prompt, new_tokens)
        else:
            program = torch.export.load(f"{folder}/{name}.step.pt2")

            def run(prompt: torch.Tensor, program: Any = program, new_tokens: int = case["new_tokens"]) -> Tensors:
                # A fresh module per decoding: its buffers (the cache) start as saved.
                return greedy_static(program.module(), prompt, new_tokens)
        runs = []
        for prompt, expected in case["runs"]:
            with torch.no_grad():
                plain = same(run(prompt), expected)
                inside = {}
                for dtype in (torch.float16, torch.bfloat16):
                    try:
                        with torch.autocast("cpu", dtype=dtype):
                            inside[str(dtype)] = same(run(prompt), expected)
                    except RuntimeError as error:
                        inside[str(dtype)] = {"error": str(error).splitlines()[0]}
            runs.append({"prompt": list(prompt.shape), **plain, "inside_autocast": inside})
        results[name] = runs
    # autocastgen's libraries and its package's extension (not any path through a folder of that
    # name: the models venv lives in ~/.cache/autocastgen/, and transformers maps safetensors' from it).
    mapped = {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines() if "/" in line}
    results["_autocastgen_mapped"] = sorted(path for path in mapped if Path(path).name.startswith("libautocastgen")
                                            or Path(path).parent.name == "autocastgen")
    print(json.dumps(results))


if __name__ == "__main__":
    _child(sys.argv[1])
