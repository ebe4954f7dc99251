"""FSDP2 all-gathers the weights of the fp8 policy's linears as float8 (Note [float8 all-gather]).

Public through autocastgen.distributed: enable_float8_all_gather(model) before fully_shard, and
precompute_float8_scales(model) after each optimizer step.

Note [float8 all-gather]
Under FSDP2 each forward all-gathers a linear's float32 weight, and the fp8 policy then quantises
the whole weight (current scaling: one amax over it, one scale, a saturating cast). Quantising is
elementwise once the scale is known, and the whole weight's amax is the MAX of the shards' amaxes;
so each rank can quantise its own shard with the whole weight's scale before the all-gather, and
the gathered float8 weight is, bit for bit, the one the plain path makes after it: a quarter of
float32's bytes on the wire. FSDP2's extension points do it (torchao's Float8Linear uses the same):
- the sharded parameter's local tensor is a _Float8ShardWeight, a wrapper around the float32
  shard that behaves as it for every op (FSDP2's sharding, the optimizer, state_dict) and whose
  fsdp_pre_all_gather gives the float8 shard (viewed as bytes: gloo has no float8, and FSDP2 mixes
  it with the float32 biases as bytes anyway) and the scale's inverse as metadata;
- fsdp_post_all_gather makes the unsharded parameter a _Float8GatheredWeight: the float8 weight and
  its inverse scale, float32 in shape and dtype. The policy's fp8 GEMM meets it as a tensor subclass
  (Note [fp8 under tensor parallel] in runtime/torch/fp8/gemm.cpp): the layout rule answers that it
  runs as one tensor, and fp8_quantize_weight returns the gathered data and scale instead of
  quantising again. Its weight gradient is a plain float32 tensor, which FSDP2 reduce-scatters as
  usual. Any other use of the gathered weight is refused with a message: it is data for the fp8
  GEMM only.
The whole weight's amax needs an all-reduce (MAX) across the shard group; precompute_float8_scales
does it for every such weight in one all-reduce after the optimizer step, and a shard whose
scale was not precomputed for its current values (its version counter moved since) does its own at
the all-gather: correct either way, one collective per weight more without the call.
Current scaling with tensorwise scales only: a delayed-scaling history of a sharded weight would
need mesh-wide amaxes (the recipe is refused at set-up). Not with tensor parallel either (Note
[float8 all-gather and tensor parallel]).

Note [float8 all-gather and tensor parallel]
On an FSDP2 x tensor-parallel mesh, a weight enable_float8_all_gather converted would be split by
tensor parallel first, and each rank's fsdp_pre_all_gather would quantise with the MAX of its
FSDP group's amaxes: the scale of its tensor-parallel shard, not the whole weight's, and the
gathered weight a DTensor on the tp dimension wrapping a _Float8GatheredWeight, which the DTensor
handlers cannot quantise (the first forward failed in to_local(), with a message about the
policy). So the combination is refused when the model is set up, whichever is called first:
- enable_float8_all_gather refuses a weight that is a DTensor already;
- parallelize_module called after it distributes the converted weight with distribute_tensor,
  which scatters the pieces from rank 0 (c10d scatter_; FSDP2 never runs a collective on a shard
  when it shards): the shard refuses that op, naming the weight's shape;
- a backstop for distribute_tensor(src_data_rank=None), which sends nothing: at the first
  all-gather, the parameter FSDP2 unshards is not the whole weight the shard was made from.
Without enable_float8_all_gather such a model trains (tests/distributed/test_dist_fp8_llama_2d.py):
FSDP2 all-gathers float32 and the fp8 policy quantises each tensor-parallel shard with the whole
weight's scale (Note [fp8 ops under DTensor] in _dtensor.py).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_leaves, tree_map

__all__ = ["enable_float8_all_gather", "precompute_float8_scales"]

aten = torch.ops.aten
_FP8 = {torch.float8_e4m3fn: "float8_e4m3fn", torch.float8_e5m2: "float8_e5m2"}

# Ops whose outputs on a shard are the shard again (views and copies FSDP2 makes while sharding,
# the copy its parameter loading makes); every other op returns plain tensors (the optimizer's).
_SHARD_PRESERVING = {
    aten.split.Tensor, aten.split_with_sizes.default, aten.new_zeros.default, aten.slice.Tensor,
    aten.narrow.default, aten.view.default, aten._unsafe_view.default, aten.as_strided.default,
    aten.detach.default, aten.alias.default, aten.clone.default, aten._to_copy.default, aten.copy_.default,
    aten.empty_like.default,
}


class _Recipe:
    """What both subclasses of one weight share: the forward fp8 dtype, the scale's margin, and the
    whole weight's shape when enable_float8_all_gather converted it."""

    def __init__(self, dtype: torch.dtype, margin: int, shape: tuple[int, ...]) -> None:
        self.dtype, self.margin, self.shape = dtype, margin, shape


def _tensor_parallel_refusal(shape: tuple[int, ...], what: str) -> RuntimeError:
    return RuntimeError(
        f"autocastgen float8 all-gather: {what} a weight of shape {shape} that enable_float8_all_gather "
        "converted: float8 all-gather together with tensor parallel is not supported (each rank would quantise "
        "with its tensor-parallel shard's scale, not the whole weight's). On an FSDP2 x tensor-parallel mesh "
        "leave enable_float8_all_gather out: FSDP2 then all-gathers float32 and the fp8 policy still quantises "
        "each tensor-parallel shard with the whole weight's scale")


class _Float8ShardWeight(torch.Tensor):
    """A float32 weight shard that FSDP2 all-gathers as float8 (Note [float8 all-gather])."""

    _inner: torch.Tensor
    _recipe: _Recipe
    _precomputed: tuple[int, torch.Tensor, torch.Tensor] | None  # (inner version, scale, 1/scale)

    @staticmethod
    def __new__(cls, inner: torch.Tensor, recipe: _Recipe) -> _Float8ShardWeight:
        return torch.Tensor._make_wrapper_subclass(
            cls, inner.size(), strides=inner.stride(), storage_offset=inner.storage_offset(), dtype=inner.dtype,
            device=inner.device, layout=inner.layout, requires_grad=inner.requires_grad)

    def __init__(self, inner: torch.Tensor, recipe: _Recipe) -> None:
        self._inner, self._recipe, self._precomputed = inner, recipe, None

    # torch types Tensor.__repr__ without its keyword's name, which no override can then match.
    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        return f"_Float8ShardWeight({self._inner!r}, all-gathered as {_FP8[self._recipe.dtype]})"

    # PyTorch's idiom for a wrapper subclass; typed as a plain function, where Tensor's is a classmethod.
    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @classmethod  # Tensor's is the disabled impl, a plain function: the dispatcher calls a classmethod
    def __torch_dispatch__(  # type: ignore[override]
            cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        recipe = next(a._recipe for a in tree_leaves((args, kwargs)) if isinstance(a, cls))
        if func is torch.ops.c10d.scatter_.default:  # Note [float8 all-gather and tensor parallel]
            raise _tensor_parallel_refusal(recipe.shape, "tensor parallel (distribute_tensor) is splitting")
        unwrap = lambda t: t._inner if isinstance(t, cls) else t  # noqa: E731
        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
        if func not in _SHARD_PRESERVING:
            return out
        if func is aten.copy_.default:
            return args[0]
        return tree_map(lambda t: cls(t, recipe) if isinstance(t, torch.Tensor) else t, out)

    def __tensor_flatten__(self) -> tuple[list[str], Any]:
        return ["_inner"], self._recipe

    @staticmethod
    def __tensor_unflatten__(inner: dict[str, torch.Tensor], recipe: _Recipe, outer_size: Any,
                             outer_stride: Any) -> _Float8ShardWeight:
        return _Float8ShardWeight(inner["_inner"], recipe)

    def _scales(self, group: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """(scale, 1/scale) of the whole weight: precomputed for these values, else one all-reduce."""
        if self._precomputed is not None and self._precomputed[0] == self._inner._version:
            return self._precomputed[1], self._precomputed[2]
        import torch.distributed as dist

        ops = torch.ops.autocastgen
        amax = ops.fp8_amax(self._inner.detach())
        dist.all_reduce(amax, op=dist.ReduceOp.MAX, group=group)
        scales: tuple[torch.Tensor, torch.Tensor] = ops.fp8_scale_from_amax(amax, self._recipe.dtype,
                                                                            self._recipe.margin)
        return scales

    def fsdp_pre_all_gather(self, mesh: Any, outer_size: Any, outer_stride: Any, module: Any,
                            mp_policy: Any) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        if mesh.ndim != 1:
            raise RuntimeError("autocastgen float8 all-gather: FSDP2 on a mesh of several dimensions (HSDP) is not "
                               "supported: fully_shard with a 1-D mesh, or without enable_float8_all_gather")
        if tuple(outer_size) != self._recipe.shape:  # Note [float8 all-gather and tensor parallel]
            raise _tensor_parallel_refusal(self._recipe.shape, f"FSDP2 is all-gathering a part {tuple(outer_size)} of")
        scale, inv = self._scales(mesh.get_group())
        with torch.no_grad():
            data, _ = torch.ops.autocastgen.fp8_scale_cast(self._inner, scale, self._recipe.dtype)
        return (data.view(torch.uint8),), (inv,)

    def fsdp_post_all_gather(self, all_gather_outputs: tuple[torch.Tensor, ...], metadata: Any,
                             param_dtype: torch.dtype, *, out: torch.Tensor | None = None,
                             ) -> tuple[_Float8GatheredWeight, tuple[torch.Tensor, ...]] | None:
        (gathered,) = all_gather_outputs
        (inv,) = metadata
        data = gathered.view(self._recipe.dtype)
        if out is not None:  # later steps: FSDP2 refilled the same buffer; the scale is new
            if not isinstance(out, _Float8GatheredWeight):
                raise RuntimeError(f"autocastgen float8 all-gather: FSDP2 passed a {type(out).__name__} to refill")
            out._inv_scale = inv
            return None
        return _Float8GatheredWeight(data, inv, param_dtype, self._recipe), (data,)


class _Float8GatheredWeight(torch.Tensor):
    """The unsharded weight after a float8 all-gather: its fp8 data and 1/scale, for the fp8 GEMM."""

    _data: torch.Tensor
    _inv_scale: torch.Tensor
    _recipe: _Recipe

    @staticmethod
    def __new__(cls, data: torch.Tensor, inv_scale: torch.Tensor, dtype: torch.dtype, recipe: _Recipe,
                requires_grad: bool = False) -> _Float8GatheredWeight:
        return torch.Tensor._make_wrapper_subclass(cls, data.size(), strides=data.stride(), dtype=dtype,
                                                   device=data.device, requires_grad=requires_grad)

    def __init__(self, data: torch.Tensor, inv_scale: torch.Tensor, dtype: torch.dtype, recipe: _Recipe,
                 requires_grad: bool = False) -> None:
        self._data, self._inv_scale, self._recipe = data, inv_scale, recipe

    # torch types Tensor.__repr__ without its keyword's name, which no override can then match.
    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        return f"_Float8GatheredWeight({tuple(self.shape)}, {_FP8[self._recipe.dtype]}, 1/scale={self._inv_scale})"

    # PyTorch's idiom for a wrapper subclass; typed as a plain function, where Tensor's is a classmethod.
    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @classmethod  # Tensor's is the disabled impl, a plain function: the dispatcher calls a classmethod
    def __torch_dispatch__(  # type: ignore[override]
            cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        this = args[0]
        if func is torch.ops.autocastgen.fp8_layout_support.default:
            scaling = kwargs.get("scaling", args[4] if len(args) > 4 else "current")
            if scaling != "current":
                return ("a float8 all-gathered weight (autocastgen.distributed.enable_float8_all_gather) takes "
                        f"current scaling only; the policy's recipe is {scaling}")
            return ""
        if func is torch.ops.autocastgen.fp8_quantize_weight.default:
            return this._quantized(*args[1:], **kwargs)
        if func in (aten.detach.default, aten.alias.default) or (
                func is aten.as_strided.default and tuple(args[1]) == tuple(this.shape)):
            return cls(this._data, this._inv_scale, this.dtype, this._recipe)
        raise RuntimeError(
            f"autocastgen float8 all-gather: the weight of shape {tuple(this.shape)} was all-gathered as "
            f"{_FP8[this._recipe.dtype]} for the fp8 policy's linear and cannot run {func}: load the fp8 policy for "
            "every module whose weight enable_float8_all_gather converted (or leave that module out: modules=)")

    def _quantized(self, dtype: torch.dtype, scaling: str = "current", amax_history_len: int = 16, margin: int = 0,
                   cache: bool = True, fused: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        if (dtype, scaling, margin) != (self._recipe.dtype, "current", self._recipe.margin):
            raise RuntimeError(
                f"autocastgen float8 all-gather: the weight was all-gathered as {_FP8[self._recipe.dtype]} with "
                f"current scaling and margin {self._recipe.margin}, and the fp8 policy asks for {dtype} with "
                f"{scaling} scaling and margin {margin}: pass the policy's recipe to enable_float8_all_gather")
        return self._data, self._inv_scale


def enable_float8_all_gather(model: torch.nn.Module, *, dtype: torch.dtype = torch.float8_e4m3fn, margin: int = 0,
                             scaling: str = "current", modules: Any = None) -> int:
    """Makes FSDP2 all-gather the weights of ``model``'s ``nn.Linear`` modules as ``dtype`` with their
    scales (Note [float8 all-gather]). Call it before ``fully_shard``, with the fp8 policy's forward
    dtype and margin; ``modules`` (a predicate on the qualified name) limits it to some linears.
    Linears whose dimensions are not multiples of 16 (the fp8 GEMM's rule) keep float32 all-gathers.
    Returns how many weights were converted."""
    if dtype not in _FP8:
        raise ValueError("enable_float8_all_gather: dtype must be torch.float8_e4m3fn or torch.float8_e5m2, "
                         f"not {dtype}")
    if scaling != "current":
        raise ValueError("enable_float8_all_gather: only current scaling (tensorwise) is supported; delayed scaling "
                         "would keep an amax history per shard, not per weight: use `fp8: {scaling: current}`")
    if not isinstance(margin, int) or margin < 0:
        raise ValueError(f"enable_float8_all_gather: margin must be a non-negative int, not {margin!r}")
    from torch.distributed.tensor import DTensor

    converted = 0
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or (modules is not None and not modules(name)):
            continue
        weight = module.weight
        if isinstance(weight, DTensor) or hasattr(weight, "_local_tensor"):
            raise RuntimeError(
                f"enable_float8_all_gather: {name}.weight is a DTensor already (tensor parallel, or fully_shard "
                "called first): call it before fully_shard; float8 all-gather together with tensor parallel "
                "(parallelize_module) is not supported, called before it or after")
        if isinstance(weight, _Float8ShardWeight):
            continue
        if weight.dtype != torch.float32 or weight.shape[0] % 16 or weight.shape[1] % 16:
            continue
        recipe = _Recipe(dtype, margin, tuple(weight.shape))
        module.weight = torch.nn.Parameter(_Float8ShardWeight(weight.detach(), recipe),
                                           requires_grad=weight.requires_grad)
        converted += 1
    return converted


def precompute_float8_scales(model: torch.nn.Module) -> int:
    """The scales of every float8-all-gathered weight of ``model``, with one all-reduce (MAX) of their
    amaxes across the shard group: call it after each ``optimizer.step()`` (before the next forward).
    Returns how many weights it computed."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    params = [p for p in model.parameters()
              if isinstance(p, DTensor) and isinstance(p._local_tensor, _Float8ShardWeight)]
    if not params:
        return 0
    mesh = params[0].device_mesh
    if mesh.ndim != 1 or any(p.device_mesh != mesh for p in params):
        raise RuntimeError("precompute_float8_scales: the float8-all-gathered weights must share one 1-D FSDP mesh")
    shards = [shard for p in params if isinstance(shard := p._local_tensor, _Float8ShardWeight)]  # all of params
    ops = torch.ops.autocastgen
    with torch.no_grad():
        amaxes = torch.stack([ops.fp8_amax(s._inner) for s in shards])
        dist.all_reduce(amaxes, op=dist.ReduceOp.MAX, group=mesh.get_group())
        for shard, amax in zip(shards, amaxes):
            scale, inv = ops.fp8_scale_from_amax(amax, shard._recipe.dtype, shard._recipe.margin)
            shard._precomputed = (shard._inner._version, scale, inv)
    return len(shards)
