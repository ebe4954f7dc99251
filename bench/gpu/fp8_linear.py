#!/usr/bin/env python3
"""fp8 as a policy on a GPU, timed against bfloat16 autocast and torchao's Float8Linear.

Rows (each a median of CUDA-event times; ratios are against bfloat16 autocast in the same run,
same mode):
- a linear layer's forward + backward at M = N = K = 4096 and 8192 (float32 parameters, input and
  output under torch.autocast(DEVICE, dtype=torch.bfloat16));
- a 4-layer MLP training step (Linear 4096 -> 4096 + ReLU, 8192 tokens, SGD).
Variants: bf16 (plain autocast), fp8-current and fp8-delayed (an fp8 runtime policy,
tests/fp8/data/fp8_cuda*.yaml; compiled, fp8-current-opaque too: AUTOCASTGEN_FP8_TRACE=opaque), torchao (torchao.float8.convert_to_float8_training, tensorwise),
each eager and compiled (torch.compile(fullgraph=True), Inductor). A variant that fails records
its error instead of a time. The fp8 weight copies are dropped after every step
(fp8_clear_weight_cache), as a training loop under torch.autocast does.

Goals (issue 28): fp8 compiled >= 1.3x bf16 compiled at 8192 and not slower than torchao
compiled; fp8 eager >= 1.1x bf16 eager at 8192.

Usage: bench/gpu/fp8_linear.py [--json FILE] [--small] [--no-compile] [--device cuda|cpu]
(--small --device cpu: a quick try of the script without a GPU)
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import traceback

import torch
from timing import add_device_argument, device_ms, device_name

REPO = pathlib.Path(__file__).resolve().parents[2]
DATA = REPO / "tests/fp8/data"
POLICIES = {"fp8-current": "fp8_{device}.yaml", "fp8-delayed": "fp8_{device}_delayed.yaml",
            "fp8-current-opaque": "fp8_{device}.yaml"}
# Compiled only: the current-scaling policy traced with our fused quantiser as one op instead of
# PyTorch ops Inductor fuses (AUTOCASTGEN_FP8_TRACE, Note [fp8 traced route] in runtime/torch/fp8/operand.cpp).
OPAQUE = "fp8-current-opaque"
DEVICE = "cuda"  # --device
VARIANTS = ["bf16", "fp8-current", "fp8-delayed", "torchao"]


def make_model(kind, size, seed=0):
    torch.manual_seed(seed)
    if kind == "linear":
        return torch.nn.Linear(size, size, bias=False, device=DEVICE)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(size, size, device=DEVICE), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def prepare(variant, model):
    """Sets the process up for a variant; returns the model to run."""
    import autocastgen

    autocastgen.clear_runtime_policies()
    if variant in POLICIES:
        autocastgen.load_policy(str(DATA / POLICIES[variant].format(device=DEVICE)))
    if variant == "torchao":
        from torchao.float8 import convert_to_float8_training

        # Swaps the Linear modules inside; a bare Linear comes back swapped itself.
        model = convert_to_float8_training(model)
        assert any(type(m).__name__ == "Float8Linear" for m in model.modules()), "torchao converted no Linear"
    return model


def forward_loss(model, x):
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        return model(x).float().square().mean()


def make_step(variant, kind, size, tokens, compiled):
    model = prepare(variant, make_model(kind, size))
    x = torch.randn(tokens, size, device=DEVICE)
    loss_fn = torch.compile(forward_loss, fullgraph=True) if compiled else forward_loss
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4) if kind == "mlp" else None
    clear = variant in POLICIES

    def step():
        model.zero_grad(set_to_none=True)
        loss = loss_fn(model, x)
        loss.backward()
        if optimizer is not None:
            optimizer.step()
        if clear:
            torch.ops.autocastgen.fp8_clear_weight_cache(DEVICE)
        return loss

    return step


def first_output(variant, kind, size, tokens):
    """The forward output of a fresh model (for the error against bfloat16)."""
    model = prepare(variant, make_model(kind, size))
    x = torch.randn(tokens, size, device=DEVICE, generator=torch.Generator(DEVICE).manual_seed(1))
    with torch.no_grad(), torch.autocast(DEVICE, dtype=torch.bfloat16):
        y = model(x).float()
    torch.ops.autocastgen.fp8_clear_weight_cache(DEVICE)
    return y


def run_row(kind, size, tokens, modes, iters):
    rows = []
    reference = first_output("bf16", kind, size, tokens)
    for compiled in modes:
        times = {}
        for variant in VARIANTS + ([OPAQUE] if compiled else []):
            torch._dynamo.reset()
            os.environ.pop("AUTOCASTGEN_FP8_TRACE", None)
            if variant == OPAQUE:
                os.environ["AUTOCASTGEN_FP8_TRACE"] = "opaque"
            entry = {"row": f"{kind} {tokens}x{size}x{size}", "variant": variant,
                     "mode": "compiled" if compiled else "eager"}
            try:
                step = make_step(variant, kind, size, tokens, compiled)
                # The first step's loss: a compiled fp8 step must give eager fp8's, not bf16's.
                entry["first_loss"] = float(step())
                entry["ms"] = device_ms(step, DEVICE, warmup=2, iters=iters)
                times[variant] = entry["ms"]
                if not compiled and variant != "bf16":
                    y = first_output(variant, kind, size, tokens)
                    entry["rel_error_vs_bf16"] = float((y - reference).norm() / reference.norm())
            except Exception as error:  # noqa: BLE001 -- recorded, the other rows go on
                entry["error"] = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:400]}"
                entry["traceback_tail"] = traceback.format_exc().splitlines()[-6:]
            rows.append(entry)
            print(json.dumps(entry), flush=True)
        os.environ.pop("AUTOCASTGEN_FP8_TRACE", None)
        for entry in rows[-(len(VARIANTS) + (1 if compiled else 0)):]:
            if "ms" in entry and "bf16" in times:
                entry["speedup_vs_bf16"] = times["bf16"] / entry["ms"]
            if "ms" in entry and "torchao" in times and entry["variant"].startswith("fp8"):
                entry["speedup_vs_torchao"] = times["torchao"] / entry["ms"]
    return rows


def profile(variant, kind, size, tokens):
    """Prints the kernels of three eager steps by their GPU (or CPU) time."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    step = make_step(variant, kind, size, tokens, compiled=False)
    for _ in range(3):
        step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEVICE == "cuda" else [])
    with torch_profile(activities=activities) as prof:
        for _ in range(3):
            step()
        if DEVICE == "cuda":
            torch.cuda.synchronize()
    print(f"== profile: {variant} eager, {kind} {tokens}x{size}x{size}, 3 steps")
    for sort in (("self_device_time_total", "self_cuda_time_total") if DEVICE == "cuda" else ("self_cpu_time_total",)):
        try:
            print(prof.key_averages().table(sort_by=sort, row_limit=14, max_name_column_width=70))
            break
        except (AttributeError, KeyError):
            continue


def goals(rows, size):
    def find(kind, variant, mode):
        for r in rows:
            if r["row"] == f"{kind} {size}x{size}x{size}" and r["variant"] == variant and r["mode"] == mode:
                return r
        return {}

    out = []
    for variant in ("fp8-current", "fp8-delayed", OPAQUE):
        c, e = find("linear", variant, "compiled"), find("linear", variant if variant != OPAQUE else "fp8-current", "eager")
        out.append({"goal": f"{variant} compiled >= 1.3x bf16 compiled at {size}",
                    "value": c.get("speedup_vs_bf16"), "met": c.get("speedup_vs_bf16", 0) >= 1.3})
        out.append({"goal": f"{variant} compiled >= torchao compiled at {size}",
                    "value": c.get("speedup_vs_torchao"), "met": c.get("speedup_vs_torchao", 0) >= 1.0})
        out.append({"goal": f"{variant} eager >= 1.1x bf16 eager at {size}",
                    "value": e.get("speedup_vs_bf16"), "met": e.get("speedup_vs_bf16", 0) >= 1.1})
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--small", action="store_true", help="tiny sizes (a quick try of the script)")
    parser.add_argument("--no-compile", action="store_true", help="eager rows only")
    parser.add_argument("--profile", action="store_true",
                        help="also print where the GPU time of an eager bf16 and fp8 step goes (torch.profiler)")
    add_device_argument(parser)
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    if not torch.cuda.is_available() and DEVICE == "cuda":  # torch.cuda first: a --device cpu try reaches it too
        print("bench/gpu/fp8_linear.py: no CUDA device", file=sys.stderr)
        return 2
    from torch._inductor import config as inductor_config

    import autocastgen  # noqa: F401  -- loads the runtime library (the fp8 ops, runtime policies)

    # PyTorch's compile caches key on the traced Dynamo graph, not on the policy loaded: the fp8
    # variants trace the same Dynamo graph as bf16 and would be served bf16's compiled code
    # (docs/fp8.md, "torch.compile"). Every variant compiles from scratch.
    inductor_config.force_disable_caches = True

    eager_only = [False]
    both = [False] if args.no_compile else [False, True]
    big = 256 if args.small else 8192
    plan = [("linear", 128 if args.small else 4096, eager_only), ("linear", big, both),
            ("mlp", 256 if args.small else 4096, both)]
    rows = []
    result = {"device": device_name(DEVICE), "torch": torch.__version__, "rows": rows}
    for kind, size, modes in plan:
        tokens = big if kind == "mlp" else size
        rows += run_row(kind, size, tokens, modes, iters=5 if args.small else 10)
        if args.json:  # after every row: a run cut off by its time limit keeps what it measured
            with open(args.json, "w") as fh:
                json.dump(result, fh, indent=1)
    result["goals"] = goals(rows, big)
    try:
        import torchao

        result["torchao"] = torchao.__version__
    except ImportError as error:
        result["torchao"] = f"not importable: {error}"
    for g in result["goals"]:
        print(json.dumps(g))
    if args.profile:
        for kind, size in (("linear", big), ("mlp", 256 if args.small else 4096)):
            for variant in ("bf16", "fp8-current"):
                profile(variant, kind, size, big if kind == "mlp" else size)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
