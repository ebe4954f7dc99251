"""One rank of test_dist_accelerate.py, started by ``accelerate launch`` (torchrun): trains the tiny Llama
4 steps through ``Accelerator(mixed_precision="bf16", cpu=True)`` (DDP over gloo) under the policy
given, then by the hand-written DDP loop under ``torch.autocast`` with the same policy loaded and the
model attached, each rank on its own rows, and writes what differed (exact.py) to FOLDER/rank<N>.json.

Usage: accelerate launch --multi_gpu --num_processes 2 ... accelerate_ranks.py POLICY FOLDER
(``--multi_gpu`` is Accelerate's torchrun launcher; ``cpu=True`` makes the ranks MULTI_CPU on gloo.)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import accelerate
import torch

import autocastgen
from exact import difference
from training_support import hand_loop, llama, parameters, token_ids

STEPS, BATCH = 4, 2  # per rank


def main(policy: str, folder: str) -> None:
    autocastgen.load_policy(policy)
    accelerator = accelerate.Accelerator(mixed_precision="bf16", cpu=True)
    rank, world = accelerator.process_index, accelerator.num_processes
    rows = token_ids()[: STEPS * BATCH * world]
    mine = [rows[(step * world + rank) * BATCH:(step * world + rank + 1) * BATCH] for step in range(STEPS)]

    model = llama()
    attachment = autocastgen.attach(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    prepared, optimizer = accelerator.prepare(model, optimizer)
    losses = []
    for batch in mine:
        outputs = prepared(input_ids=batch, labels=batch, use_cache=False)
        accelerator.backward(outputs.loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(outputs.loss.detach())
    attachment.remove()

    reference = llama()
    with autocastgen.attach(reference):
        ddp = torch.nn.parallel.DistributedDataParallel(reference)
        reference_losses = hand_loop(ddp, mine, optimizer=torch.optim.AdamW(reference.parameters(), lr=1e-3))
    found = {
        "distributed_type": str(accelerator.distributed_type),
        "backend": torch.distributed.get_backend(),
        "world": world,
        "losses": difference(losses, reference_losses),
        "weights": difference(parameters(model), parameters(reference)),
    }
    (Path(folder) / f"rank{rank}.json").write_text(json.dumps(found))
    accelerator.end_training()


if __name__ == "__main__":
    main(*sys.argv[1:])
