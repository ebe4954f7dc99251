#!/usr/bin/env python3
"""Real models' training step with the generated CUDA library against PyTorch's own AutocastCUDA
kernels, in alternating processes; and a compiled GPT-2 step bit for bit.

Step rows: each model (transformers Llama, GPT-2 and BERT built from configs; timm ResNet-50 and
ViT-S/16 if timm imports; a conv/BatchNorm net; a 2-layer LSTM) trains under
torch.autocast("cuda", bfloat16) with SGD. A child process runs every model, either with PyTorch's
kernels ("pytorch") or after torch.ops.load_library(<build>/lib/libautocastgen_torch_cuda.so)
("generated"); a round is one child of each, pytorch first in even rounds and generated first in
odd ones. Per model: the ratio generated / pytorch of each round's two median step times, and the
median, quartiles and range of those ratios (paired.py), with the goal's verdict (<= 1.02: met,
missed, or within noise); the pooled medians beside them.

Exact rows: a compiled GPT-2 (torch.compile, Inductor) trains 3 steps under deterministic settings
in three processes -- pytorch, pytorch (the control: is PyTorch itself repeatable here?) and
generated -- and the losses and every gradient's bits are compared.

Usage: bench/gpu/models_step.py [--json FILE] [--rounds 2] [--models ...] [--no-exact] [--small --device cpu]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

import torch
from paired import paired_ratios, verdict

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
LIBRARY = BUILD / "lib" / "libautocastgen_torch_cuda.so"
MODELS = ["llama", "gpt2", "bert", "resnet50", "vit", "convbn", "lstm"]


def make(name, device, small):
    """(model, inputs, loss function of the output)."""
    torch.manual_seed(0)
    batch, length = (2, 32) if small else (8, 256)
    ids = torch.randint(0, 8192, (batch, length), device=device)
    if name in ("llama", "gpt2", "bert"):
        import transformers as tf

        width, layers = (64, 2) if small else (768, 4)
        if name == "llama":
            model = tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=8192, hidden_size=width, intermediate_size=width * 8 // 3 // 16 * 16,
                                                       num_hidden_layers=layers, num_attention_heads=4 if small else 12,
                                                       num_key_value_heads=2 if small else 4))
        elif name == "gpt2":
            model = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=8192, n_embd=width, n_layer=layers, n_head=4 if small else 12,
                                                     n_positions=512))
        else:
            model = tf.BertForMaskedLM(tf.BertConfig(vocab_size=8192, hidden_size=width, num_hidden_layers=layers,
                                                     num_attention_heads=4 if small else 12, intermediate_size=width * 4))
        return model.to(device), {"input_ids": ids, "labels": ids}, lambda out: out.loss
    if name in ("resnet50", "vit"):
        import timm

        model = timm.create_model("resnet50" if name == "resnet50" else "vit_small_patch16_224", pretrained=False,
                                  num_classes=100)
        x = torch.randn(2 if small else 32, 3, 224, 224, device=device)
        target = torch.randint(0, 100, (x.shape[0],), device=device)
        return model.to(device), {"x": x}, lambda out: torch.nn.functional.cross_entropy(out, target)
    if name == "convbn":
        layers = []
        for c_in, c_out in ((3, 64), (64, 128), (128, 128), (128, 256)):
            layers += [torch.nn.Conv2d(c_in, c_out, 3, padding=1), torch.nn.BatchNorm2d(c_out), torch.nn.ReLU()]
        model = torch.nn.Sequential(*layers, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(256, 10))
        x = torch.randn(4 if small else 64, 3, 64, 64, device=device)
        target = torch.randint(0, 10, (x.shape[0],), device=device)
        return model.to(device), {"x": x}, lambda out: torch.nn.functional.cross_entropy(out, target)
    if name == "lstm":
        model = torch.nn.LSTM(512, 1024, num_layers=2, batch_first=True)
        x = torch.randn(4 if small else 32, 16 if small else 128, 512, device=device)
        return model.to(device), {"x": x}, lambda out: out[0].float().square().mean()
    raise ValueError(name)


def call(model, inputs):
    return model(inputs["x"]) if "x" in inputs else model(**inputs)


def child_steps(args):
    device = args.device
    if args.child == "generated":
        torch.ops.load_library(str(LIBRARY))
    result = {}
    for name in args.models.split(","):
        try:
            model, inputs, loss_of = make(name, device, args.small)
        except ImportError as error:
            result[name] = {"skipped": f"{type(error).__name__}: {error}"}
            continue
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

        def step():
            with torch.autocast(device, dtype=torch.bfloat16):
                loss = loss_of(call(model, inputs))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        for _ in range(3):
            step()
        times = []
        for _ in range(3 if args.small else 20):
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()
            if device == "cuda":
                torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        result[name] = {"ms": times}
    print("RESULT " + json.dumps(result), flush=True)


def child_exact(args):
    """Three compiled GPT-2 steps, deterministic; prints a digest of the losses and gradients."""
    device = args.device
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    if args.child == "generated":
        torch.ops.load_library(str(LIBRARY))
    model, inputs, loss_of = make("gpt2", device, args.small)
    forward = torch.compile(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    digest, losses = hashlib.sha256(), []
    for _ in range(3):
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = forward(**inputs).loss
        loss.backward()
        for _, p in sorted(model.named_parameters()):
            if p.grad is not None:
                digest.update(p.grad.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    print("RESULT " + json.dumps({"losses": losses, "digest": digest.hexdigest()}), flush=True)


def spawn(args, kind, exact=False):
    command = [sys.executable, __file__, "--child", kind, "--device", args.device, "--models", args.models]
    command += ["--small"] if args.small else []
    command += ["--exact-child"] if exact else []
    env = dict(os.environ, CUBLAS_WORKSPACE_CONFIG=":4096:8", TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=args.child_timeout)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"child {kind} failed (rc {done.returncode}): {done.stderr.strip().splitlines()[-3:]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json")
    parser.add_argument("--rounds", type=int, default=4, help="pairs of processes, pytorch and generated")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--no-exact", action="store_true")
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--child", choices=["pytorch", "generated"], help=argparse.SUPPRESS)
    parser.add_argument("--exact-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-timeout", type=int, default=300)
    args = parser.parse_args()
    if args.child:
        return child_exact(args) if args.exact_child else child_steps(args)
    if args.device == "cuda" and not LIBRARY.exists():
        print(f"models_step.py: {LIBRARY} is missing (build autocastgen_torch_cuda)", file=sys.stderr)
        return 2
    # samples[kind][model]: one list of step times per round
    samples = {kind: {} for kind in ("pytorch", "generated")}
    result = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "torch": torch.__version__,
              "rows": [], "exact": None, "rounds_done": 0}

    def summarise():
        """The rows from the rounds so far, written out (a phase cut by its time limit keeps them)."""
        result["rows"] = []
        for name in args.models.split(","):
            theirs, ours = samples["pytorch"].get(name, []), samples["generated"].get(name, [])
            if theirs and len(ours) == len(theirs):
                row = {"model": name, "pytorch_ms": statistics.median(sum(theirs, [])),
                       "generated_ms": statistics.median(sum(ours, []))}
                row["pooled_ratio"] = row["generated_ms"] / row["pytorch_ms"]
                paired = paired_ratios([statistics.median(t) for t in ours], [statistics.median(t) for t in theirs])
                row.update(ratio=paired["median"], paired=paired, goal_102=verdict(paired, 1.02, higher_is_better=False))
                result["rows"].append(row)
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps(result, indent=1))

    for round_index in range(args.rounds):
        for kind in ("pytorch", "generated") if round_index % 2 == 0 else ("generated", "pytorch"):
            for name, entry in spawn(args, kind).items():
                if "ms" in entry:
                    samples[kind].setdefault(name, []).append(entry["ms"])
                if "skipped" in entry:
                    result.setdefault("skipped", {})[name] = entry["skipped"]
        result["rounds_done"] += 1
        summarise()
    for row in result["rows"]:
        print(json.dumps(row), flush=True)
    if not args.no_exact:
        runs = [spawn(args, kind, exact=True) for kind in ("pytorch", "pytorch", "generated")]
        result["exact"] = {"control_equal": runs[0] == runs[1], "generated_equal": runs[0] == runs[2],
                           "runs": runs}
        print(json.dumps(result["exact"]), flush=True)
        summarise()
    return 0


if __name__ == "__main__":
    sys.exit(main())
