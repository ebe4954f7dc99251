#!/usr/bin/env python3
"""Precision by place (issue 29): what autocastgen.attach(model) and module rules cost a small MLP's
CPU training step under torch.autocast("cpu", bfloat16), all variants interleaved in one process.

Usage: AUTOCASTGEN_RUNTIME_TORCH_LIB=build/lib/libautocastgen_runtime_torch.so PYTHONPATH=build/python \\
       python3 bench/places_step.py [--rounds 15] [--steps 20] [--width 512] [--batch 64] [--threads 1]
Method, variants and the last measured numbers: bench/README.md ("Precision by place").
"""
import argparse
import os
import statistics
import time
import warnings

import torch

import autocastgen

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPU_POLICY = os.path.join(REPO, "schemas", "policies", "cpu.yaml")

# The shipped CPU policy with module rules: layer "2" (the second Linear) runs linear in float32
# through a scoped entry, layer "4" (the third Linear) is an fp32 section. Paths are Sequential's.
RULES = f"""
extends: {CPU_POLICY}
lists:
  fp32:
    - {{op: linear, modules: ["2"]}}
modules:
  "4": fp32
"""
# The same shapes of rules deciding what the lists decide anyway (bfloat16 everywhere): the cost of
# the machinery alone, the compute being the plain step's.
NOOP_RULES = f"""
extends: {CPU_POLICY}
lists:
  lower_precision_fp:
    - {{op: linear, modules: ["2"]}}
modules:
  "4": bfloat16
"""

# name -> (runtime policy text or None, attach?, what it is)
VARIANTS = {
    "by hand": (CPU_POLICY, False, "runtime policy cpu.yaml, layers 2 and 4 in float32 by hand (autocast disabled around them)"),
    "plain": (None, False, "generated CPU library, no runtime policy, not attached"),
    "policy": (CPU_POLICY, False, "runtime policy cpu.yaml (no module rules), not attached"),
    "rules loaded": (RULES, False, "runtime policy with module rules, not attached"),
    "rules attached": (RULES, True, "runtime policy with module rules, attached"),
    "noop rules attached": (NOOP_RULES, True, "module rules deciding bfloat16 everywhere, attached"),
    "attach only": (None, True, "generated CPU library, attached, no module rules"),
    "policy attached": (CPU_POLICY, True, "runtime policy cpu.yaml (no module rules), attached"),
}
# (numerator, denominator, what the ratio says); the first is the claim.
RATIOS = [
    ("rules attached", "policy", "**the claim**: rules attached / the same runtime policy without module rules, not attached"),
    ("rules attached", "by hand", "rules attached / the same dtypes by hand (the cost of places at equal compute)"),
    ("by hand", "policy", "layers 2 and 4 in float32 by hand / runtime policy (the compute the rules ask for)"),
    ("rules attached", "plain", "rules attached / generated library, not attached"),
    ("noop rules attached", "policy", "the machinery alone (same dtypes) / runtime policy, not attached"),
    ("rules loaded", "policy", "rules loaded, not attached / runtime policy"),
    ("attach only", "plain", "attach, no rules / generated library"),
    ("policy attached", "policy", "attach, no module rules / runtime policy"),
    ("policy", "plain", "runtime policy / generated library (not about places)"),
]


def make_model(width, layers):
    torch.manual_seed(0)
    modules = []
    for i in range(layers):
        modules.append(torch.nn.Linear(width, width))
        if i + 1 < layers:
            modules.append(torch.nn.ReLU())
    return torch.nn.Sequential(*modules)


class Fp32(torch.nn.Module):
    """What users wrote before places: a module run in float32 with autocast off around it."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        with torch.autocast("cpu", enabled=False):
            return self.inner(x.float())


def by_hand(model):
    """`model` (the same parameters) with modules "2" and "4" in float32 as RULES puts them."""
    return torch.nn.Sequential(*[Fp32(m) if name in ("2", "4") else m for name, m in model.named_children()])


class Setup:
    """Puts the process in one variant's state (runtime policy loaded or not, attached or not)."""

    def __init__(self, model):
        self.model, self.loaded, self.attachment = model, "unset", None

    def enter(self, variant):
        policy, attach, _ = VARIANTS[variant]
        if self.attachment is not None:
            self.attachment.remove()
            self.attachment = None
        if policy != self.loaded:
            autocastgen.clear_runtime_policies()
            if policy is not None:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # "replaces the generated wrapper", once per op
                    autocastgen.load_policy(policy)
            self.loaded = policy
        if attach:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # every pattern must match a module of the model
                self.attachment = autocastgen.attach(self.model, strict=True)


def output_dtypes(model, x):
    """The dtype each Linear returns in one forward under bf16 autocast, by its path in RULES' model."""
    seen, handles = {}, []
    for name, module in model.named_modules():
        name = name.removesuffix(".inner")
        if isinstance(module, torch.nn.Linear):
            handles.append(module.register_forward_hook(lambda m, a, out, name=name: seen.__setitem__(name, out.dtype)))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(x)
    for handle in handles:
        handle.remove()
    return {name: str(dtype).replace("torch.", "") for name, dtype in seen.items()}


def make_step(model, x, target):
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        optimizer.step()

    return step


def time_steps(step, steps):
    """(wall, CPU) seconds per step over `steps` steps."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    return (time.perf_counter() - wall) / steps, (time.process_time() - cpu) / steps


def hook_cost(loaded, calls, rounds):
    """Microseconds one module call costs attached, over the same call not attached: a Sequential of
    `calls` nn.Identity modules on a small tensor under bf16 autocast (no autocast op runs). With
    RULES loaded the modules "2" and "4" exist here too, so each pre-hook looks a section up."""
    model = torch.nn.Sequential(*[torch.nn.Identity() for _ in range(calls)])
    x = torch.ones(4)
    setup = Setup(model)
    setup.loaded = loaded  # the runtime policies are the process's
    variants = ("plain", "attach only", "policy attached", "rules attached")
    out = {name: [] for name in variants}
    for _ in range(rounds):
        for variant in variants:
            setup.enter(variant)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                for _ in range(20):
                    model(x)
                start = time.process_time()
                for _ in range(200):
                    model(x)
                out[variant].append((time.process_time() - start) / 200 / (calls + 1) * 1e6)
    setup.enter("plain")
    plain = statistics.median(out["plain"])
    return {name: statistics.median(t) - plain for name, t in out.items() if name != "plain"}, plain


def spread(values):
    values = sorted(values)
    q = statistics.quantiles(values, n=4) if len(values) >= 4 else [values[0], 0, values[-1]]
    return values[0], q[0], statistics.median(values), q[2], values[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--library", default=os.path.join(REPO, "build", "lib", "libautocastgen_torch_cpu.so"))
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20, help="steps per timed repetition")
    ap.add_argument("--rounds", type=int, default=15, help="rounds; each times every variant once, in a rotated order")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps after each switch of variant")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--variants", help="comma-separated variants to time (default: all); ratios need both sides")
    ap.add_argument("--hook-modules", type=int, default=50, help="nn.Identity modules of the hook-cost model")
    args = ap.parse_args()
    if args.layers < 3:
        raise SystemExit("--layers must be at least 3: the rules name the Linear layers at paths 2 and 4")

    torch.set_num_threads(args.threads)
    torch.ops.load_library(args.library)
    model = make_model(args.width, args.layers)
    x, target = torch.randn(args.batch, args.width), torch.randn(args.batch, args.width)
    hand = by_hand(model)
    steps = {"main": make_step(model, x, target)}
    steps["hand"] = make_step(hand, x, target)
    setup = Setup(model)
    names = args.variants.split(",") if args.variants else list(VARIANTS)
    unknown = [name for name in names if name not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; the variants: {', '.join(VARIANTS)}")

    # What each variant computes in, checked before timing: a variant that does not do what it
    # says would make its row meaningless.
    dtypes = {}
    for variant in names:
        setup.enter(variant)
        dtypes[variant] = output_dtypes(hand if variant == "by hand" else model, x)
    bf16_everywhere = {str(2 * i): "bfloat16" for i in range(args.layers)}  # Sequential's paths of the Linears
    expected_rules = dict(bf16_everywhere, **{"2": "float32", "4": "float32"})
    for variant in names:
        want = expected_rules if variant in ("rules attached", "by hand") else bf16_everywhere
        if dtypes[variant] != want:
            raise SystemExit(f"{variant}: the Linear layers returned {dtypes[variant]}, expected {want}")

    load = os.getloadavg()
    times = {name: [] for name in names}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        if r % 2:
            order.reverse()
        for variant in order:
            setup.enter(variant)
            step = steps["hand" if variant == "by hand" else "main"]
            for _ in range(args.warmup):
                step()
            times[variant].append(time_steps(step, args.steps))
    load_after = os.getloadavg()

    print(f"torch {torch.__version__}, {args.threads} thread(s), MLP of {args.layers} Linear({args.width}, {args.width}) "
          f"with ReLU, batch {args.batch}, SGD step under bf16 autocast; {args.rounds} rounds x {args.steps} steps per "
          f"variant, {os.cpu_count()} CPUs, load average {load[0]:.2f} before, {load_after[0]:.2f} after")
    print()
    print("| variant | what | Linear outputs (paths 0, 2, 4, ...) | CPU ms/step median | CPU ms/step min | wall ms/step median |")
    print("|---|---|---|---:|---:|---:|")
    for variant in names:
        cpu = statistics.median(t[1] for t in times[variant]) * 1e3
        cpu_min = min(t[1] for t in times[variant]) * 1e3
        wall = statistics.median(t[0] for t in times[variant]) * 1e3
        outs = ", ".join(dtypes[variant][k].replace("bfloat16", "bf16").replace("float32", "fp32") for k in sorted(dtypes[variant]))
        print(f"| {variant} | {VARIANTS[variant][2]} | {outs} | {cpu:.3f} | {cpu_min:.3f} | {wall:.3f} |")
    print()
    print("Ratios of the same round's repetitions (CPU time; wall in the last column): median, and min / "
          "quartiles / max over the rounds")
    print()
    print("| ratio | what | CPU median | CPU min, q1, q3, max | of the minima (CPU) | wall median |")
    print("|---|---|---:|---|---:|---:|")
    for num, den, what in RATIOS:
        if num not in names or den not in names:
            continue
        cpu = [a[1] / b[1] for a, b in zip(times[num], times[den])]
        wall = [a[0] / b[0] for a, b in zip(times[num], times[den])]
        minima = min(t[1] for t in times[num]) / min(t[1] for t in times[den])
        lo, q1, med, q3, hi = spread(cpu)
        print(f"| {num} / {den} | {what} | {med:.3f} | {lo:.3f}, {q1:.3f}, {q3:.3f}, {hi:.3f} | {minima:.3f} | {statistics.median(wall):.3f} |")
    print()
    per_call, plain_call = hook_cost(setup.loaded, args.hook_modules, 7)
    print(f"Module call cost (Sequential of {args.hook_modules} nn.Identity, bf16 autocast, CPU time): "
          f"not attached {plain_call:.2f} us per module call; attached, added: "
          + "; ".join(f"{name} +{us:.2f} us" for name, us in per_call.items()))
    modules_per_step = len(list(model.modules()))
    print(f"The MLP step calls {modules_per_step} modules (forward); at the 'attach only' cost that is "
          f"{per_call['attach only'] * modules_per_step:.0f} us per step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
