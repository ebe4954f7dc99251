"""autocastgen.GradScaler under FSDP2 and DDP (two ranks, gloo on loopback) against torch.amp.GradScaler.

FSDP2: a model under fully_shard trains 40 steps under torch.autocast("cpu", bfloat16) with infs
and NaNs written into one rank's gradient shard on some steps; three copies from the same seed:
torch.amp.GradScaler, autocastgen.GradScaler, and torch.amp.GradScaler running on
torch.ops.autocastgen's scaler ops (the op reached with DTensors directly). After every step each
rank's parameter shards and the scale equal the reference's bit for bit, and on a step where only
one rank's shard overflowed both ranks skipped and backed off (Note [found_inf under DTensor]).
DDP: the same with an inf in one rank's input; both scalers, equal bit for bit.
"""

from __future__ import annotations

from unittest import mock

import dist_harness
import torch

dist_harness.setup_package_path()

from exact import assert_exact  # noqa: E402

STEPS = 40
# step -> (rank whose shard gets the value, parameter index, value)
PLANTED = {3: (1, 0, float("inf")), 7: (0, 4, float("nan")), 8: (1, 5, float("-inf")), 19: (0, 2, float("inf")),
           20: (1, 1, float("nan")), 33: (1, 3, float("inf"))}


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
    )


def _batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)


def _train_step(model, opt, scaler, step, rank, plant_shard):
    x, y = _batch(step, rank)
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    scaler.scale(loss).backward()
    if plant_shard and step in PLANTED and PLANTED[step][0] == rank:
        _, index, value = PLANTED[step]
        list(model.parameters())[index].grad.to_local().view(-1)[0] = value
    scaler.step(opt)
    scaler.update()


def _torch_scaler_on_our_ops():
    ops = torch.ops.autocastgen
    return mock.patch.multiple(
        torch, _amp_foreach_non_finite_check_and_unscale_=ops.non_finite_check_and_unscale_,
        _amp_update_scale_=ops.update_scale_,
    )


def fsdp_worker(rank: int, world: int) -> None:
    from torch.distributed.fsdp import fully_shard

    import autocastgen

    runs = []
    for kind in ("torch", "autocastgen", "torch on our ops"):
        model = _model()
        fully_shard(model[2])
        fully_shard(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        make = autocastgen.GradScaler if kind == "autocastgen" else torch.amp.GradScaler
        runs.append((kind, model, opt, make("cpu", init_scale=2.0**12, growth_interval=3)))
    for step in range(STEPS):
        for kind, model, opt, scaler in runs:
            before = scaler.get_scale()
            if kind == "torch on our ops":
                with _torch_scaler_on_our_ops():
                    _train_step(model, opt, scaler, step, rank, plant_shard=True)
            else:
                _train_step(model, opt, scaler, step, rank, plant_shard=True)
            if step in PLANTED:  # every rank backs off, not only the one that overflowed
                assert scaler.get_scale() == before / 2, (kind, step, rank, before, scaler.get_scale())
        ref = runs[0]
        for kind, model, _, scaler in runs[1:]:
            assert scaler.get_scale() == ref[3].get_scale(), (kind, step)
            for p, q in zip(ref[1].parameters(), model.parameters()):
                assert_exact(p.to_local(), q.to_local(), (kind, step, rank))
    assert runs[0][3].get_scale() != 2.0**12  # the scale moved both ways on the way
    for _, model, _, _ in runs:
        assert all(torch.isfinite(p.to_local()).all() for p in model.parameters())


def ddp_worker(rank: int, world: int) -> None:
    from torch.nn.parallel import DistributedDataParallel

    import autocastgen

    runs = []
    for make in (torch.amp.GradScaler, autocastgen.GradScaler):
        model = DistributedDataParallel(_model())
        runs.append((model, torch.optim.SGD(model.parameters(), lr=0.05), make("cpu", init_scale=2.0**12, growth_interval=3)))
    for step in range(STEPS):
        for model, opt, scaler in runs:
            x, y = _batch(step, rank)
            if step in PLANTED and PLANTED[step][0] == rank:
                x[0, 0] = PLANTED[step][2]  # one rank's input: DDP's all-reduce spreads it to every gradient
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = torch.nn.functional.mse_loss(model(x).float(), y)
            before = scaler.get_scale()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            assert (scaler.get_scale() == before / 2) == (step in PLANTED), (step, rank)
        assert runs[0][2].get_scale() == runs[1][2].get_scale()
        for p, q in zip(runs[0][0].parameters(), runs[1][0].parameters()):
            assert_exact(p, q, (step, rank))


def worker(rank: int, world: int) -> None:
    fsdp_worker(rank, world)
    ddp_worker(rank, world)


def test_grad_scaler_under_fsdp2_and_ddp_matches_torch_bit_for_bit():
    # One spawn for both (starting two ranks costs more than either run).
    dist_harness.run_ranks(worker, timeout=120)
