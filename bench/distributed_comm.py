"""Collectives per training step that autocastgen's features add (two ranks, gloo on 127.0.0.1).

Counts the calls and bytes of torch.distributed's collectives made from Python (FSDP2's all-gathers
and reduce-scatters, tensor parallel's, the scaler's found_inf all-reduce) over one steady-state
step of a small MLP, per configuration; DDP's gradient all-reduces run inside its C++ reducer and
are not seen here. Prints a markdown table (docs/distributed.md quotes it).

  PYTHONPATH=build/python python3 bench/distributed_comm.py
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "distributed"))
import dist_harness  # noqa: E402

POLICY = Path(__file__).resolve().parents[1] / "tests" / "fp8" / "data" / "fp8_cpu.yaml"
DELAYED = POLICY.with_name("fp8_cpu_delayed.yaml")
COLLECTIVES = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_gather", "broadcast",
               "reduce_scatter", "all_to_all_single", "all_gather_single", "reduce_scatter_single")


class Counter:
    """Wraps torch.distributed's collectives; counts (name -> [calls, bytes]) while on."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self.on = False
        self.counts: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
        for name in COLLECTIVES:
            original = getattr(dist, name, None)
            if original is None:  # not in every release
                continue

            def wrapped(*args, _name=name, _original=original, **kwargs):
                if self.on:
                    # the largest tensor argument: the whole buffer an all-gather or reduce-scatter covers
                    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
                    sizes = [t.numel() * t.element_size() for t in tensors]
                    entry = self.counts[_name]
                    entry[0] += 1
                    entry[1] += max(sizes, default=0)
                return _original(*args, **kwargs)

            setattr(dist, name, wrapped)
        # functional collectives (tensor parallel's redistributions) go through c10d's op directly
        import torch.distributed._functional_collectives as funcol

        for name in ("all_reduce", "all_gather_tensor", "reduce_scatter_tensor"):
            original = getattr(funcol, name)

            def wrapped_f(tensor, *args, _name=name, _original=original, **kwargs):
                if self.on:
                    entry = self.counts["funcol." + _name]
                    entry[0] += 1
                    entry[1] += tensor.numel() * tensor.element_size()
                return _original(tensor, *args, **kwargs)

            setattr(funcol, name, wrapped_f)

    def text(self) -> str:
        # bytes: all calls together
        return ", ".join(f"{name} {calls}× {size} B" for name, (calls, size) in sorted(self.counts.items())) or "none"


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64))


def _step(model, opt, scaler, x, after_step=None) -> None:
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(x).float().square().mean()
    if scaler is None:
        loss.backward()
        opt.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    if after_step is not None:
        after_step(model)


def worker(rank: int, world: int) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    import autocastgen

    counter = Counter()
    mesh = init_device_mesh("cpu", (world,))
    x = torch.randn(32, 64)
    rows = []

    gathered = {}

    def measure(name, model, scaler, after_step=None):
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        _step(model, opt, scaler, x, after_step)  # warm-up: lazy state, first all-gathers
        counter.counts.clear()
        counter.on = True
        _step(model, opt, scaler, x, after_step)
        counter.on = False
        rows.append((name, counter.text()))
        gathered[name] = sum(size for op, (_, size) in counter.counts.items() if op.startswith("all_gather"))

    def fsdp(float8_all_gather=False):
        model = _mlp()
        if float8_all_gather:
            autocastgen.distributed.enable_float8_all_gather(model)
        return fully_shard(model)

    def tp():
        return parallelize_module(_mlp(), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})

    measure("FSDP2, no scaler", fsdp(), None)
    measure("FSDP2 + torch.amp.GradScaler", fsdp(), torch.amp.GradScaler("cpu"))
    measure("FSDP2 + autocastgen.GradScaler", fsdp(), autocastgen.GradScaler("cpu"))
    measure("TP, bf16 autocast", tp(), None)
    measure("TP + autocastgen.GradScaler", tp(), autocastgen.GradScaler("cpu"))
    autocastgen.load_policy(str(POLICY))
    autocastgen.distributed.register_dtensor_ops()
    measure("FSDP2, fp8 policy", fsdp(), None)
    measure("FSDP2, fp8 policy + float8 all-gather, scales precomputed", fsdp(True), None,
            autocastgen.distributed.precompute_float8_scales)
    measure("FSDP2, fp8 policy + float8 all-gather, scales at the all-gather", fsdp(True), None)
    measure("TP, fp8 policy (float8 per shard)", tp(), None)
    measure("TP, fp8 policy + autocastgen.GradScaler", tp(), autocastgen.GradScaler("cpu"))
    autocastgen.load_policy(str(DELAYED))
    measure("TP, fp8 policy, delayed scaling (sharded weights: bf16 fallback)", tp(), None)
    if rank == 0:
        print("| configuration (one step, per rank) | collectives from Python: calls × bytes |")
        print("|---|---|")
        for name, text in rows:
            print(f"| {name} | {text} |")
        plain = gathered["FSDP2, fp8 policy"]
        f8 = gathered["FSDP2, fp8 policy + float8 all-gather, scales precomputed"]
        print(f"\nall-gathered bytes per step, float8 / float32 weights: {f8} / {plain} = {f8 / plain:.3f}")


if __name__ == "__main__":
    dist_harness.setup_package_path()
    dist_harness.run_ranks(worker, timeout=300)
