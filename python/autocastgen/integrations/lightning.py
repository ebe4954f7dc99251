"""autocastgen in Lightning: ``AutocastgenPrecision``, a precision plugin that trains under a policy
(docs/training.md, "Lightning").

    from autocastgen.integrations.lightning import AutocastgenPrecision
    trainer = lightning.pytorch.Trainer(plugins=[AutocastgenPrecision("policy.yaml", torch.bfloat16)])

It is Lightning's ``MixedPrecision`` (what ``precision="bf16-mixed"`` / ``"16-mixed"`` make) with the
policy in force: the forward, training, validation and prediction steps run under the same
``torch.autocast`` as Lightning's, which the policy's kernels follow; float16 scales the loss with
``autocastgen.GradScaler`` (PyTorch's scaler's bits; docs/python.md). Everything else, the scaler's
place in the optimizer step, clipping, checkpoints (the scaler's state dict) and ``trainer.precision``,
is Lightning's own. Lightning's ``MixedPrecision(precision, device, scaler=autocastgen.GradScaler(...))``
takes our scaler as well, without a policy.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from contextlib import contextmanager
from typing import Any

import torch

from ..grad_scaler import GradScaler
from ._packages import MixedPrecision
from ._policy import PolicyRun

__all__ = ["AutocastgenPrecision"]

_DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "bf16-mixed": torch.bfloat16,
           "float16": torch.float16, "16": torch.float16, "16-mixed": torch.float16}


def _dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype) and dtype in (torch.bfloat16, torch.float16):
        return dtype
    if isinstance(dtype, str) and dtype in _DTYPES:
        return _DTYPES[dtype]
    raise ValueError(f"AutocastgenPrecision: dtype must be torch.bfloat16 or torch.float16 (or one of "
                     f"{', '.join(repr(name) for name in _DTYPES)}), got {dtype!r}")


class AutocastgenPrecision(MixedPrecision):
    """Mixed precision under an autocastgen policy, for ``lightning.pytorch.Trainer(plugins=[...])``.

    Args:
        policy: a policy file, YAML text, or None (the kernels loaded already: ``load_policy`` done
            by hand, ``AUTOCASTGEN_POLICY``, a compiled policy). Loaded in each process that trains
            (Note [a policy per process] in autocastgen/integrations/_policy.py).
        dtype: ``torch.bfloat16`` or ``torch.float16`` (or ``"bf16-mixed"``, ``"16-mixed"``, ...).
        device: the device type autocast runs on; default: the policy file's ``autocast: device:``,
            else ``"cuda"`` where CUDA is available, else ``"cpu"``. A policy file for another
            device is a ValueError.
        scaler: float16's loss scaler (default ``autocastgen.GradScaler(device)``); bfloat16 takes none.
        attach: attach the LightningModule (``autocastgen.attach``) so that the policy's
            ``modules:`` rules apply, paths as ``named_modules()`` of the LightningModule names them
            (``model.layers.0.mlp`` for a module that holds the model as ``self.model``); default:
            when the loaded rules scope to modules.
    """

    def __init__(
        self,
        policy: str | os.PathLike[str] | None = None,
        dtype: torch.dtype | str = torch.bfloat16,
        device: str | None = None,
        scaler: Any = None,
        *,
        attach: bool | None = None,
    ) -> None:
        self.dtype = _dtype(dtype)
        self.policy = PolicyRun(policy, attach)
        if device is None:
            device = self.policy.device() or ("cuda" if torch.cuda.is_available() else "cpu")
        else:
            self.policy.check_device(device, "AutocastgenPrecision")
        if scaler is None and self.dtype == torch.float16:
            scaler = GradScaler(device)
        super().__init__("16-mixed" if self.dtype == torch.float16 else "bf16-mixed", device, scaler=scaler)

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Lightning's first call with the LightningModule, in the training process and before DDP
        wraps it: the policy is loaded and the module attached here."""
        self.policy.start(module)
        converted: torch.nn.Module = super().convert_module(module)
        return converted

    @contextmanager
    def forward_context(self) -> Generator[None, None, None]:
        """Lightning's autocast (``autocast_context_manager``) with the policy loaded in this process."""
        self.policy.load()
        with self.autocast_context_manager():
            yield

    def teardown(self) -> None:
        """Removes the attachment at the end of ``fit``/``validate``/... (the policy stays loaded)."""
        self.policy.stop()
        super().teardown()
