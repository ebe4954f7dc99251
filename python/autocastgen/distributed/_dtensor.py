"""DTensor rules for the scaler op and the fp8 ops (the package's doc says when they are
registered): ``register_dtensor_ops`` and ``is_dtensor``."""

from __future__ import annotations

import sys
import threading
from typing import Any

import torch

_lock = threading.Lock()
_registered = False

# Note [found_inf under DTensor]
# The unscale is elementwise, so each rank runs it on its local shards as they are; only found_inf
# crosses ranks: an inf in one rank's shard must make every rank skip the step and back off, as
# with one process. So after the local call, found_inf is all-reduced with MAX over every mesh
# dimension on which some gradient is not Replicate (a Shard holds a part of the values, a Partial
# a summand of them: either may hold the only inf). PyTorch combines found_inf for its own
# _amp_ op the same way. One small all-reduce per process group per call: autocastgen.GradScaler
# makes one call per device for all dtypes, so FSDP2 on one mesh costs one 4-byte all-reduce per
# optimizer per step (docs/distributed.md has the count measured).
#
# Why a DTensor op handler and not a sharding strategy (register_sharding): a strategy says how
# outputs are placed, but this op returns nothing and mutates found_inf, a plain tensor; no
# strategy can make DTensor reduce it. A handler also serves every caller of the op (our
# GradScaler, torch.amp.GradScaler patched onto our ops, user code), where unwrapping inside
# GradScaler alone would not. The handler table is DTensor's private `_custom_op_handlers`, the
# table PyTorch's own _amp_ handler sits in (present since 2.2; checked here, with a clear error).


def _local(t: Any) -> Any:
    """A DTensor's local shard (itself, not a copy: the op writes into it); other values unchanged."""
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def _sharded_groups(tensors: Any) -> list[Any]:
    """The process groups of the mesh dimensions on which some of ``tensors`` (DTensors; others are
    skipped) is not Replicate, each once, in the tensors' order: the same on every rank."""
    from torch.distributed.tensor import DTensor, Replicate

    groups: list[Any] = []
    for t in tensors:
        if not isinstance(t, DTensor):
            continue
        for dim, placement in enumerate(t.placements):
            if isinstance(placement, Replicate):
                continue
            group = t.device_mesh.get_group(dim)
            if not any(group is seen for seen in groups):
                groups.append(group)
    return groups


def _max_over(target: Any, groups: list[Any]) -> None:
    """All-reduces ``target`` (a local tensor) with MAX over each of ``groups`` in turn."""
    import torch.distributed as dist

    for group in groups:
        dist.all_reduce(target, op=dist.ReduceOp.MAX, group=group)


def _unscale_handler(op_call: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    bound = _bind(op_call, args, kwargs)
    grads, found_inf = bound["self"], bound["found_inf"]
    with torch.no_grad():  # to_local() of a DTensor is then the local tensor itself
        op_call([_local(g) for g in grads], _local(found_inf), _local(bound["inv_scale"]))
        _max_over(_local(found_inf), _sharded_groups(grads))


# Note [fp8 ops under DTensor]
# The DTensor side of Note [fp8 under tensor parallel] (runtime/torch/fp8/gemm.cpp). Three handlers:
# - fp8_layout_support answers whether the GEMM's operands can be quantised and multiplied shard by
#   shard as they lie. It reads metadata only (placements, global shapes), never local shapes, so
#   every rank gives the same answer and a refused call sends nothing (a rank that quantised while
#   another fell back would wait forever in the amax all-reduce).
# - fp8_quantize (activations, output gradients) and fp8_quantize_weight (weights): the local
#   shard's amax (our fp8_amax op), all-reduced with MAX over each mesh dimension the tensor is
#   sharded on, then the scale rule and the cast of the local shard (fp8_scale_from_amax,
#   fp8_scale_cast): the whole tensor's tensorwise scale, the bits one process computes. A Partial
#   tensor is first made Replicate (its summands' amaxes say nothing of the sum's). A weight that is
#   Replicate on every mesh dimension takes the op itself on its local tensor: the weight cache and
#   delayed scaling then work as in one process (keyed on the local tensor, which an optimizer step
#   updates in place). A sharded weight is current-scaled at every call, without the cache.
# torchao's Float8ColwiseParallel/Float8RowwiseParallel combine a sharded operand's amax across the
# mesh likewise; the cost is one 4-byte all-reduce per sharded operand per quantisation.


def _bind(op_call: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The op's arguments by name, defaults filled in from its schema."""
    bound: dict[str, Any] = {}
    for i, arg in enumerate(op_call._schema.arguments):
        if i < len(args):
            bound[arg.name] = args[i]
        elif arg.name in kwargs:
            bound[arg.name] = kwargs[arg.name]
        else:
            bound[arg.name] = arg.default_value
    return bound


def _is_plain_shard(placement: Any) -> bool:
    from torch.distributed.tensor import Shard

    return type(placement) is Shard  # not _StridedShard, whose local order is not the global one


def _layout_reason(a: Any, b: Any, add: Any, linear: bool, scaling: str) -> str:
    from torch.distributed.tensor import DTensor, Replicate

    tensors = [t for t in (a, b, add) if t is not None]
    if not all(isinstance(t, DTensor) for t in tensors):
        return "DTensor and plain tensor operands mixed"
    mesh = a.device_mesh
    if any(t.device_mesh != mesh for t in tensors):
        return "the operands are on different device meshes"
    # Roles of the dimensions of A [M, K] (a: [*, K] for linear, M its first dimension) and of
    # B [K, N] (b: the weight [N, K] for linear, mat2 [K, N] otherwise).
    a_roles = {0: "M", a.dim() - 1: "K"}
    b_roles = {0: "N", 1: "K"} if linear else {0: "K", 1: "N"}
    allowed = {("R", "R"), ("M", "R"), ("R", "N"), ("K", "K")}
    a_local, b_local = list(a.shape), list(b.shape)
    for i, (pa, pb) in enumerate(zip(a.placements, b.placements)):
        roles = []
        for t, p, table, local in ((a, pa, a_roles, a_local), (b, pb, b_roles, b_local)):
            if isinstance(p, Replicate):
                roles.append("R")
            elif _is_plain_shard(p) and p.dim in table:
                if t.shape[p.dim] % mesh.size(i) != 0:
                    return (f"dimension {p.dim} ({t.shape[p.dim]}) of an operand does not split evenly over "
                            f"mesh dimension {i} ({mesh.size(i)} ranks)")
                local[p.dim] //= mesh.size(i)
                roles.append(table[p.dim])
            else:
                roles.append("?")
        if tuple(roles) not in allowed:
            return (f"placements {pa} x {pb} on mesh dimension {i} are not a layout the float8 GEMM takes per "
                    "shard (Replicate x Replicate, rows x Replicate, Replicate x columns, or both on the "
                    "inner dimension)")
    k = a_local[-1]
    m = 1
    for size in a_local[:-1]:
        m *= size
    n = b_local[0] if linear else b_local[1]
    if k % 16 != 0 or n % 16 != 0:
        return f"the local shards' GEMM is [{m}, {k}] x [{k}, {n}]: K and N must be multiples of 16"
    if torch.is_grad_enabled() and b.requires_grad and m % 16 != 0:
        return f"the local shards' row count M ({m}) is not a multiple of 16 and the right operand needs a gradient"
    if scaling == "delayed":
        for t in (a, b):
            if t.is_leaf and t.requires_grad and not _replicated(t):
                return "delayed scaling of a sharded weight (its amax history would have to be the mesh's)"
    return ""


def _layout_handler(op_call: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    bound = _bind(op_call, args, kwargs)
    return _layout_reason(bound["a"], bound["b"], bound["add"], bool(bound["linear"]), str(bound["scaling"]))


def _contiguous_strides(shape: Any) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(list(shape)):
        strides.append(step)
        step *= max(int(size), 1)
    return tuple(reversed(strides))


def _without_partial(x: Any) -> Any:
    from torch.distributed.tensor import Partial, Replicate

    if any(isinstance(p, Partial) for p in x.placements):
        x = x.redistribute(x.device_mesh, [Replicate() if isinstance(p, Partial) else p for p in x.placements])
    return x


def _wrap(x: Any, data: Any, inv: Any) -> tuple[Any, Any]:
    """The local fp8 shard and its 0-dim dequantisation factor as DTensors laid out like ``x``."""
    from torch.distributed.tensor import DTensor, Replicate

    mesh = x.device_mesh
    return (
        DTensor.from_local(data, mesh, x.placements, run_check=False, shape=x.shape,
                           stride=_contiguous_strides(x.shape)),
        DTensor.from_local(inv, mesh, [Replicate()] * mesh.ndim, run_check=False),
    )


def _quantize_sharded(x: Any, dtype: Any, margin: int, fused: bool) -> tuple[Any, Any]:
    """Current scaling of a DTensor with the whole tensor's amax (Note [fp8 ops under DTensor])."""
    ops = torch.ops.autocastgen
    local = _local(x)
    amax = ops.fp8_amax(local, fused)
    _max_over(amax, _sharded_groups([x]))  # its Shard dimensions: Partials were made Replicate
    scale, inv = ops.fp8_scale_from_amax(amax, dtype, margin, fused)
    data, _ = ops.fp8_scale_cast(local, scale, dtype, fused)
    return _wrap(x, data, inv)


def _replicated(x: Any) -> bool:
    from torch.distributed.tensor import Replicate

    return all(isinstance(p, Replicate) for p in x.placements)


def _quantize_handler(op_call: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    bound = _bind(op_call, args, kwargs)
    with torch.no_grad():
        x = _without_partial(bound["x"])
        if _replicated(x):
            return _wrap(x, *op_call(_local(x), bound["dtype"], bound["margin"], bound["fused"]))
        return _quantize_sharded(x, bound["dtype"], bound["margin"], bound["fused"])


def _quantize_weight_handler(op_call: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    bound = _bind(op_call, args, kwargs)
    with torch.no_grad():
        w = _without_partial(bound["weight"])
        if _replicated(w):  # the op on the local tensor: its cache and delayed state as in one process
            return _wrap(w, *op_call(_local(w), bound["dtype"], bound["scaling"], bound["amax_history_len"],
                                     bound["margin"], bound["cache"], bound["fused"]))
        if bound["scaling"] != "current":
            raise RuntimeError(
                "autocastgen fp8_quantize_weight: delayed scaling of a sharded DTensor weight is not supported "
                "(the fp8 policy runs such GEMMs in the lower-precision dtype; fp8_layout_support says so)")
        return _quantize_sharded(w, bound["dtype"], bound["margin"], bound["fused"])


def register_dtensor_ops() -> None:
    """Lets DTensor run ``torch.ops.autocastgen.non_finite_check_and_unscale_`` (Note [found_inf
    under DTensor]) and the fp8 ops of tensor-parallel GEMMs (Note [fp8 ops under DTensor]).
    Idempotent; imports ``torch.distributed.tensor``."""
    global _registered
    with _lock:
        if _registered:
            return
        from torch.distributed.tensor import DTensor

        handlers = getattr(getattr(DTensor, "_op_dispatcher", None), "_custom_op_handlers", None)
        if not isinstance(handlers, dict):
            raise RuntimeError(
                f"autocastgen.distributed: this torch ({torch.__version__}) has no DTensor op handler table "
                "(DTensor._op_dispatcher._custom_op_handlers); unscale each gradient's to_local() instead"
            )
        ops = torch.ops.autocastgen
        handlers[ops.non_finite_check_and_unscale_.default] = _unscale_handler
        handlers[ops.fp8_layout_support.default] = _layout_handler
        handlers[ops.fp8_quantize.default] = _quantize_handler
        handlers[ops.fp8_quantize_weight.default] = _quantize_weight_handler
        _registered = True


def is_dtensor(t: object) -> bool:
    """Whether ``t`` is a DTensor, without importing torch.distributed.tensor when nothing could be one."""
    if type(t) is torch.Tensor or "torch.distributed.tensor" not in sys.modules:
        return False
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)
