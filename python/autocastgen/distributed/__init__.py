"""autocastgen under torch.distributed: DTensor rules for the scaler op and the fp8 ops.

``register_dtensor_ops()`` teaches DTensor how to run ``torch.ops.autocastgen.non_finite_check_and_unscale_``
on DTensor gradients (FSDP2, tensor parallel) and the fp8 ops on tensor-parallel shards
(``fp8_layout_support``, ``fp8_quantize``, ``fp8_quantize_weight``: Note [fp8 under tensor parallel]
in runtime/torch/fp8/gemm.cpp). ``autocastgen.GradScaler`` calls it the first time it sees a DTensor,
and the package calls it on import when ``torch.distributed.tensor`` is loaded already; otherwise
call it once after importing ``torch.distributed.tensor``. Float8 all-gather for FSDP2:
``enable_float8_all_gather``, ``precompute_float8_scales``. See docs/distributed.md.
"""

from ._dtensor import is_dtensor, register_dtensor_ops
from ._float8_all_gather import enable_float8_all_gather, precompute_float8_scales

__all__ = ["enable_float8_all_gather", "is_dtensor", "precompute_float8_scales", "register_dtensor_ops"]
