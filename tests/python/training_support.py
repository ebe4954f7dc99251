"""What the training frameworks' tests share (tests/python/integrations, tests/distributed): a tiny Llama
built from a config (no download), its batches, the policies (precision rules and a place, fp8) and
the hand-written loops every framework's run is compared with, bit for bit (exact.py).

The hand loops are what a user writes without a framework: ``torch.autocast`` around the forward,
``loss.backward()``, the optimizer's step, with the policy loaded by ``autocastgen.load_policy`` and the
model attached by ``autocastgen.attach`` (its ``modules:`` rules). Each framework's test sets the
framework up to do the same arithmetic (the optimizer, the learning-rate schedule, clipping, which
rows form a batch) and says where it differs from the plainest loop.
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
CPU_POLICY = ROOT / "schemas" / "policies" / "cpu.yaml"

VOCAB, SEQUENCE, ROWS = 128, 16, 16


def llama_config():
    import transformers

    # head_dim 8; k and v project to 16 columns: every linear's dimensions are multiples of 16,
    # which fp8's GEMMs need (docs/fp8.md).
    return transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                    tie_word_embeddings=False)


def llama(seed: int = 0) -> torch.nn.Module:
    """The same initial weights for the same seed."""
    import transformers

    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(llama_config())


def token_ids() -> torch.Tensor:
    """ROWS sequences of SEQUENCE token ids, the training data of every test."""
    return torch.randint(0, VOCAB, (ROWS, SEQUENCE), generator=torch.Generator().manual_seed(1))


def rules_policy(prefix: str = "") -> str:
    """The shipped CPU policy with a precision rule (silu in float32 under bfloat16 only) and a place
    (the head in float32), module paths below ``prefix`` (a LightningModule holding the Llama as
    ``self.model`` names its head ``model.lm_head``)."""
    return (f"extends: {CPU_POLICY}\n"
            "lists:\n"
            "  fp32:\n"
            "    - {op: silu, dtypes: [bfloat16]}\n"
            "modules:\n"
            f"  {prefix}lm_head: fp32\n")


# Every linear in float8 (tensorwise, current scaling), the rest of the shipped CPU lists out of it:
# a policy file of its own, as the fp8 tests write them (tests/python/places/test_fp8_places.py).
FP8_POLICY = ("autocast: {device: cpu, lower_precision: [bfloat16], fp8: {scaling: current}}\n"
              "lists:\n"
              "  fp8: [linear]\n"
              "  lower_precision_fp: [scaled_dot_product_attention]\n")


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def parameters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def hand_loop(model: torch.nn.Module, batches: Iterable[torch.Tensor], *, dtype: torch.dtype = torch.bfloat16,
              optimizer: torch.optim.Optimizer | None = None, scheduler=None, clip: float | None = None,
              scaler=None, count_items: bool = False, cache_enabled: bool = True) -> list[torch.Tensor]:
    """Trains ``model`` on ``batches`` (each one its inputs and labels) under ``torch.autocast("cpu",
    dtype)``, without the key-value cache (training needs none; the Trainer turns it off:
    ``TrainingArguments.use_cache``); returns each step's loss. ``count_items``: the loss is the sum over the batch's
    predicted tokens divided by their number, as the Trainer asks transformers' loss for it
    (``num_items_in_batch``) instead of the mean."""
    optimizer = optimizer or torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    model.train()
    for batch in batches:
        kwargs = {"num_items_in_batch": batch[:, 1:].ne(-100).sum()} if count_items else {}
        with torch.autocast("cpu", dtype=dtype, cache_enabled=cache_enabled):
            loss = model(input_ids=batch, labels=batch, use_cache=False, **kwargs).loss
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
        else:
            loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        if scheduler is not None:
            scheduler.step()
        optimizer.zero_grad()
        losses.append(loss.detach())
    return losses
