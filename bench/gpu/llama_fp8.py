#!/usr/bin/env python3
"""fp8 on a real model: a transformers LlamaForCausalLM built from a config (no download), trained
for 40 AdamW steps under torch.autocast(DEVICE, bfloat16), bf16 against fp8 policies and torchao.

Sizes (vocab 8192): small = hidden 1024, intermediate 2816, 4 layers, 16 / 4 heads, 8 x 512 tokens
(issue 38's model); large = hidden 4096, intermediate 11008, 2 layers, 32 / 8 heads, 8 x 1024 tokens
(--large-tokens; the runs of 2026-11-27 took 8 x 512). The optimizer is AdamW with fused=True on
CUDA (one kernel for all parameters, what training at scale uses): its time is in every variant's
step and fp8 does not change it, so the rows also give the forward + backward alone (fwd_bwd_ms,
timed to the end of backward).
Variants:
- bf16: PyTorch's kernels;
- fp8-all, fp8-auto, fp8-measured: tests/fp8/data/fp8_DEVICE.yaml with `select: all|auto|measured`;
- fp8-auto-delayed: select auto with delayed scaling (a 16-long amax history: one pass over each
  operand instead of two);
- fp8-rowwise, fp8-rowwise-gw-hp: the same policy with `granularity: rowwise|rowwise_with_gw_hp` (and an
  e4m3 backward), select all;
- torchao: convert_to_float8_training, tensorwise, with torchao's auto filter (its H100 thresholds);
- bf16-again: PyTorch's kernels again, a control (its ratio to bf16 is the measurement's noise).
A variant whose policy this build cannot load records the error. Each variant eager and compiled
(torch.compile(model), Inductor, caches off). Reported: median step ms over steps 6-40, the loss at
step 40 and the mean of the last 10, the ratio to bf16 in the same mode.

Taken in turns (--interleave R, --processes R; paired.py), for ratios near 1 that one row per
variant cannot show (identical kernels spread +-16 % between rows):
- eager: one process holds a model and an optimizer per variant (the same initial weights) and runs
  R rounds (after one to warm up) in which each variant trains --block steps, in an order rotated
  each round (its policy loaded before its block); a round's bf16 block and a variant's block give
  one ratio;
- compiled: R rounds of one process per variant, alternating (rotated), each compiling and
  training --steps steps; Inductor's caches are kept across them (the first round compiles).
Reported per variant: the median of the pairs' ratios, their quartiles and range, and the goal's
verdict (>= 0.98x bf16: met, missed, or within noise).

Usage: bench/gpu/llama_fp8.py [--json FILE] [--sizes small,large] [--variants ...] [--modes eager,compiled]
       [--compiled-variants ...]
       [--steps 40] [--large-tokens 8x1024] [--small] [--device cuda|cpu]
       [--interleave R [--block 10]] [--processes R]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

import torch
from paired import paired_ratios, verdict
from timing import add_device_argument, device_name, synchronize

REPO = pathlib.Path(__file__).resolve().parents[2]
DEVICE = "cuda"
SIZES = {
    "small": dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4, num_attention_heads=16,
                  num_key_value_heads=4),
    "large": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=2, num_attention_heads=32,
                  num_key_value_heads=8),
    "tiny": dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2),  # --small: a try of the script on a CPU
}
POLICY_EDITS = {
    "fp8-all": {},  # select: all is the default (and all a build before issue 38 knows)
    "fp8-auto": {"select": "auto"},
    "fp8-measured": {"select": "measured"},
    "fp8-auto-delayed": {"select": "auto", "scaling": "delayed", "amax_history_len": 16},
    # Every GEMM (select: all): how fast and how accurate rowwise scaling is on its own.
    "fp8-rowwise": {"granularity": "rowwise", "backward": "float8_e4m3fn"},
    "fp8-rowwise-gw-hp": {"granularity": "rowwise_with_gw_hp", "backward": "float8_e4m3fn"},
}
CONTROL = "bf16-again"
VARIANTS = ["bf16", "fp8-all", "fp8-auto", "fp8-measured", "fp8-auto-delayed", "fp8-rowwise", "fp8-rowwise-gw-hp",
            "torchao"]


def policy_file(variant, folder):
    """The shipped fp8 test policy with the variant's recipe keys set (select: all is today's policy)."""
    import yaml

    policy = yaml.safe_load((REPO / f"tests/fp8/data/fp8_{DEVICE}.yaml").read_text())
    policy["autocast"]["fp8"].update(POLICY_EDITS[variant])
    path = pathlib.Path(folder) / f"{variant}.yaml"
    path.write_text(yaml.safe_dump(policy, sort_keys=False))
    return path


def markov_batches(steps, batch, length, generator, vocab=8192, successors=4):
    """A fresh batch per step from one random Markov chain: each token is followed by one of 4
    tokens of its own. The loss starts at ln(8192) = 9.0 and cannot fall below ln(4) = 1.4, so 40
    steps end well above it, where a 2 % difference means something (a fixed batch was learnt to
    5e-5 within 40 steps, a pattern repeated within a sequence to 0.003)."""
    table = torch.randint(0, vocab, (vocab, successors), generator=generator)
    out = []
    for _ in range(steps):
        ids = torch.empty(batch, length, dtype=torch.long)
        ids[:, 0] = torch.randint(0, vocab, (batch,), generator=generator)
        picks = torch.randint(0, successors, (batch, length), generator=generator)
        for t in range(1, length):
            ids[:, t] = table[ids[:, t - 1], picks[:, t]]
        out.append(ids.to(DEVICE))
    return out


def make_model(size, seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=8192, max_position_embeddings=1024, **SIZES[size])
    config._attn_implementation = "sdpa"
    return LlamaForCausalLM(config).to(DEVICE)


def use_policy(variant, folder):
    """The variant's runtime policy in force (none for bf16 and torchao)."""
    import autocastgen

    autocastgen.clear_runtime_policies()
    if variant in POLICY_EDITS:
        autocastgen.load_policy(str(policy_file(variant, folder)))


def variant_model(size, variant):
    model = make_model(size)
    if variant == "torchao":
        from torchao.float8 import convert_to_float8_training
        from torchao.float8.float8_linear_utils import _auto_filter_for_recipe

        model = convert_to_float8_training(model, module_filter_fn=_auto_filter_for_recipe("tensorwise", ["lm_head"]))
    return model


def train_step(model, optimizer, ids):
    """One timed step (ms): forward under autocast, backward, AdamW."""
    synchronize(DEVICE)
    t0 = time.perf_counter()
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    synchronize(DEVICE)
    return (time.perf_counter() - t0) * 1e3


def paired_row(row, bf16_turns, turns):
    if bf16_turns is not None and row["variant"] != "bf16":
        summary = paired_ratios(bf16_turns, turns)
        row.update(speedup_vs_bf16=summary["median"], paired=summary, goal_098=verdict(summary, 0.98, higher_is_better=True))
    return row


def interleaved(size, variants, rounds, block, tokens, folder):
    """Eager, variants in turns in one process (the module docstring)."""
    torch._dynamo.reset()
    models = {}
    for variant in variants:
        model = variant_model(size, variant)
        models[variant] = (model, torch.optim.AdamW(model.parameters(), lr=3e-4, fused=DEVICE == "cuda"))
    batches = markov_batches(block, *tokens, torch.Generator().manual_seed(1))
    turns = {variant: [] for variant in variants}
    for round_index in range(rounds + 1):  # round 0 warms up
        first = round_index % len(variants)
        for variant in variants[first:] + variants[:first]:
            use_policy(variant, folder)
            times = [train_step(*models[variant], ids) for ids in batches]
            if round_index:
                turns[variant].append(statistics.median(times))
    use_policy("bf16", folder)
    return [paired_row({"size": size, "variant": variant, "mode": "eager-interleaved", "rounds": rounds, "block_steps": block,
                        "tokens": tokens[0] * tokens[1], "turn_ms": turns[variant], "step_ms": statistics.median(turns[variant])},
                       turns.get("bf16"), turns[variant])
            for variant in variants]


def alternating_processes(size, variants, rounds, steps, large_tokens, cache_dir):
    """Compiled, one process per variant and round, in turns (the module docstring)."""
    turns, failures = {variant: [] for variant in variants}, {}
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(cache_dir))
    for round_index in range(rounds):
        first = round_index % len(variants)
        for variant in variants[first:] + variants[:first]:
            out = pathlib.Path(cache_dir) / f"{variant}-{round_index}.json"
            command = [sys.executable, __file__, "--json", str(out), "--sizes", size, "--variants", variant, "--modes", "compiled",
                       "--steps", str(steps), "--large-tokens", large_tokens, "--device", DEVICE, "--turn"]
            done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
            rows = json.loads(out.read_text())["rows"] if out.exists() else []
            if done.returncode or not rows or "error" in rows[0]:
                failures[variant] = rows[0].get("error") if rows else done.stderr.strip().splitlines()[-3:]
                continue
            turns[variant].append(rows[0]["step_ms"])
    out = []
    for variant in variants:
        row = {"size": size, "variant": variant, "mode": "compiled-processes", "rounds": rounds, "steps": steps,
               "turn_ms": turns[variant]}
        if variant in failures or len(turns[variant]) != rounds:
            row["error"] = f"{rounds - len(turns[variant])} of {rounds} processes failed: {failures.get(variant)}"
        else:
            row["step_ms"] = statistics.median(turns[variant])
            bf16 = turns.get("bf16")
            paired_row(row, bf16 if bf16 is not None and len(bf16) == rounds else None, turns[variant])
        out.append(row)
    return out


def run(size, variant, compiled, steps, tokens, folder, count=True):
    import autocastgen

    torch._dynamo.reset()
    use_policy(variant, folder)
    model = variant_model(size, variant)
    forward = torch.compile(model) if compiled else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=DEVICE == "cuda")
    generator = torch.Generator().manual_seed(1)
    batch, length = tokens
    batches = markov_batches(steps, batch, length, generator)
    losses, times, fwd_bwd = [], [], []
    counted = None
    for step in range(steps):
        # The last step counts (not timed): which linears ran in fp8 and why the others did not.
        last = count and step == steps - 1 and variant in POLICY_EDITS
        block = autocastgen.stats() if last else contextlib.nullcontext()
        synchronize(DEVICE)
        t0 = time.perf_counter()
        with block as counted_now, torch.autocast(DEVICE, dtype=torch.bfloat16):
            ids = batches[step]
            loss = forward(input_ids=ids, labels=ids).loss
        if last:
            counted = counted_now
        loss.backward()
        synchronize(DEVICE)
        fwd_bwd.append((time.perf_counter() - t0) * 1e3)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize(DEVICE)
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss.item())
    def median(series):
        return statistics.median(series[5:-1] if len(series) > 7 else series)

    entry = {"size": size, "variant": variant, "mode": "compiled" if compiled else "eager",
             "tokens": batch * length, "step_ms": median(times), "fwd_bwd_ms": median(fwd_bwd), "first_step_ms": times[0],
             "loss_last": losses[-1], "loss_mean_last10": statistics.mean(losses[-10:]), "loss_first": losses[0]}
    if counted is not None:
        row = counted.ops.get("aten::linear", {})
        entry["linear_ran_in"] = row.get("ran_in")
        entry["linear_fp8_skipped"] = row.get("fp8_skipped")
    if variant in ("fp8-measured",):
        chosen = autocastgen.fp8_selections()
        entry["measured_classes"] = [f"{c['m']}x{c['k']}x{c['n']}:{'fp8' if c['fp8'] else 'lower'}"
                                     f" ({c['fp8_ms']:.3f}/{c['lower_ms']:.3f} ms)" for c in chosen]
    return entry


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json")
    parser.add_argument("--sizes", default="small,large")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--modes", default="eager,compiled")
    parser.add_argument("--compiled-variants", help="the compiled rows' variants (default: --variants)")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--large-tokens", default="8x1024", help="the large size's batch x sequence length")
    parser.add_argument("--small", action="store_true", help="tiny model, 2 x 128 tokens, 4 steps")
    parser.add_argument("--interleave", type=int, metavar="R", help="eager: R rounds of the variants in turns")
    parser.add_argument("--block", type=int, default=10, help="--interleave: steps per turn")
    parser.add_argument("--processes", type=int, metavar="R", help="compiled: R rounds of one process per variant")
    # A process of --processes: Inductor's caches kept, the last step not counted (statistics on
    # would trace and compile the model once more).
    parser.add_argument("--turn", action="store_true", help=argparse.SUPPRESS)
    add_device_argument(parser)
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("llama_fp8.py: no CUDA device", file=sys.stderr)
        return 2
    from torch._inductor import config as inductor_config

    import autocastgen  # noqa: F401

    inductor_config.force_disable_caches = not args.turn
    for listed in (args.variants, args.compiled_variants or ""):
        unknown = [v for v in listed.split(",") if v and v not in VARIANTS + [CONTROL]]
        if unknown:
            parser.error(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS + [CONTROL])}")
    sizes = ["tiny"] if args.small else args.sizes.split(",")
    steps = 4 if args.small else args.steps
    batch, length = (int(n) for n in args.large_tokens.split("x"))
    tokens = {"tiny": (2, 128), "small": (8, 512), "large": (batch, length)}
    rows = []
    result = {"device": device_name(DEVICE), "torch": torch.__version__, "rows": rows}
    with tempfile.TemporaryDirectory() as folder:
        if args.interleave or args.processes:
            variants = args.variants.split(",")
            for size in sizes:
                taken = []
                if args.interleave:
                    taken += interleaved(size, variants, args.interleave, 2 if args.small else args.block, tokens[size], folder)
                if args.processes:
                    taken += alternating_processes(size, (args.compiled_variants or args.variants).split(","), args.processes,
                                                   steps, args.large_tokens, folder)
                rows += taken
                for row in taken:
                    print(json.dumps(row), flush=True)
                if args.json:
                    pathlib.Path(args.json).write_text(json.dumps(result, indent=1))
            return 0
        for mode in args.modes.split(","):  # every eager row first: a run cut short keeps them
            variants = (args.compiled_variants or args.variants) if mode == "compiled" else args.variants
            for size in sizes:
                bf16 = None
                for variant in variants.split(","):
                    try:
                        entry = run(size, variant, mode == "compiled", steps, tokens[size], folder, count=not args.turn)
                        if variant == "bf16":
                            bf16 = entry
                        elif bf16 is not None:
                            entry["speedup_vs_bf16"] = bf16["step_ms"] / entry["step_ms"]
                            entry["fwd_bwd_speedup_vs_bf16"] = bf16["fwd_bwd_ms"] / entry["fwd_bwd_ms"]
                            entry["loss_vs_bf16"] = entry["loss_mean_last10"] / bf16["loss_mean_last10"] - 1
                    except Exception as error:  # noqa: BLE001 -- recorded, the other rows go on
                        entry = {"size": size, "variant": variant, "mode": mode,
                                 "error": f"{type(error).__name__}: {str(error).strip().splitlines()[0][:300]}",
                                 "traceback_tail": traceback.format_exc().splitlines()[-4:]}
                    rows.append(entry)
                    print(json.dumps(entry), flush=True)
                    if args.json:
                        pathlib.Path(args.json).write_text(json.dumps(result, indent=1))
                    if DEVICE == "cuda":
                        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
