"""A user's own custom op, as a library would define it (test_export_custom_ops.py; docs/export.md,
"Custom ops"): ``acg_user::gated_gelu(x, weight) = gelu(x @ weight) * sigmoid(x)``, made with
``torch.library.custom_op`` and a fake kernel, and no autocast kernel of its own (autocast's
fallthrough runs it in whatever dtype its inputs come in). A process that loads a program calling it
imports this module, and nothing of autocastgen.
"""
# No `from __future__ import annotations`: torch 2.4's custom_op reads the annotations as objects,
# and strings are what it refuses (infer_schema).

import torch


@torch.library.custom_op("acg_user::gated_gelu", mutates_args=())
def gated_gelu(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x @ weight) * torch.sigmoid(x)


@gated_gelu.register_fake
def _(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x.new_empty(*x.shape[:-1], weight.shape[1])


class GatedBlock(torch.nn.Module):
    """A linear layer, the custom op on its output with a weight of its own, a linear head."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.proj = torch.nn.Linear(width, width)
        self.gate = torch.nn.Parameter(torch.randn(width, width, generator=generator) / width ** 0.5)
        self.head = torch.nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.ops.acg_user.gated_gelu(self.proj(x), self.gate))
