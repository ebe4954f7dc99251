"""`select: measured` on two ranks (gloo): every rank of the process group takes the same decision
(Note [fp8 selection] in runtime/torch/fp8/select.cpp) -- the two times are summed over the ranks
before they are compared -- also when the ranks' own times disagree, and also when one rank read
its decision from its cache file while the other measured.

The ranks' times are given (AUTOCASTGEN_FP8_SELECT_TIMES), differently per rank: rank 0 alone would
choose fp8 (1 ms against 2), rank 1 alone bfloat16 (3 against 1); the sums (4 against 3) choose
bfloat16 on both. Each rank's output is then bit for bit bfloat16 autocast's.
"""

from __future__ import annotations

import os
import tempfile

import dist_harness
import torch

dist_harness.setup_package_path()

from exact import assert_exact  # noqa: E402

POLICY = """\
autocast:
  device: cpu
  lower_precision: [bfloat16]
  fp8: {scaling: current, granularity: tensorwise, forward: float8_e4m3fn, backward: float8_e5m2, select: measured}
lists:
  fp8: [linear]
"""


def _step(layer, x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    y.float().sum().backward()
    return y.detach(), layer.weight.grad


def agree_part(rank: int, world: int, folder: str) -> None:
    """Both cases in one spawn of the ranks: the ranks measure; then rank 1 reads its file."""
    import autocastgen

    for one_file in (False, True):
        autocastgen.forget_fp8_selections()
        _agree_case(rank, world, os.path.join(folder, f"case{int(one_file)}"), one_file)


def _fnv1a64(data: bytes) -> str:
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) % (1 << 64)
    return f"{value:016x}"


def _agree_case(rank: int, world: int, folder: str, one_file: bool) -> None:
    import autocastgen

    cache = os.path.join(folder, f"rank{rank}")
    os.environ["AUTOCASTGEN_FP8_SELECT_CACHE"] = cache
    os.environ["AUTOCASTGEN_FP8_SELECT_TIMES"] = "1,2" if rank == 0 else "3,1"
    torch.manual_seed(0)
    layer, x = torch.nn.Linear(64, 48), torch.randn(32, 64)
    reference = _step(layer, x)  # PyTorch's own kernels: no policy loaded yet
    layer.weight.grad = None
    if one_file and rank == 1:
        # Rank 1 has this class in its file already (its own times): it reads instead of measuring,
        # and still agrees with rank 0, which measures.
        os.makedirs(cache, exist_ok=True)
        name = os.path.basename(autocastgen.fp8_selection_file("cpu"))
        key = "cpu|tensorwise|BFloat16|M32|K64|N48|backward"
        row = f"{key}\t3\t1\n"
        with open(os.path.join(cache, name), "w") as f:  # Note [the fp8 decisions file]: rows, then the end line
            f.write(f"{row}#end rows=1 fnv1a64={_fnv1a64(row.encode())}\n")
    autocastgen.load_policy(POLICY)
    got = _step(layer, x)
    (decision,) = autocastgen.fp8_selections()
    assert (decision["fp8_ms"], decision["lower_ms"], decision["fp8"]) == (4.0, 3.0, False), decision
    assert decision["source"] == ("file" if one_file and rank == 1 else "measured"), decision
    assert_exact(got, reference, "the GEMM did not run as bfloat16 autocast")
    decisions = [None] * world
    torch.distributed.all_gather_object(decisions, (decision["fp8"], decision["fp8_ms"], decision["lower_ms"]))
    assert decisions[0] == decisions[1], decisions
    autocastgen.clear_runtime_policies()


def test_ranks_take_the_same_measured_decision_also_when_one_read_its_file():
    with tempfile.TemporaryDirectory() as folder:
        dist_harness.run_ranks(agree_part, folder, timeout=90)
