"""Accelerate under a policy (docs/training.md, "Accelerate"): a policy loaded with ``load_policy`` is in
force inside ``Accelerator(mixed_precision="bf16")``'s autocast, so a tiny Llama prepared by it and
trained on the CPU gives the hand loop's losses and weights bit for bit (exact.py); an fp8 policy
trains. What ``convert_outputs_to_fp32`` does to a prepared model's outputs, and how to see the
policy instead (statistics, the precision map), as docs/training.md says. Two processes under
``accelerate launch``: tests/distributed/test_dist_accelerate.py.

Accelerate's state is one per process (``AcceleratorState``): every test here uses the same
settings, bfloat16 on the CPU.
"""
from __future__ import annotations

import os
import pathlib

import pytest
import torch

import requires
from built_tree import require_built

requires.module("transformers")
accelerate = requires.module("accelerate")

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
require_built(BUILD, "python/autocastgen/__init__.py")

import autocastgen  # noqa: E402
from exact import assert_exact  # noqa: E402
from training_support import CPU_POLICY, FP8_POLICY, hand_loop, llama, parameters, rules_policy, token_ids, write  # noqa: E402

STEPS, BATCH = 4, 4


@pytest.fixture(autouse=True)
def no_policy():
    autocastgen.clear_runtime_policies()
    yield
    autocastgen.clear_runtime_policies()


def accelerated(policy: pathlib.Path) -> tuple[list, torch.nn.Module, object]:
    """The hand loop's arithmetic through Accelerate: prepare, its autocast, accelerator.backward."""
    autocastgen.load_policy(policy)
    accelerator = accelerate.Accelerator(mixed_precision="bf16", cpu=True)
    model = llama()
    attachment = autocastgen.attach(model)  # before prepare: paths as the model names them
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    prepared, optimizer = accelerator.prepare(model, optimizer)
    ids, losses = token_ids(), []
    for step in range(STEPS):
        batch = ids[step * BATCH:(step + 1) * BATCH]
        outputs = prepared(input_ids=batch, labels=batch, use_cache=False)
        accelerator.backward(outputs.loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(outputs.loss.detach())
    attachment.remove()
    return losses, model, outputs


def by_hand(policy: pathlib.Path) -> tuple[list, torch.nn.Module]:
    autocastgen.clear_runtime_policies()
    autocastgen.load_policy(policy)
    model, ids = llama(), token_ids()
    with autocastgen.attach(model):
        losses = hand_loop(model, [ids[i * BATCH:(i + 1) * BATCH] for i in range(STEPS)])
    return losses, model


def test_accelerate_under_a_policy_is_the_hand_loop_bit_for_bit(tmp_path: pathlib.Path) -> None:
    policy = write(tmp_path, "policy.yaml", rules_policy())
    losses, model, _ = accelerated(policy)
    reference_losses, reference = by_hand(policy)
    assert_exact(losses, reference_losses, "losses")
    assert_exact(parameters(model), parameters(reference), "weights")


def test_accelerate_trains_under_an_fp8_policy(tmp_path: pathlib.Path) -> None:
    policy = write(tmp_path, "fp8.yaml", FP8_POLICY)
    with autocastgen.stats() as counted:
        losses, model, _ = accelerated(policy)
    assert counted.ops["aten::linear"]["ran_in"] == {"float8_e4m3fn": 15 * STEPS}
    reference_losses, reference = by_hand(policy)
    assert_exact(losses, reference_losses, "losses")
    assert_exact(parameters(model), parameters(reference), "weights")


def test_a_prepared_models_outputs_are_float32_and_the_statistics_show_the_policy(tmp_path: pathlib.Path) -> None:
    """convert_outputs_to_fp32: the head ran in bfloat16 (the shipped lists), yet the prepared model's
    logits are float32, as Accelerate converts a forward's floating outputs after autocast. The
    output dtype says nothing of the policy; the statistics do (and an export's precision map:
    test_trainer.py)."""
    policy = write(tmp_path, "policy.yaml", f"extends: {CPU_POLICY}\n")
    with autocastgen.stats() as counted:
        _, model, outputs = accelerated(policy)
    assert outputs.logits.dtype == torch.float32
    assert counted.ops["aten::linear"]["ran_in"] == {"bfloat16": 15 * STEPS}
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):  # the same model, unprepared
        assert model._original_forward(token_ids()[:2], use_cache=False).logits.dtype == torch.bfloat16
