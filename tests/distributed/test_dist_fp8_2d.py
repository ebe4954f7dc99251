"""The fp8 policy on a 2-D mesh, FSDP2 x tensor parallel (2 x 2, four ranks on gloo).

Each linear is tensor-parallel on the "tp" dimension (ColwiseParallel, then RowwiseParallel) and the
model is fully_shard-ed on the "dp" dimension: FSDP2 all-gathers the TP shards, and the fp8 GEMMs
run per TP shard (Note [fp8 under tensor parallel]). With autocastgen.GradScaler, five steps on half
the batch per dp rank give the losses of one process on the whole batch within one float8
rounding, every linear in float8 on every rank; and what is not supported on such a model says so
when the model is set up (enable_float8_all_gather on TP-sharded weights).
"""

from __future__ import annotations

import copy
from pathlib import Path

import dist_harness
import torch

dist_harness.setup_package_path()

POLICY = Path(__file__).resolve().parents[1] / "fp8" / "data" / "fp8_cpu.yaml"
E4M3_ROUNDING = 2.0**-4  # float8_e4m3fn: 3 mantissa bits


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32))


def worker(rank: int, world: int) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    import autocastgen
    import autocastgen.distributed

    autocastgen.load_policy(str(POLICY))
    autocastgen.distributed.register_dtensor_ops()
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp_rank = mesh["dp"].get_local_rank()

    ref = _mlp()
    model = parallelize_module(copy.deepcopy(ref), mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    try:
        autocastgen.distributed.enable_float8_all_gather(model)
        raise AssertionError("float8 all-gather accepted TP-sharded weights")
    except RuntimeError as e:
        assert "together with tensor parallel (parallelize_module) is not supported" in str(e), str(e)
    fully_shard(model, mesh=mesh["dp"])

    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, ref)]
    scalers = [autocastgen.GradScaler("cpu", init_scale=2.0**8) for _ in range(2)]
    g = torch.Generator().manual_seed(2)
    for step in range(5):
        x, y = torch.randn(32, 32, generator=g), torch.randn(32, 32, generator=g)
        half = slice(16 * dp_rank, 16 * dp_rank + 16)
        losses = []
        for m, opt, scaler, (xs, ys) in ((model, opts[0], scalers[0], (x[half], y[half])),
                                         (ref, opts[1], scalers[1], (x, y))):
            opt.zero_grad()
            with autocastgen.stats() as s, torch.autocast("cpu", dtype=torch.bfloat16):
                out = m(xs)
                out = out.full_tensor() if hasattr(out, "full_tensor") else out
                loss = torch.nn.functional.mse_loss(out.float(), ys)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            (row,) = [r for r in s.table["ops"] if r["op"] == "aten::linear"]
            assert row["ran_in"] == {"float8_e4m3fn": 2}, (rank, step, row["ran_in"])
            losses.append(loss.detach())
        dist.all_reduce(losses[0], op=dist.ReduceOp.AVG, group=mesh["dp"].get_group())
        assert abs(float(losses[0]) - float(losses[1])) <= E4M3_ROUNDING * float(losses[1]), (rank, step, losses)
        assert scalers[0].get_scale() == scalers[1].get_scale(), step


def test_fp8_on_fsdp2_x_tensor_parallel():
    if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_scaled_mm", "CPU"):
        import pytest

        pytest.skip("this torch has no CPU _scaled_mm kernel")
    dist_harness.run_ranks(worker, world=4, timeout=180)
