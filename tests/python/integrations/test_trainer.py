"""transformers' Trainer under a policy (docs/training.md, "transformers' Trainer"): a tiny Llama trained
by ``Trainer(bf16=True)`` on the CPU with ``AutocastgenCallback`` gives the losses and weights of the
hand loop under ``torch.autocast`` with the same policy and seed, bit for bit (exact.py); the
callback's statistics reach the Trainer's logs and its TensorBoard, its report page is written; the
advisor's policy for a Trainer's model and batch is what the next Trainer trains under; an fp8 policy
trains; the trained model exports with its policy (autocastgen.export).

The Trainer is set up to do the hand loop's arithmetic: batches in order (``train_sampling_strategy=
"sequential"``), its defaults otherwise (fused AdamW at 5e-5 with no weight decay, a linear
learning-rate decay to 0, gradients clipped to norm 1, the loss over the batch's predicted tokens:
``num_items_in_batch``), which the hand loop writes out. A loaded policy stays loaded, so each test
clears the process's runtime policies first.
"""
from __future__ import annotations

import os
import pathlib
import warnings

import pytest
import torch

import requires
from built_tree import require_built

transformers = requires.module("transformers")
requires.module("accelerate")  # the Trainer's autocast
requires.module("tensorboard")

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
require_built(BUILD, "python/autocastgen/__init__.py")

import autocastgen  # noqa: E402
from autocastgen.integrations.transformers import AutocastgenCallback  # noqa: E402
from exact import assert_exact, exact  # noqa: E402
from training_support import (  # noqa: E402
    CPU_POLICY,
    FP8_POLICY,
    hand_loop,
    llama,
    parameters,
    rules_policy,
    token_ids,
    write,
)

STEPS, BATCH = 4, 4


@pytest.fixture(autouse=True)
def no_policy():
    autocastgen.clear_runtime_policies()
    yield
    autocastgen.clear_runtime_policies()


class RecordingTrainer(transformers.Trainer):
    """The Trainer, keeping each step's loss tensor (what training_step returns)."""

    def training_step(self, *args, **kwargs):
        loss = super().training_step(*args, **kwargs)
        self.losses.append(loss)
        return loss


def train(tmp_path: pathlib.Path, callback: AutocastgenCallback | None, *, steps: int = STEPS,
          **arguments) -> RecordingTrainer:
    ids = token_ids()
    data = [{"input_ids": row, "labels": row} for row in ids[: steps * BATCH]]
    settings = dict(output_dir=str(tmp_path / "out"), bf16=True, use_cpu=True, per_device_train_batch_size=BATCH,
                    max_steps=steps, train_sampling_strategy="sequential", report_to="none", logging_steps=1,
                    save_strategy="no", disable_tqdm=True)
    settings.update(arguments)
    trainer = RecordingTrainer(model=llama(), args=transformers.TrainingArguments(**settings), train_dataset=data)
    trainer.losses = []
    if callback is not None:
        callback.add_to(trainer)
    trainer.train()
    return trainer


def trainers_hand_loop(policy: pathlib.Path | None, steps: int = STEPS) -> tuple[list, torch.nn.Module]:
    """The loop the Trainer runs, by hand: the policy loaded, the model attached."""
    autocastgen.clear_runtime_policies()
    if policy is not None:
        autocastgen.load_policy(policy)
    model = llama()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.0, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, (steps - step) / steps))
    ids = token_ids()
    with autocastgen.attach(model):
        losses = hand_loop(model, [ids[i * BATCH:(i + 1) * BATCH] for i in range(steps)], optimizer=optimizer,
                           scheduler=scheduler, clip=1.0, count_items=True)
    return losses, model


def test_the_trainer_under_a_policy_is_the_hand_loop_bit_for_bit(tmp_path: pathlib.Path) -> None:
    policy = write(tmp_path, "policy.yaml", rules_policy())
    trainer = train(tmp_path, AutocastgenCallback(policy))
    assert trainer.callback_handler.callbacks[0].policy.attachment is None  # detached at the end
    losses, model = trainers_hand_loop(policy)
    assert_exact(trainer.losses, losses, "losses")
    assert_exact(parameters(trainer.model), parameters(model), "weights")
    # The policy decided something: the same loop under the shipped lists alone ends elsewhere.
    _, plain = trainers_hand_loop(CPU_POLICY)
    assert not exact(parameters(plain), parameters(model))


def step_figures(policy: pathlib.Path) -> dict[str, float]:
    """The figures of the hand loop's second step, as the callback computes them (insight.TensorBoard)."""
    class Keep:
        def add_scalar(self, tag, value, step):
            figures[tag] = value

    figures: dict[str, float] = {}
    autocastgen.load_policy(policy)
    model, ids = llama(), token_ids()
    with autocastgen.attach(model):
        hand_loop(model, [ids[:BATCH]], count_items=True)
        with autocastgen.stats() as counted:
            hand_loop(model, [ids[BATCH:2 * BATCH]], count_items=True)
    autocastgen.insight.TensorBoard(Keep()).log(2, stats=counted)
    return figures


def test_the_callback_logs_statistics_into_the_trainers_loggers_and_writes_the_report(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    policy = write(tmp_path, "policy.yaml", rules_policy())
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tensorboard"))
    callback = AutocastgenCallback(policy, stats_every=2, report=tmp_path / "run.html")
    trainer = train(tmp_path, callback, report_to=["tensorboard"])
    figures = step_figures(policy)
    assert figures["autocastgen/calls/float32"] > 0 and figures["autocastgen/calls/bfloat16"] > 0, figures
    logged = {entry["step"]: entry for entry in trainer.state.log_history if "loss" in entry}
    assert sorted(logged) == [1, 2, 3, 4]
    for step in (2, 4):  # the counted steps: their logs hold the figures, as a hand step counts them
        assert {k: v for k, v in logged[step].items() if k.startswith("autocastgen/")} == figures
    assert not any(k.startswith("autocastgen/") for step in (1, 3) for k in logged[step])
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    for tag, value in figures.items():
        assert [(e.step, e.value) for e in events.Scalars(f"train/{tag}")] == [(2, value), (4, value)], tag
    page = (tmp_path / "run.html").read_text()
    assert "lm_head" in page and "self_attn" in page  # the module tree of the attached model

    # Given through callbacks=[...], it comes after the loggers: the history still has the figures,
    # and it says that the loggers miss them.
    ids = token_ids()
    late = AutocastgenCallback(policy, stats_every=1)
    settings = transformers.TrainingArguments(output_dir=str(tmp_path / "late"), bf16=True, use_cpu=True,
                                              per_device_train_batch_size=BATCH, max_steps=1, report_to=["tensorboard"],
                                              logging_steps=1, save_strategy="no", disable_tqdm=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = transformers.Trainer(model=llama(), args=settings, train_dataset=[{"input_ids": r, "labels": r} for r in ids],
                                       callbacks=[late])
        trainer.train()
    assert "autocastgen/casts" in trainer.state.log_history[0]
    assert any("added after the Trainer's loggers (tensorboard)" in str(w.message) for w in caught)


def test_the_advisors_policy_for_a_trainers_model_and_batch_is_the_next_runs(tmp_path: pathlib.Path) -> None:
    first = train(tmp_path, AutocastgenCallback(CPU_POLICY), steps=1)
    batch = next(iter(first.get_train_dataloader()))
    model = first.model.eval()
    # bfloat16 keeps float32's range, so no range leaves it; a tolerance tighter than the default
    # makes the search move places to float32, which the next run must then run in float32.
    advice = autocastgen.advise(model, {"input_ids": batch["input_ids"]}, policy=CPU_POLICY, dtype=torch.bfloat16,
                                rtol=0.005, atol=0.0)
    assert advice.moved, "the advisor moved nothing: the test shows nothing"
    advised = advice.write(tmp_path / "advised.yaml")
    callback = AutocastgenCallback(advised, stats_every=1)
    trainer = train(tmp_path, callback, steps=2)
    ran = {(row.get("module"), row["op"]): row["ran_in"] for row in callback.last_counted.table["ops"]}
    for place in advice.moved:
        assert set(ran[(place.module, place.op)]) == {"float32"}, (place, ran[(place.module, place.op)])
    losses, model = trainers_hand_loop(pathlib.Path(advised), steps=2)
    assert_exact(trainer.losses, losses, "losses")
    assert_exact(parameters(trainer.model), parameters(model), "weights")


def test_the_trainer_trains_under_an_fp8_policy(tmp_path: pathlib.Path) -> None:
    policy = write(tmp_path, "fp8.yaml", FP8_POLICY)
    callback = AutocastgenCallback(policy, stats_every=1)
    trainer = train(tmp_path, callback)
    assert callback.last_counted.ops["aten::linear"]["ran_in"] == {"float8_e4m3fn": 15}  # 7 a layer, the head
    assert all(torch.isfinite(loss) for loss in trainer.losses)
    losses, model = trainers_hand_loop(policy)
    assert_exact(trainer.losses, losses, "losses")
    assert_exact(parameters(trainer.model), parameters(model), "weights")


def test_a_model_the_trainer_trained_exports_with_its_policy(tmp_path: pathlib.Path) -> None:
    policy = write(tmp_path, "policy.yaml", rules_policy())
    trainer = train(tmp_path, AutocastgenCallback(policy), steps=2)
    # Accelerate wrapped the model's forward in its autocast and convert_outputs_to_fp32: unwrapped,
    # the model exports in float32 first as export wants it (docs/training.md).
    model = trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False).eval()
    ids = token_ids()[:2]
    program = autocastgen.export(model, (ids,), {"use_cache": False}, device="cpu", dtype=torch.bfloat16,
                                 policy=policy)
    rows = {(row["module"], row["op"]): row["ran_in"] for row in autocastgen.precision_map(program)["rows"]}
    assert rows[("lm_head", "aten::linear")] == {"float32": 1}  # the place
    assert rows[("model.layers.0.mlp.act_fn", "aten::silu")] == {"float32": 1}  # the rule
    assert rows[("model.layers.0.mlp.up_proj", "aten::linear")] == {"bfloat16": 1}  # the shipped lists
    with torch.no_grad(), autocastgen.attach(model), torch.autocast("cpu", dtype=torch.bfloat16):
        eager = model(ids, use_cache=False).logits
    assert_exact(program.module()(ids, use_cache=False).logits, eager, "the program's logits")
