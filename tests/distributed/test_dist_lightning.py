"""Lightning's DDP (two ranks, gloo on loopback) with AutocastgenPrecision under a policy with a precision
rule and a place (docs/training.md, "Lightning"): a tiny transformers Llama trained 4 steps by
``lightning.pytorch.Trainer(strategy=DDPStrategy(process_group_backend="gloo"), devices=2)`` gives on
each rank the losses and weights of the hand-written DDP loop (``DistributedDataParallel`` around the
Llama, ``torch.autocast``, the policy loaded and the module attached by hand) bit for bit; in bfloat16,
and in float16 with autocastgen.GradScaler.

The ranks are the harness's (dist_harness.py: spawned, the process group made on a store the parent
serves, a deadline); Lightning finds the group made (``torch.distributed.is_initialized``) and the
ranks in the environment (``LOCAL_RANK``), as under torchrun, and starts no process of its own. It
hands each rank half the rows through a ``DistributedSampler`` in place of the loader's sampler, which
shuffles a training loader's rows whatever the loader said (seed 0, epoch 0); the hand loop takes the
same rows from the same sampler. The interpreter is the one configured by
-DAUTOCASTGEN_PYTHON=$(scripts/models-venv), which has transformers and Lightning; a missing one there
is an error (tests/python/requires.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import dist_harness
import torch

dist_harness.setup_package_path()
if str(dist_harness.ROOT / "tests" / "python") not in sys.path:
    sys.path.append(str(dist_harness.ROOT / "tests" / "python"))

import requires  # noqa: E402

requires.module("transformers")
lightning = requires.module("lightning")

from exact import assert_exact  # noqa: E402
from training_support import hand_loop, llama, parameters, rules_policy, token_ids, write  # noqa: E402

STEPS, BATCH = 4, 2  # per rank


class Module(lightning.pytorch.LightningModule):
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


def worker(rank: int, world: int, folder: str) -> None:
    os.environ["LOCAL_RANK"] = str(rank)  # as torchrun sets it: Lightning launches nothing
    for dtype in (torch.bfloat16, torch.float16):  # one pair of ranks: their start-up is most of the time
        train_and_compare(rank, world, Path(folder) / f"{str(dtype)[6:]}.yaml", dtype)


def train_and_compare(rank: int, world: int, policy: Path, dtype: torch.dtype) -> None:
    import autocastgen
    from autocastgen.integrations.lightning import AutocastgenPrecision

    autocastgen.clear_runtime_policies()
    rows = token_ids()[: STEPS * BATCH * world]
    module = Module()
    plugin = AutocastgenPrecision(policy, dtype)
    trainer = lightning.pytorch.Trainer(
        accelerator="cpu", devices=world, strategy=lightning.pytorch.strategies.DDPStrategy(process_group_backend="gloo"),
        max_steps=STEPS, plugins=[plugin], logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False)
    trainer.fit(module, torch.utils.data.DataLoader(rows, batch_size=BATCH, shuffle=False))

    autocastgen.clear_runtime_policies()
    autocastgen.load_policy(policy)
    reference = Module()
    attachment = autocastgen.attach(reference)
    ddp = torch.nn.parallel.DistributedDataParallel(reference.model)
    sampler = torch.utils.data.DistributedSampler(rows, num_replicas=world, rank=rank, shuffle=True, seed=0)
    mine = rows[list(sampler)]  # Lightning's for a training loader under DDP, epoch 0
    scaler = autocastgen.GradScaler("cpu") if dtype == torch.float16 else None
    losses = hand_loop(ddp, [mine[i * BATCH:(i + 1) * BATCH] for i in range(STEPS)], dtype=dtype,
                       optimizer=torch.optim.AdamW(reference.parameters(), lr=1e-3), scaler=scaler,
                       cache_enabled=False)
    attachment.remove()
    assert_exact(module.losses, losses, f"rank {rank}: losses")
    assert_exact(parameters(module), parameters(reference), f"rank {rank}: weights")
    if scaler is not None:
        assert_exact(plugin.scaler.state_dict(), scaler.state_dict(), f"rank {rank}: the scaler's state")


def test_lightning_ddp_with_the_plugin_is_the_hand_ddp_loop_bit_for_bit(tmp_path: Path) -> None:
    for dtype in ("bfloat16", "float16"):
        write(tmp_path, f"{dtype}.yaml", rules_policy("model.").replace("[bfloat16]", f"[{dtype}]"))
    dist_harness.run_ranks(worker, str(tmp_path), timeout=180.0)
