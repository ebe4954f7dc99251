"""Running the model for the advisor: attached, seeded alike and under autocast in every run; the
GEMM calls and FLOPs that ran in the lower-precision dtype; the check of a run against the float32
run (Note [default tolerance])."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..places import attach

# Default tolerances (Note [default tolerance]): rtol, and atol as a share of max |reference|.
_DEFAULT_RTOL = {"float16": 1e-2, "bfloat16": 4e-2}


def _leaves(output: Any) -> list[Any]:
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(output) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def _default_check(rtol: float, atol: float | None) -> Callable[[Any, Any], tuple[bool, str]]:
    """Note [default tolerance]: every floating output finite and within atol + rtol * |ref| of the
    float32 output, elementwise; atol defaults to rtol * max |ref| of each output (so the check is
    relative to the output's scale and near-zero elements do not decide alone)."""
    import torch

    def check(reference: Any, output: Any) -> tuple[bool, str]:
        refs, outs = _leaves(reference), _leaves(output)
        if len(refs) != len(outs):
            return False, f"{len(outs)} floating outputs, the float32 run has {len(refs)}"
        worst = 0.0
        for ref, out in zip(refs, outs):
            if ref.shape != out.shape:
                return False, f"an output of shape {list(out.shape)}, the float32 run's is {list(ref.shape)}"
            out = out.detach().float()
            ref = ref.detach().float()
            if not bool(torch.isfinite(out).all()):
                return False, "non-finite output"
            scale = float(ref.abs().max()) if ref.numel() else 0.0
            allowed = (atol if atol is not None else rtol * scale) + rtol * ref.abs()
            excess = float(((out - ref).abs() / allowed.clamp_min(1e-30)).max()) if ref.numel() else 0.0
            worst = max(worst, excess)
        return worst <= 1.0, f"error {worst:.3g} of the tolerance"

    return check


class _GemmCounter:
    """Counts GEMM calls and FLOPs by dtype below autocast (a TorchDispatchMode over PyTorch's FLOP
    formulas, torch.utils.flop_counter): what actually ran, whichever op autocast saw."""

    def __init__(self, lower: Any) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils.flop_counter import flop_registry

        counts = {"gemm_calls": 0.0, "lower_calls": 0.0, "gemm_flops": 0.0, "lower_flops": 0.0}
        self.counts = counts

        class Mode(TorchDispatchMode):
            def __init__(self) -> None:
                super().__init__()  # type: ignore[no-untyped-call]  # torch's, unannotated (not excluded: a constructor)

            def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                                   kwargs: dict[str, Any] | None = None) -> Any:
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                formula = flop_registry.get(func._overloadpacket)
                if formula is not None and "backward" not in func._overloadpacket.__name__:
                    flops = float(formula(*args, **kwargs, out_val=out))
                    dtype = next((a.dtype for a in args if hasattr(a, "dtype") and a.is_floating_point()), None)
                    counts["gemm_calls"] += 1
                    counts["gemm_flops"] += flops
                    if dtype == lower:
                        counts["lower_calls"] += 1
                        counts["lower_flops"] += flops
                return out

        self.mode = Mode()

    def share(self) -> dict[str, float]:
        c = self.counts
        return {"calls": c["lower_calls"] / c["gemm_calls"] if c["gemm_calls"] else 0.0,
                "flops": c["lower_flops"] / c["gemm_flops"] if c["gemm_flops"] else 0.0, **c}


@dataclass
class _Runner:
    model: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    device: str
    dtype: Any

    def __call__(self, counter: _GemmCounter | None = None) -> Any:
        import torch

        devices: list[int] | None = [] if self.device == "cpu" else None
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.no_grad())
            stack.enter_context(torch.random.fork_rng(devices=devices, device_type=self.device))
            stack.enter_context(attach(self.model))
            stack.enter_context(torch.autocast(self.device, dtype=self.dtype))
            if counter is not None:
                stack.enter_context(counter.mode)
            torch.manual_seed(0)  # dropout and other randomness: the same in every run
            return self.model(*self.args, **self.kwargs)


def _split_inputs(inputs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(inputs, Mapping):
        return (), dict(inputs)
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    return (inputs,), {}


def _device_of(model: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    import torch
    from torch.utils._pytree import tree_leaves

    for leaf in tree_leaves((list(args), dict(kwargs))):
        if isinstance(leaf, torch.Tensor):
            return leaf.device.type
    for parameter in model.parameters():
        device: str = parameter.device.type
        return device
    return "cpu"
