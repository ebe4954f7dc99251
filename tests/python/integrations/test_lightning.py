"""Lightning under a policy (docs/training.md, "Lightning"): ``AutocastgenPrecision`` in
``lightning.pytorch.Trainer(plugins=[...])`` trains a tiny Llama on the CPU to the hand loop's losses
and weights bit for bit (exact.py), in bfloat16 and in float16 with ``autocastgen.GradScaler``; an fp8
policy trains; Lightning's own ``MixedPrecision(scaler=autocastgen.GradScaler(...))`` is
``torch.amp.GradScaler``'s run bit for bit, scale included; the plugin refuses a policy for another
device and survives pickling (``ddp_spawn``). Two processes under DDP: tests/distributed/test_dist_lightning.py.

The LightningModule holds the Llama as ``self.model``, so the policy's place is ``model.lm_head``
(paths as the LightningModule's ``named_modules()``). Lightning autocasts with ``cache_enabled=False``;
the hand loop does too (the cast cache changes no bits, but the statistics count its hits).
"""
from __future__ import annotations

import os
import pathlib
import pickle

import pytest
import torch

import requires
from built_tree import require_built

requires.module("transformers")
lightning = requires.module("lightning")

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
require_built(BUILD, "python/autocastgen/__init__.py")

import autocastgen  # noqa: E402
from autocastgen.integrations.lightning import AutocastgenPrecision  # noqa: E402
from exact import assert_exact, exact  # noqa: E402
from training_support import FP8_POLICY, hand_loop, llama, parameters, rules_policy, token_ids, write  # noqa: E402

STEPS, BATCH = 4, 4


@pytest.fixture(autouse=True)
def no_policy():
    autocastgen.clear_runtime_policies()
    yield
    autocastgen.clear_runtime_policies()


class Module(lightning.pytorch.LightningModule):
    """A Llama's causal-LM loss, AdamW at 1e-3: the hand loop's arithmetic."""

    def __init__(self) -> None:
        super().__init__()
        self.model = llama()
        self.losses: list[torch.Tensor] = []

    def training_step(self, batch: torch.Tensor, index: int) -> torch.Tensor:
        loss = self.model(input_ids=batch, labels=batch, use_cache=False).loss
        self.losses.append(loss.detach())
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def fit(plugin) -> Module:
    module = Module()
    loader = torch.utils.data.DataLoader(token_ids()[: STEPS * BATCH], batch_size=BATCH, shuffle=False)
    trainer = lightning.pytorch.Trainer(accelerator="cpu", devices=1, max_steps=STEPS, plugins=[plugin], logger=False,
                                        enable_checkpointing=False, enable_progress_bar=False,
                                        enable_model_summary=False)
    trainer.fit(module, loader)
    return module


def by_hand(policy: pathlib.Path | None, dtype: torch.dtype, scaler=None) -> tuple[list, torch.nn.Module]:
    autocastgen.clear_runtime_policies()
    if policy is not None:
        autocastgen.load_policy(policy)
    module = Module()  # the same paths as the plugin attaches
    ids = token_ids()
    with autocastgen.attach(module):
        losses = hand_loop(module.model, [ids[i * BATCH:(i + 1) * BATCH] for i in range(STEPS)], dtype=dtype,
                           optimizer=torch.optim.AdamW(module.parameters(), lr=1e-3), scaler=scaler,
                           cache_enabled=False)
    return losses, module


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_the_plugin_is_the_hand_loop_bit_for_bit(tmp_path: pathlib.Path, dtype: torch.dtype) -> None:
    policy = write(tmp_path, "policy.yaml", rules_policy("model.").replace("dtypes: [bfloat16]", f"dtypes: [{str(dtype)[6:]}]"))
    plugin = AutocastgenPrecision(policy, dtype)
    assert plugin.device == "cpu" and plugin.precision == ("bf16-mixed" if dtype == torch.bfloat16 else "16-mixed")
    assert isinstance(plugin.scaler, autocastgen.GradScaler) == (dtype == torch.float16)
    module = fit(plugin)
    assert plugin.policy.attachment is None  # detached at teardown
    scaler = autocastgen.GradScaler("cpu") if dtype == torch.float16 else None
    losses, reference = by_hand(policy, dtype, scaler)
    assert_exact(module.losses, losses, "losses")
    assert_exact(parameters(module), parameters(reference), "weights")
    if scaler is not None:
        assert_exact(plugin.scaler.state_dict(), scaler.state_dict(), "the scaler's state")
    # The policy decided something: Lightning's MixedPrecision alone ends elsewhere.
    autocastgen.clear_runtime_policies()
    plain = fit(lightning.pytorch.plugins.precision.MixedPrecision(plugin.precision, "cpu"))
    assert not exact(parameters(plain), parameters(module))


def test_the_plugin_trains_under_an_fp8_policy(tmp_path: pathlib.Path) -> None:
    policy = write(tmp_path, "fp8.yaml", FP8_POLICY)
    with autocastgen.stats() as counted:
        module = fit(AutocastgenPrecision(policy, torch.bfloat16))
    assert counted.ops["aten::linear"]["ran_in"] == {"float8_e4m3fn": 15 * STEPS}  # 7 a layer, the head
    losses, reference = by_hand(policy, torch.bfloat16)
    assert_exact(module.losses, losses, "losses")
    assert_exact(parameters(module), parameters(reference), "weights")


def test_mixed_precisions_scaler_slot_takes_autocastgens_grad_scaler() -> None:
    """Lightning's own plugin, float16, our scaler in its ``scaler=`` slot, against its default
    (``torch.amp.GradScaler("cpu")``): the same losses, weights and scaler state. A small initial
    scale (2**-8 of the default's growth from 1) makes the scale grow in these steps."""
    runs = []
    for scaler in (torch.amp.GradScaler("cpu", init_scale=2.0, growth_interval=1),
                   autocastgen.GradScaler("cpu", init_scale=2.0, growth_interval=1)):
        plugin = lightning.pytorch.plugins.precision.MixedPrecision("16-mixed", "cpu", scaler=scaler)
        module = fit(plugin)
        runs.append((module.losses, parameters(module), scaler.state_dict()))
    assert runs[1][2]["scale"] == 2.0 * 2**STEPS
    assert_exact(runs[1], runs[0], "autocastgen.GradScaler against torch.amp.GradScaler")


def test_the_plugin_refuses_a_policy_for_another_device_and_pickles(tmp_path: pathlib.Path) -> None:
    cuda = write(tmp_path, "cuda.yaml", "autocast: {device: cuda}\nlists:\n  fp32: [silu]\n")
    with pytest.raises(ValueError, match=r"the policy .*cuda.yaml is for cuda, but autocast runs on cpu"):
        AutocastgenPrecision(cuda, torch.bfloat16, device="cpu")
    with pytest.raises(ValueError, match="dtype must be torch.bfloat16 or torch.float16"):
        AutocastgenPrecision(None, torch.float32)
    policy = write(tmp_path, "policy.yaml", rules_policy("model."))
    plugin = AutocastgenPrecision(policy)
    assert plugin.device == "cpu"  # the policy file's device
    copy = pickle.loads(pickle.dumps(plugin))  # as ddp_spawn hands it to a child: loads again there
    assert copy.policy.source == str(policy) and copy.policy._loaded_in is None
