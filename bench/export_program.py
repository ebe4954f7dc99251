#!/usr/bin/env python3
"""A program autocastgen.export made against eager autocast on the CPU (docs/export.md): the file's
size (the float32 program's, the baked one's) and the time of one inference step, in one process,
in alternating turns: eager (the model under torch.autocast with the policy loaded and the model
attached) and the loaded program (torch.export.load, then .module()), in bfloat16 and float16.

Models: an MLP (Linear-GELU-LayerNorm-Linear, WIDTH wide) and a transformers Llama built from a
config (no download). Policy: the shipped CPU policy as runtime policies. Before timing, the
program's output must equal eager's with torch.equal, or the script exits 1.

Usage: AUTOCASTGEN_RUNTIME_TORCH_LIB=build/lib/libautocastgen_runtime_torch.so PYTHONPATH=build/python \\
       python3 bench/export_program.py [--rounds 21] [--steps 20] [--threads 1] [--width 1024]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch


class MLP(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1, self.ln, self.fc2 = torch.nn.Linear(width, 4 * width), torch.nn.LayerNorm(4 * width), \
            torch.nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.ln(torch.nn.functional.gelu(self.fc1(x))))


class Logits(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(ids, use_cache=False).logits


def models(width: int) -> dict[str, tuple[torch.nn.Module, torch.Tensor]]:
    torch.manual_seed(0)
    out = {"mlp": (MLP(width).eval(), torch.randn(64, width))}
    try:
        import transformers
    except ImportError:
        print("transformers is not installed: the Llama row is left out", file=sys.stderr)
        return out
    config = transformers.LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=256)
    out["llama"] = (Logits(transformers.LlamaForCausalLM(config)).eval(), torch.randint(0, 1024, (2, 128)))
    return out


def step_time(fn, x: torch.Tensor, steps: int) -> float:
    """Seconds per call of `steps` back-to-back calls."""
    start = time.perf_counter()
    for _ in range(steps):
        fn(x)
    return (time.perf_counter() - start) / steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--width", type=int, default=1024)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    import autocastgen

    autocastgen.load_policy(autocastgen.shipped_policy("cpu"))
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.rounds} rounds x {args.steps} steps, "
          "medians; ratio = program / eager (below 1: the program is faster)")
    print(f"{'model':6} {'dtype':9} {'f32 file':>10} {'baked file':>11} {'size':>6} {'eager ms':>9} "
          f"{'program ms':>11} {'ratio':>6}")
    folder = Path(tempfile.mkdtemp(prefix="export-bench-"))
    for name, (model, x) in models(args.width).items():
        torch.export.save(torch.export.export(model, (x,)), folder / f"{name}-f32.pt2")
        f32_size = (folder / f"{name}-f32.pt2").stat().st_size
        for dtype in (torch.bfloat16, torch.float16):
            path = folder / f"{name}-{dtype}.pt2"
            torch.export.save(autocastgen.export(model, (x,), device="cpu", dtype=dtype), path)
            program = torch.export.load(path).module()
            attachment = autocastgen.attach(model)

            def eager(inputs: torch.Tensor) -> torch.Tensor:
                with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
                    return model(inputs)

            def baked(inputs: torch.Tensor) -> torch.Tensor:
                with torch.no_grad():
                    return program(inputs)

            if not torch.equal(baked(x), eager(x)):
                print(f"{name} {dtype}: the program's output differs from eager's", file=sys.stderr)
                return 1
            times: dict[str, list[float]] = {"eager": [], "program": []}
            ratios = []
            for round_index in range(args.rounds):
                order = ("eager", "program") if round_index % 2 == 0 else ("program", "eager")
                now = {}
                for side in order:
                    now[side] = step_time(eager if side == "eager" else baked, x, args.steps)
                    times[side].append(now[side])
                ratios.append(now["program"] / now["eager"])
            attachment.remove()
            baked_size = path.stat().st_size
            print(f"{name:6} {str(dtype)[6:]:9} {f32_size / 1e6:9.2f}M {baked_size / 1e6:10.2f}M "
                  f"{baked_size / f32_size:6.2f} {statistics.median(times['eager']) * 1e3:9.3f} "
                  f"{statistics.median(times['program']) * 1e3:11.3f} {statistics.median(ratios):6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
