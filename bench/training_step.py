#!/usr/bin/env python3
"""The training integrations' cost per step (issue 62): transformers' Trainer with AutocastgenCallback,
Lightning with AutocastgenPrecision, Accelerate, each against the same framework with the policy set
up by hand and against the hand loop, all under one policy (a precision rule and a place), bfloat16
on the CPU, in one process, the variants taking turns.

Usage: AUTOCASTGEN_RUNTIME_TORCH_LIB=build/lib/libautocastgen_runtime_torch.so PYTHONPATH=build/python \\
       $(scripts/models-venv) bench/training_step.py [--rounds 10] [--steps 20] [--stats-every 10] [--direct]
Method, variants and the last measured numbers: bench/README.md ("Training integrations").
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings

import torch

import autocastgen

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))
from training_support import rules_policy  # noqa: E402

warnings.filterwarnings("ignore")


SIZE = {"hidden": 128, "layers": 2, "vocab": 1024}  # main() sets it from the arguments


def llama():
    import transformers

    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=SIZE["vocab"], hidden_size=SIZE["hidden"], intermediate_size=2 * SIZE["hidden"],
        num_hidden_layers=SIZE["layers"], num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512,
        tie_word_embeddings=False))


def batches(count: int, batch: int, sequence: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, SIZE["vocab"], (batch, sequence), generator=g) for _ in range(count)]


class Clock:
    """Wall and CPU time from the end of the first step to the end of the last: the steps between,
    with everything the framework does between them (data, callbacks, logging), not its set-up."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, float]] = []

    def tick(self) -> None:
        self.marks.append((time.perf_counter(), time.process_time()))

    def per_step(self) -> tuple[float, float]:
        if len(self.marks) < 2:  # one step: timed by the caller (direct)
            return 0.0, 0.0
        (w0, c0), (w1, c1) = self.marks[0], self.marks[-1]
        steps = len(self.marks) - 1
        return (w1 - w0) / steps, (c1 - c0) / steps


# --- the variants: each trains `steps` steps and returns (wall, cpu) per step -------------------------

class Hand:
    name = "hand loop"

    def __init__(self, args, policy) -> None:
        self.model = llama()
        self.attachment = autocastgen.attach(self.model)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)

    def block(self, data) -> tuple[float, float]:
        clock = Clock()
        for batch in data:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = self.model(input_ids=batch, labels=batch, use_cache=False).loss
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad()
            clock.tick()
        return clock.per_step()


class AccelerateLoop(Hand):
    name = "Accelerate"

    def __init__(self, args, policy) -> None:
        import accelerate

        super().__init__(args, policy)
        self.accelerator = accelerate.Accelerator(mixed_precision="bf16", cpu=True)
        self.prepared, self.optimizer = self.accelerator.prepare(self.model, self.optimizer)

    def block(self, data) -> tuple[float, float]:
        clock = Clock()
        for batch in data:
            loss = self.prepared(input_ids=batch, labels=batch, use_cache=False).loss
            self.accelerator.backward(loss)
            self.optimizer.step()
            self.optimizer.zero_grad()
            clock.tick()
        return clock.per_step()


class TrainerRun:
    name = "Trainer, policy by hand"
    callback = False

    def __init__(self, args, policy) -> None:
        self.args, self.policy = args, policy
        self.model = llama()

    def block(self, data) -> tuple[float, float]:
        import transformers

        clock = Clock()

        class Tick(transformers.TrainerCallback):
            def on_step_end(self, *args, **kwargs):
                clock.tick()

        rows = [{"input_ids": row, "labels": row} for batch in data for row in batch]
        settings = transformers.TrainingArguments(
            output_dir=tempfile.mkdtemp(prefix="bench-trainer-"), bf16=True, use_cpu=True,
            per_device_train_batch_size=len(data[0]), max_steps=len(data), train_sampling_strategy="sequential",
            report_to="none", logging_steps=self.args.stats_every, save_strategy="no", disable_tqdm=True,
            optim="adamw_torch", learning_rate=1e-4, max_grad_norm=0.0)
        trainer = transformers.Trainer(model=self.model, args=settings, train_dataset=rows, callbacks=[Tick()])
        if self.callback:
            from autocastgen.integrations.transformers import AutocastgenCallback

            AutocastgenCallback(self.policy, stats_every=self.args.stats_every).add_to(trainer)
            trainer.train()
        else:
            with autocastgen.attach(self.model):
                trainer.train()
        return clock.per_step()


class TrainerCallbackRun(TrainerRun):
    name = "Trainer + AutocastgenCallback"
    callback = True


class LightningRun:
    name = "Lightning MixedPrecision, policy by hand"
    plugin = False

    def __init__(self, args, policy) -> None:
        import lightning.pytorch as pl

        self.policy = policy

        class Module(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.model = llama()

            def training_step(self, batch, index):
                return self.model(input_ids=batch, labels=batch, use_cache=False).loss

            def configure_optimizers(self):
                return torch.optim.AdamW(self.parameters(), lr=1e-4)

        self.module = Module()

    def block(self, data) -> tuple[float, float]:
        import lightning.pytorch as pl

        clock = Clock()

        class Tick(pl.Callback):
            def on_train_batch_end(self, *args, **kwargs):
                clock.tick()

        if self.plugin:
            from autocastgen.integrations.lightning import AutocastgenPrecision

            plugin = AutocastgenPrecision(self.policy, torch.bfloat16)
        else:
            plugin = pl.plugins.precision.MixedPrecision("bf16-mixed", "cpu")
        trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=len(data), plugins=[plugin], callbacks=[Tick()],
                             logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False)
        loader = torch.utils.data.DataLoader(torch.cat(data), batch_size=len(data[0]), shuffle=False)
        if self.plugin:
            trainer.fit(self.module, loader)
        else:
            with autocastgen.attach(self.module):
                trainer.fit(self.module, loader)
        return clock.per_step()


class LightningPluginRun(LightningRun):
    name = "Lightning + AutocastgenPrecision"
    plugin = True


VARIANTS = [Hand, AccelerateLoop, TrainerRun, TrainerCallbackRun, LightningRun, LightningPluginRun]
# (numerator, denominator, what the ratio says); the integrations' own cost first.
RATIOS = [
    ("Trainer + AutocastgenCallback", "Trainer, policy by hand", "**the callback's cost** (statistics every N steps)"),
    ("Lightning + AutocastgenPrecision", "Lightning MixedPrecision, policy by hand", "**the plugin's cost**"),
    ("Accelerate", "hand loop", "Accelerate (no module of ours: load_policy + attach) / the hand loop"),
    ("Trainer + AutocastgenCallback", "hand loop", "Trainer with the callback / the hand loop"),
    ("Lightning + AutocastgenPrecision", "hand loop", "Lightning with the plugin / the hand loop"),
]


def direct(args, policy: str) -> None:
    """What the integrations add to a step, measured where it is spent rather than as a difference of
    two noisy step times: the per-step work of their own code (timeit, which a loaded machine
    disturbs little), and the statistics' counting on a counted step (the hand loop's steps with and
    without ``autocastgen.stats()``, alternated, CPU time, median of the pairs)."""
    import timeit
    import types

    from autocastgen.integrations.lightning import AutocastgenPrecision
    from autocastgen.integrations.transformers import AutocastgenCallback

    hand = Hand(args, policy)
    data = batches(2 * args.pairs + 2, args.batch, args.sequence)
    hand.block(data[:2])
    on, off = [], []
    for pair in range(args.pairs):
        for counted in ((True, False) if pair % 2 else (False, True)):
            start = time.process_time()
            if counted:
                with autocastgen.stats():
                    hand.block(data[2 * pair:2 * pair + 1])
            else:
                hand.block(data[2 * pair + 1:2 * pair + 2])
            (on if counted else off).append(time.process_time() - start)
    step = statistics.median(off)
    counting = statistics.median(a / b for a, b in zip(on, off)) - 1.0

    callback = AutocastgenCallback(policy, stats_every=args.stats_every)
    fake = types.SimpleNamespace(global_step=1, log_history=[], logging_steps=args.stats_every)
    control = types.SimpleNamespace(should_log=False)
    callback._every = args.stats_every

    def uncounted_step() -> None:
        callback.on_step_begin(None, fake, control)
        callback.on_step_end(None, fake, control)
        callback.on_log(None, fake, control, logs={})

    def counted_hooks() -> None:  # the block's open and close and the figures, around an empty step
        fake.global_step = args.stats_every - 1
        callback.on_step_begin(None, fake, control)
        fake.global_step = args.stats_every
        callback.on_step_end(None, fake, control)
        callback.on_log(types.SimpleNamespace(report_to=[]), fake, control, logs={})
        fake.global_step = 1

    plugin = AutocastgenPrecision(policy, torch.bfloat16)
    plugin.policy.load()
    loops = 20000
    hooks = min(timeit.repeat(uncounted_step, number=loops, repeat=5)) / loops
    counted_extra = min(timeit.repeat(counted_hooks, number=200, repeat=5)) / 200
    plugin_check = min(timeit.repeat(plugin.policy.load, number=loops, repeat=5)) / loops
    callback_cost = ((args.stats_every - 1) * hooks + counted_extra + counting * step) / args.stats_every / step
    print(f"\nDirect ({args.pairs} pairs of hand-loop steps; load average {os.getloadavg()[0]:.1f}): a step "
          f"{1e3 * step:.1f} ms CPU without statistics; counting on a counted step +{100 * counting:.2f} %\n")
    print("| what the integration adds | per step | share of a step |")
    print("|---|---:|---:|")
    print(f"| callback, an uncounted step (three hooks) | {1e6 * hooks:.2f} us | {100 * hooks / step:.4f} % |")
    print(f"| callback, a counted step's hooks (stats block, figures) | {1e6 * counted_extra:.1f} us | "
          f"{100 * counted_extra / step:.3f} % |")
    print(f"| callback, counting during a counted step | {1e3 * counting * step:.2f} ms | {100 * counting:.2f} % |")
    print(f"| **callback, averaged over stats_every={args.stats_every}** | | **{100 * callback_cost:.3f} %** |")
    print(f"| **plugin: the policy-loaded check in forward_context** | {1e6 * plugin_check:.2f} us | "
          f"**{100 * plugin_check / step:.4f} %** |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20, help="steps per variant and round (the first is not timed)")
    parser.add_argument("--stats-every", type=int, default=10, help="the callback's stats_every (and logging_steps)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--sequence", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--pairs", type=int, default=30, help="--direct: pairs of hand-loop steps")
    parser.add_argument("--direct", action="store_true", help="only what the integrations add, measured directly")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    SIZE.update(hidden=args.hidden, layers=args.layers)
    folder = tempfile.mkdtemp(prefix="bench-training-")
    policy = os.path.join(folder, "policy.yaml")
    with open(policy, "w") as f:
        f.write(rules_policy())
    autocastgen.load_policy(policy)
    if args.direct:
        direct(args, policy)
        return
    data = batches(args.steps + 1, args.batch, args.sequence)
    runs = [variant(args, policy) for variant in VARIANTS]
    for run in runs:  # warm-up: one untimed block each
        run.block(data[:3])
    wall: dict[str, list[float]] = {run.name: [] for run in runs}
    cpu: dict[str, list[float]] = {run.name: [] for run in runs}
    for round_ in range(args.rounds):
        order = runs[round_ % len(runs):] + runs[:round_ % len(runs)]
        if round_ % 2:
            order.reverse()
        for run in order:
            w, c = run.block(data)
            wall[run.name].append(w)
            cpu[run.name].append(c)
        print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
    load = os.getloadavg()[0]
    print(f"\n{args.rounds} rounds x {args.steps} timed steps, Llama {args.layers} x {args.hidden} (vocab "
          f"{SIZE['vocab']}), batch {args.batch} x "
          f"{args.sequence}, bfloat16, {args.threads} thread(s), stats every {args.stats_every} steps; "
          f"load average {load:.1f} at the end\n")
    print("| variant | wall ms/step (median) | CPU ms/step (median) |")
    print("|---|---:|---:|")
    for run in runs:
        print(f"| {run.name} | {1e3 * statistics.median(wall[run.name]):.1f} | {1e3 * statistics.median(cpu[run.name]):.1f} |")
    print("\n| ratio (median of the rounds' ratios) | CPU | quartiles | wall | what |")
    print("|---|---:|---|---:|---|")
    for top, bottom, what in RATIOS:
        ratios = [a / b for a, b in zip(cpu[top], cpu[bottom])]
        wall_ratio = statistics.median(a / b for a, b in zip(wall[top], wall[bottom]))
        q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
        print(f"| {top} / {bottom} | {statistics.median(ratios):.3f} | {q[0]:.3f}-{q[2]:.3f} | {wall_ratio:.3f} | {what} |")


if __name__ == "__main__":
    main()
