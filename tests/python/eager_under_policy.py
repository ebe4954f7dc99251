"""The reference an exported or baked program must equal: the model as eager code runs it under a
policy (test_export.py, test_bake.py). Imported after built_tree.require_built: it imports autocastgen."""
from __future__ import annotations

import warnings

import torch

import autocastgen


def eager(model: torch.nn.Module, x: torch.Tensor, dtype: torch.dtype, policy: str | None) -> torch.Tensor:
    """The model under the policy (None: PyTorch's own lists), as eager code runs it: loaded,
    attached, inside torch.autocast."""
    if policy is not None:
        autocastgen.load_policy(policy)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="autocastgen.attach: .* matches no module")
            with autocastgen.attach(model), torch.autocast("cpu", dtype=dtype):
                return model(x)
    finally:
        autocastgen.clear_runtime_policies()
