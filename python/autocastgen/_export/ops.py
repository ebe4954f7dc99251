"""Which ops an exported program keeps and which it holds decomposed (docs/export.md).

Note [which ops a program keeps]
Eager autocast decides a call at the first op that reaches the device's autocast key. An op with
a kernel there (PyTorch's, a generated wrapper, a runtime policy) decides, and the op's
decomposition below runs with autocast excluded. An op without one falls through; a
CompositeImplicitAutograd op then decomposes, and its pieces reach the autocast key again and are
decided there (a CPU LSTM: ``aten::lstm`` has no autocast kernel, its ``mkldnn_rnn_layer`` is on
the lower-precision list). torch.export's ``run_decompositions({})`` keeps every functional
CompositeImplicitAutograd op whole, which would lose the second kind of decision: the program
would run the LSTM in float32. So the re-trace keeps a CompositeImplicitAutograd op only when the
device's autocast key has a kernel of its own for it; every other one is decomposed by its C++
CompositeImplicitAutograd kernel, the one eager runs (not the Python decompositions PyTorch's
tracer prefers, which compute differently: PyTorch's Python LSTM is a loop of cells).

One family is decomposed in Python: the ``.vec`` overloads of the upsample ops (``F.interpolate``).
Their C++ kernel computes the output size from the input's concrete sizes, which specializes a
dynamic dimension of the trace (MobileViT exported with a dynamic batch: "Guard failed:
args_0.size()[0] == 2"; PyTorch's own ``run_decompositions`` given that kernel specializes the same).
``_upsample_vec`` takes the kernel's steps on the symbolic sizes: the output size, the scale of each
spatial dimension, then the ``.default`` overload, the kernel eager's composite calls, so the bits
are eager's (tests/python/export/test_export_corpus.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, cast

import torch
from torch._decomp.decompositions import get_scale_value, upsample_compute_output_size

from .places import Frames

_CIA = torch._C.DispatchKey.CompositeImplicitAutograd

# c10's autocast dispatch key of each device type that has one.
_AUTOCAST_KEYS = {
    "cpu": "AutocastCPU", "cuda": "AutocastCUDA", "xpu": "AutocastXPU", "mps": "AutocastMPS",
    "hpu": "AutocastHPU", "xla": "AutocastXLA", "ipu": "AutocastIPU", "mtia": "AutocastMTIA",
    "privateuseone": "AutocastPrivateUse1",
}


def autocast_key(device: str) -> str:
    try:
        return _AUTOCAST_KEYS[device]
    except KeyError:
        raise ValueError(f"autocastgen.export: device type '{device}' has no autocast key "
                         f"(one of: {', '.join(_AUTOCAST_KEYS)})") from None


def decided_at_itself(name: str, key: str) -> bool:
    """Whether the op has a kernel of its own on the autocast key (not the key's fallthrough)."""
    if not torch._C._dispatch_has_kernel_for_dispatch_key(name, key):
        return False
    return not torch._C._dispatch_kernel_for_dispatch_key_is_fallthrough(name, key)


def _cpp_composite(op: torch._ops.OpOverload, key: torch._C.DispatchKey, frames: Frames, *args: Any,
                   **kwargs: Any) -> Any:
    """The op's C++ CompositeImplicitAutograd kernel, its pieces dispatched as eager dispatches
    them. PyTorch's Python dispatcher (on while export traces) runs a kernel with every key above
    it excluded on the thread, the autocast key included, so the pieces would pass no autocast
    kernel; in eager they do (Note [which ops a program keeps]). Where the graph runs with autocast
    on (``frames.autocast_on``: read before the handler excluded the key; off in the body of a
    ``torch.autocast(enabled=False)`` inside forward), the key is let through for the kernel's
    calls."""
    if not frames.autocast_on or not torch._C._dispatch_tls_is_dispatch_key_excluded(key):
        return op._op_dk(_CIA, *args, **kwargs)
    torch._C._dispatch_tls_set_dispatch_key_excluded(key, False)
    try:
        return op._op_dk(_CIA, *args, **kwargs)
    finally:
        torch._C._dispatch_tls_set_dispatch_key_excluded(key, True)


def _upsample_vec(op: torch._ops.OpOverload, key: torch._C.DispatchKey, frames: Frames, *args: Any,
                  **kwargs: Any) -> Any:
    """An upsample ``.vec`` overload as its C++ kernel computes it, on symbolic sizes (Note [which ops
    a program keeps]): ``(input, output_size[, align_corners], scale_factors)`` to the ``.default``
    overload's ``(input, output size[, align_corners], scale of each spatial dimension)``; the
    autocast key let through as _cpp_composite lets it through."""
    bound = dict(zip([argument.name for argument in op._schema.arguments], args))
    bound.update(kwargs)
    source = bound["input"]
    scale_factors = bound.get("scale_factors")
    size = upsample_compute_output_size(source.size(), bound.get("output_size"), scale_factors)
    scales = [get_scale_value(scale_factors, i) for i in range(source.dim() - 2)]
    middle = [bound["align_corners"]] if "align_corners" in bound else []
    default = getattr(torch.ops.aten, op._schema.name.split("::")[-1]).default
    if not frames.autocast_on or not torch._C._dispatch_tls_is_dispatch_key_excluded(key):
        return default(source, size, *middle, *scales)
    torch._C._dispatch_tls_set_dispatch_key_excluded(key, False)
    try:
        return default(source, size, *middle, *scales)
    finally:
        torch._C._dispatch_tls_set_dispatch_key_excluded(key, True)


def decompositions(frames: Frames) -> dict[torch._ops.OperatorBase, Callable[..., Any]]:
    """The run_decompositions table of Note [which ops a program keeps]: every functional
    CompositeImplicitAutograd op the autocast key does not decide, by its C++ kernel where it has
    one."""
    device = frames.device
    from torch._export.utils import _collect_all_valid_cia_ops

    key = autocast_key(device)
    dispatch_key = getattr(torch._C.DispatchKey, key)
    table: dict[torch._ops.OperatorBase, Callable[..., Any]] = {}
    for op in _collect_all_valid_cia_ops():
        name = op.name()
        if decided_at_itself(name, key):
            continue
        if "upsample" in name and name.endswith(".vec"):
            table[op] = functools.partial(_upsample_vec, cast(torch._ops.OpOverload, op), dispatch_key, frames)
        elif torch._C._dispatch_has_kernel_for_dispatch_key(name, _CIA):
            # _collect_all_valid_cia_ops gives OpOverloads, typed as their base class.
            table[op] = functools.partial(_cpp_composite, cast(torch._ops.OpOverload, op), dispatch_key, frames)
        elif _CIA in op.py_kernels:
            table[op] = op.py_kernels[_CIA]
    return table
