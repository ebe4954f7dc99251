"""A transformers Llama on a 2-D mesh, FSDP2 x tensor parallel (2 x 2, four ranks on gloo), fp8 policy.

A LlamaForCausalLM built from a config (no download; every linear's local GEMM has dimensions that
are multiples of 16) gets transformers' own tensor-parallel plan for Llama (q, k, v, gate, up
ColwiseParallel; o, down RowwiseParallel; lm_head ColwiseParallel gathered to Replicate) on the
"tp" dimension, then fully_shard per decoder layer and at the root on the "dp" dimension. Under
torch.autocast with the fp8 policy and autocastgen.GradScaler, four SGD steps on half the batch per
dp rank give the losses of the 1-D runs (FSDP2 on "dp" alone, tensor parallel on "tp" alone) and of
one process on the whole batch within one float8 rounding and the same scale, with all 15 linears in
float8_e4m3fn on every rank at every step in every run. And what is not supported
on such a model says so when it is set up: float8 all-gather (enable_float8_all_gather) together
with tensor parallel, called before parallelize_module or after it (Note [float8 all-gather and
tensor parallel] in python/autocastgen/distributed/_float8_all_gather.py).

The model's attention reshapes q, k and v with `view(*input_shape, -1, head_dim)` (transformers
5.x), so with ColwiseParallel's default local outputs each rank sees num_heads / tp query heads and
num_key_value_heads / tp key-value heads and nothing in the model needs adjusting: the head counts
it stores are only used as ratios (num_key_value_groups), which stay the same per rank.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import dist_harness
import pytest
import torch

dist_harness.setup_package_path()
import requires  # noqa: E402  (tests/python, on sys.path from here)

transformers = requires.module("transformers")

POLICY = Path(__file__).resolve().parents[1] / "fp8" / "data" / "fp8_cpu.yaml"
# float8_e4m3fn has 3 mantissa bits: rounding to it moves a value by at most half a unit in the last
# place, 2^-4 of it. All four runs quantise every weight alike (FSDP2 all-gathers float32 exactly and
# the tensor-parallel shards are cast with the whole weight's amax, all-reduced over "tp"), but where
# the batch is split over "dp" each rank's activations and output gradients, half the batch, get
# their own tensorwise scale: an element can land on the neighbouring e4m3 value, one rounding. The
# loss, a mean over 64 tokens each of which saw such roundings, stays within one rounding (the MLP
# test's bound); the rest is bfloat16's (2^-8: RowwiseParallel sums the partial products across
# "tp" in bfloat16). Measured at step 0, relative: 2-D against 1-D FSDP2 4e-5 (tensor parallel's
# bfloat16 sums), against 1-D tensor parallel 2e-4 (the dp split's scales), against one process
# 2.4e-4; later steps start from weights that already differ (lr 0.5), up to 2e-2 at step 3.
E4M3_ROUNDING = 2.0**-4
STEPS = 4
LINEARS = 15  # 7 per decoder layer (q, k, v, o, gate, up, down) and lm_head


def _config() -> transformers.LlamaConfig:
    # head_dim 16; k and v project to 2 x 16 = 32 columns, 16 per tp rank; gate and up to 128, 64 each
    return transformers.LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False)


def _llama() -> torch.nn.Module:
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(_config())


def _tp_plan(model: torch.nn.Module) -> dict:
    """transformers' base_model_tp_plan for Llama and LlamaForCausalLM's lm_head ("colwise_gather_output")."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan: dict = {"lm_head": ColwiseParallel(output_layouts=Replicate())}
    for i in range(len(model.model.layers)):
        for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"):
            plan[f"model.layers.{i}.{name}"] = ColwiseParallel()
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            plan[f"model.layers.{i}.{name}"] = RowwiseParallel()
    return plan


def _fully_shard(model: torch.nn.Module, mesh) -> None:
    from torch.distributed.fsdp import fully_shard

    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


def _expect_refusal(fn, what: str) -> None:
    try:
        fn()
    except RuntimeError as e:
        assert "float8 all-gather together with tensor parallel" in str(e), str(e)
        assert what in str(e), str(e)
        return
    raise AssertionError(f"accepted: {what}")


def _refusals(mesh) -> None:
    """float8 all-gather with tensor parallel is refused at set-up, whichever comes first."""
    from torch.distributed.tensor.parallel import parallelize_module

    import autocastgen.distributed

    # parallelize_module first: enable_float8_all_gather refuses the DTensor weights.
    model = parallelize_module(_llama(), mesh["tp"], _tp_plan(_llama()))
    _expect_refusal(lambda: autocastgen.distributed.enable_float8_all_gather(model), "is a DTensor already")
    # enable_float8_all_gather first: parallelize_module's distribute_tensor meets a converted weight
    # (lm_head first; every rank refuses before its scatter sends anything, so none waits for another).
    model = _llama()
    assert autocastgen.distributed.enable_float8_all_gather(model) == LINEARS
    _expect_refusal(lambda: parallelize_module(model, mesh["tp"], _tp_plan(model)),
                    "tensor parallel (distribute_tensor) is splitting a weight of shape (256, 64)")
    # distribute_tensor without a scatter (src_data_rank=None) cannot be seen at set-up: the first
    # all-gather refuses (the root's, lm_head's colwise half), before it sends anything and before any GEMM.
    model = _llama()
    autocastgen.distributed.enable_float8_all_gather(model)
    parallelize_module(model, mesh["tp"], _tp_plan(model), src_data_rank=None)
    _fully_shard(model, mesh["dp"])
    ids = torch.zeros(2, 16, dtype=torch.long)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _expect_refusal(lambda: model(input_ids=ids),
                        "FSDP2 is all-gathering a part (128, 64) of a weight of shape (256, 64)")


def worker(rank: int, world: int) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    import autocastgen
    import autocastgen.distributed

    # PyTorch's note that the root FSDP module's output (a transformers ModelOutput) holds a view
    # tensor, which in-place ops would detach from FSDP's pre-backward hook: nothing here writes it.
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
    autocastgen.load_policy(str(POLICY))
    autocastgen.distributed.register_dtensor_ops()
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp_rank = mesh["dp"].get_local_rank()

    # The 2-D run, the two 1-D runs (FSDP2 on "dp" alone: each tp pair runs the same; tensor
    # parallel on "tp" alone, the whole batch: each dp pair runs the same) and one process, from the
    # same weights, each with its own optimizer and scaler.
    ref = _llama()
    runs = {"2-D": parallelize_module(copy.deepcopy(ref), mesh["tp"], _tp_plan(ref)),
            "FSDP2": copy.deepcopy(ref),
            "TP": parallelize_module(copy.deepcopy(ref), mesh["tp"], _tp_plan(ref)),
            "one process": ref}
    _fully_shard(runs["2-D"], mesh["dp"])
    _fully_shard(runs["FSDP2"], mesh["dp"])
    opts = {name: torch.optim.SGD(m.parameters(), lr=0.5) for name, m in runs.items()}
    scalers = {name: autocastgen.GradScaler("cpu", init_scale=2.0**8) for name in runs}
    ids = torch.randint(0, 256, (4, 16), generator=torch.Generator().manual_seed(2))  # one batch, learnt
    half = ids[2 * dp_rank:2 * dp_rank + 2]  # 2 x 16 tokens: M = 32 per rank
    history: dict[str, list[float]] = {name: [] for name in runs}
    for step in range(STEPS):
        for name, m in runs.items():
            batch = half if name in ("2-D", "FSDP2") else ids
            opts[name].zero_grad()
            with autocastgen.stats() as s, torch.autocast("cpu", dtype=torch.bfloat16):
                loss = m(input_ids=batch, labels=batch).loss
            scalers[name].scale(loss).backward()
            scalers[name].step(opts[name])
            scalers[name].update()
            gemms = {r["op"]: r["ran_in"] for r in s.table["ops"]
                     if r["op"] in ("aten::linear", "aten::mm", "aten::addmm")}
            assert gemms == {"aten::linear": {"float8_e4m3fn": LINEARS}}, (rank, name, step, gemms)
            loss = loss.detach().float()
            if name in ("2-D", "FSDP2"):  # each dp rank's mean over as many tokens: their mean is the batch's
                dist.all_reduce(loss, op=dist.ReduceOp.AVG, group=mesh["dp"].get_group())
            history[name].append(float(loss))
        for a, b in (("2-D", "FSDP2"), ("2-D", "TP"), ("2-D", "one process"), ("FSDP2", "one process"),
                     ("TP", "one process")):
            x, y = history[a][-1], history[b][-1]
            assert abs(x - y) <= E4M3_ROUNDING * y, (rank, a, b, step, history)
        for name in runs:
            assert scalers[name].get_scale() == scalers["one process"].get_scale(), (rank, name, step)
    assert history["one process"][-1] < history["one process"][0], history  # it learns the batch
    if rank == 0:
        for name, losses in history.items():
            print(f"losses, {name}:", [round(x, 5) for x in losses])
    _refusals(mesh)


def test_llama_fp8_on_fsdp2_x_tensor_parallel():
    if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_scaled_mm", "CPU"):
        pytest.skip("this torch has no CPU _scaled_mm kernel")
    dist_harness.run_ranks(worker, world=4, timeout=180)
