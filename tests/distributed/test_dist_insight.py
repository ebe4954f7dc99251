"""Insight per rank (two ranks, gloo on loopback): AUTOCASTGEN_STATS=s.{rank}.json writes one file
per rank, the non-finite watch names the rank, and `autocastgen stats --merge` sums the files."""

from __future__ import annotations

import json
import os
import subprocess
import warnings

import dist_harness
import torch

dist_harness.setup_package_path()


def worker(rank: int, world: int) -> None:
    import autocastgen  # noqa: F401 - loads the runtime, which reads AUTOCASTGEN_STATS / _FINITE

    torch.ops.load_library(str(dist_harness.BUILD / "lib" / "libautocastgen_torch_cpu.so"))  # generated CPU wrappers
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    x = torch.randn(4, 8) * (1e5 if rank == 1 else 1.0)  # rank 1's float16 output overflows
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autocast("cpu", dtype=torch.float16):
            for _ in range(1 + rank):  # rank 0: one call, rank 1: two
                model(x)
    said = [str(w.message) for w in caught if "non-finite output" in str(w.message)]
    if rank == 1:
        assert len(said) == 1 and said[0].startswith("autocastgen: non-finite output on rank 1: aten::linear"), said
    else:
        assert not said, said


def test_stats_per_rank_watch_names_rank_and_merge(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOCASTGEN_STATS", str(tmp_path / "s.{rank}.json"))
    monkeypatch.setenv("AUTOCASTGEN_FINITE", "warn")
    dist_harness.run_ranks(worker, timeout=90)
    files = [tmp_path / f"s.{rank}.json" for rank in range(2)]
    calls = [next(op["calls"] for op in json.loads(f.read_text())["ops"] if op["op"] == "aten::linear") for f in files]
    assert calls == [1, 2]
    cli = os.environ.get("AUTOCASTGEN_CLI", str(dist_harness.BUILD / "bin" / "autocastgen"))
    out = subprocess.run([cli, "stats", "--merge", "--json", *map(str, files)], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    (linear,) = [op for op in json.loads(out)["ops"] if op["op"] == "aten::linear"]
    assert linear["calls"] == 3 and linear["ran_in"] == {"float16": 3} and linear["nonfinite"] == 2, linear
