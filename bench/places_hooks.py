#!/usr/bin/env python3
"""Where a module call's time goes once autocastgen.attach(model) hooks it (issue 29): the call
without hooks, with two empty hooks of attach's kinds, attached, and the pieces of attach's hook
bodies, each the best of 5 repetitions of --calls calls (CPU time per call, one process, under
torch.autocast("cpu", bfloat16) with the generated CPU library loaded). Then the same in place:
the forward (with autograd, no backward) of places_step.py's MLP with no hooks, with two empty
hooks per module, with hooks that only call the two ops (.default, looked up once) and attached,
interleaved over --rounds rounds, as medians of the per-round differences to no hooks.

Usage: AUTOCASTGEN_RUNTIME_TORCH_LIB=build/lib/libautocastgen_runtime_torch.so PYTHONPATH=build/python \\
       python3 bench/places_hooks.py [--calls 100000]
The numbers and what they mean: bench/README.md ("Precision by place").
"""
import argparse
import os
import statistics
import time

import torch
from places_step import make_model

import autocastgen
from autocastgen import places

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def best(fn, calls):
    times = []
    for _ in range(5):
        start = time.process_time()
        for _ in range(calls):
            fn()
        times.append((time.process_time() - start) / calls * 1e6)
    return min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--library", default=os.path.join(REPO, "build", "lib", "libautocastgen_torch_cpu.so"))
    ap.add_argument("--calls", type=int, default=100000)
    ap.add_argument("--rounds", type=int, default=100)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.ops.load_library(args.library)
    ops = places._ops()
    x, m = torch.ones(4), torch.nn.Identity()
    enter, leave = ops.module_enter_section.default, ops.module_leave.default
    pre = places.Attachment._pre_hook("4")
    rows = []

    def row(label, fn):
        rows.append((label, best(fn, args.calls)))

    with torch.autocast("cpu", dtype=torch.bfloat16):
        row("nn.Identity() call, no hooks", lambda: m(x))
        h1 = m.register_forward_pre_hook(lambda mod, a, k: None, with_kwargs=True)
        h2 = m.register_forward_hook(lambda mod, a, o: None, always_call=True)
        row("the same call, two empty hooks of attach's kinds", lambda: m(x))
        h1.remove()
        h2.remove()
        with autocastgen.attach(m):
            row("the same call, attached", lambda: m(x))
        row("attach's pre-hook and post-hook bodies, called directly", lambda: (pre(m, (x,), {}), places._post_hook(m, (x,), x)))
        row("  torch.ops.autocastgen.module_enter_section + module_leave (as the hooks call them)",
            lambda: (places._ops().module_enter_section("4", "cpu"), places._ops().module_leave()))
        row("  the same two ops through their .default overloads, looked up once", lambda: (enter("4", "cpu"), leave()))
        row("  places._ops() (load_runtime: a lock, a global), once", places._ops)
        row("  places._device_type((x,), {}), once", lambda: places._device_type((x,), {}))
        row("  torch.compiler.is_compiling(), once", torch.compiler.is_compiling)
        row("  an empty lambda (the loop's own cost, in every row)", lambda: None)
    print(f"torch {torch.__version__}, load average {os.getloadavg()[0]:.2f}; best of 5 x {args.calls} calls, CPU time")
    print()
    print("| what | us per call |\n|---|---:|")
    for label, us in rows:
        print(f"| {label} | {us:.2f} |")
    in_place(args.rounds, enter, leave)
    return 0


def in_place(rounds, enter, leave):
    """The MLP's forward under each kind of hook; medians of the per-round differences to none."""
    model = make_model(512, 4)
    x, target = torch.randn(64, 512), torch.randn(64, 512)

    def forward():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return torch.nn.functional.mse_loss(model(x), target)

    def hook(kind):
        handles = []
        for path, module in model.named_modules():
            if kind == "empty":
                handles.append(module.register_forward_pre_hook(lambda m, a, k: None, with_kwargs=True))
                handles.append(module.register_forward_hook(lambda m, a, o: None, always_call=True))
            elif kind == "ops":
                handles.append(module.register_forward_pre_hook(
                    lambda m, a, k, path=path: enter(path, "cpu") and None, with_kwargs=True))
                handles.append(module.register_forward_hook(lambda m, a, o: leave(), always_call=True))
            elif kind == "attach":
                return [autocastgen.attach(model)]
        return handles

    kinds = {"none": "no hooks", "empty": "two empty hooks per module (attach's kinds)",
             "ops": "hooks calling module_enter_section / module_leave (.default, bound once) only",
             "attach": "autocastgen.attach(model)"}
    names = list(kinds)
    times = {kind: [] for kind in names}
    for r in range(rounds):
        for kind in names[r % len(names):] + names[:r % len(names)]:
            handles = hook(kind)
            for _ in range(3):
                forward()
            start = time.process_time()
            for _ in range(20):
                forward()
            times[kind].append((time.process_time() - start) / 20 * 1e6)
            for handle in handles:
                handle.remove()
    calls = len(list(model.modules()))
    print()
    print(f"In place: the forward of an MLP of 4 Linear(512, 512) + ReLU, batch 64, bf16 autocast, {calls} module "
          f"calls; {rounds} rounds x 20 forwards, load average {os.getloadavg()[0]:.2f}")
    print()
    print("| hooks | forward us (median) | added us per forward (median of the rounds' differences) | per module call |")
    print("|---|---:|---:|---:|")
    for kind in names:
        added = statistics.median(b - a for a, b in zip(times["none"], times[kind]))
        print(f"| {kinds[kind]} | {statistics.median(times[kind]):.0f} | {added:.0f} | {added / calls:.1f} |")


if __name__ == "__main__":
    raise SystemExit(main())
