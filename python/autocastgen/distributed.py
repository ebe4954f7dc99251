"""autocastgen under torch.distributed: DTensor gradients (FSDP2, tensor parallel) for the scaler op.

``register_dtensor_ops()`` teaches DTensor how to run ``torch.ops.autocastgen.non_finite_check_and_unscale_``
on DTensor gradients; ``autocastgen.GradScaler`` calls it the first time it sees one, and the
package calls it on import when ``torch.distributed.tensor`` is loaded already. Code that calls the
op itself on DTensors before either should call it once. See docs/distributed.md.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import torch

__all__ = ["register_dtensor_ops", "is_dtensor"]

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


def _unscale_handler(op_call: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor, Replicate

    bound = dict(zip(("self", "found_inf", "inv_scale"), args))
    bound.update(kwargs)
    grads, found_inf, inv_scale = bound["self"], bound["found_inf"], bound["inv_scale"]
    with torch.no_grad():  # to_local() of a DTensor is then the local tensor itself
        op_call([_local(g) for g in grads], _local(found_inf), _local(inv_scale))
        groups: list[Any] = []
        for g in grads:
            if not isinstance(g, DTensor):
                continue
            for dim, placement in enumerate(g.placements):
                if isinstance(placement, Replicate):
                    continue
                group = g.device_mesh.get_group(dim)
                if not any(group is seen for seen in groups):
                    groups.append(group)
        target = _local(found_inf)
        for group in groups:  # the same order on every rank: the gradients' order
            dist.all_reduce(target, op=dist.ReduceOp.MAX, group=group)


def register_dtensor_ops() -> None:
    """Lets DTensor run ``torch.ops.autocastgen.non_finite_check_and_unscale_`` (Note [found_inf
    under DTensor]). Idempotent; imports ``torch.distributed.tensor``."""
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
        handlers[torch.ops.autocastgen.non_finite_check_and_unscale_.default] = _unscale_handler
        _registered = True


def is_dtensor(t: object) -> bool:
    """Whether ``t`` is a DTensor, without importing torch.distributed.tensor when nothing could be one."""
    if type(t) is torch.Tensor or "torch.distributed.tensor" not in sys.modules:
        return False
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)
