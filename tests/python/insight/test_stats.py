"""Per-op autocast statistics from Python (autocastgen.stats(), torch.ops.autocastgen.stats_*,
AUTOCASTGEN_STATS; docs/insight.md).

Note [the linear example]: three calls of one nn.Linear(8, 16) on one 4x8 float32 input in a
bfloat16 CPU autocast scope. The input is not cacheable (it does not require grad): cast on every
call, 3 x 4*8*2 = 192 bytes; the weight (16*8*2 = 256 bytes) and the bias (16*2 = 32 bytes) are
cast once and then taken from the cast cache twice each. So: 3 calls, 5 casts, 480 bytes,
4 cache hits (calls - distinct weights, per weight). PyTorch's own autocast makes the same 5
conversions (counted here as aten::_to_copy calls under a TorchDispatchMode), and the generated
CPU library (TorchState), its autocastgen-state twin and a runtime policy all count exactly that.

Every case runs in a fresh interpreter: loading a generated library cannot be undone.
ctest sets AUTOCASTGEN_BUILD_DIR and AUTOCASTGEN_CLI; by hand:
  AUTOCASTGEN_BUILD_DIR=build python3 -m pytest tests/python/insight/test_stats.py
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import textwrap

import pytest
import torch

import child_process
from built_tree import require_built
from child_process import last_json

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
RUNTIME = BUILD / "lib" / "libautocastgen_runtime_torch.so"
CPU_LIBRARY = BUILD / "lib" / "libautocastgen_torch_cpu.so"
OWN_STATE_LIBRARY = BUILD / "lib" / "libautocastgen_torch_cpu_own_state.so"
CLI = pathlib.Path(os.environ.get("AUTOCASTGEN_CLI", BUILD / "bin" / "autocastgen"))

# The build's runtime, generated CPU libraries (the own-state one too) and package: an error under
# ctest where missing (built_tree.py).
require_built(BUILD, "python/autocastgen/__init__.py", RUNTIME, CPU_LIBRARY, OWN_STATE_LIBRARY)

LINEAR_EXAMPLE = {
    "op": "aten::linear",
    "policy": "lower_precision_fp",
    "calls": 3,
    "ran_in": {"bfloat16": 3},
    "input_dtypes": ["float32"],
    "casts": 5,
    "cast_bytes": 480,
    "cache_hits": 4,
    "cache_misses": 2,  # weight and bias, cast once each (those are casts too)
    "cache_evictions": 0,
    "outputs_checked": 0,  # neither the watch nor the range record is on
    "nonfinite": 0,
    "output_max_abs": None,
}

# Shared by every child: the example, and a dispatch mode counting the conversions that reach the
# backend (aten::_to_copy) and the bytes they create.
PRELUDE = textwrap.dedent(
    """
    import json, sys, threading
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class CountCopies(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.casts = 0
            self.cast_bytes = 0
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten._to_copy.default:
                self.casts += 1
                self.cast_bytes += out.numel() * out.element_size()
            return out

    def linear_example(scope):
        torch.manual_seed(0)
        lin = torch.nn.Linear(8, 16)
        x = torch.randn(4, 8)
        with scope(), CountCopies() as copies:
            for _ in range(3):
                y = lin(x)
        assert y.dtype == torch.bfloat16, y.dtype
        return {"casts": copies.casts, "cast_bytes": copies.cast_bytes}

    torch_autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16)
    """
)


def run_child(body: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return child_process.run_child(BUILD, PRELUDE, body, env, check)


def test_pytorch_autocast_makes_the_example_casts():
    # PyTorch's built-in AutocastCPU kernels, nothing of ours loaded.
    result = run_child("print(json.dumps(linear_example(torch_autocast)))")
    assert last_json(result) == {"casts": 5, "cast_bytes": 480}


def test_generated_cpu_library_counts_the_example():
    result = run_child(
        f"""
        torch.ops.load_library({str(CPU_LIBRARY)!r})
        import autocastgen
        with autocastgen.stats() as s:
            seen = linear_example(torch_autocast)
        print(json.dumps({{"seen": seen, "table": s.table}}))
        """
    )
    out = last_json(result)
    assert out["seen"] == {"casts": 5, "cast_bytes": 480}  # the same conversions as PyTorch's own
    assert out["table"] == {"version": 1, "ops": [LINEAR_EXAMPLE]}


def test_own_state_library_counts_the_example():
    result = run_child(
        f"""
        torch.ops.load_library({str(OWN_STATE_LIBRARY)!r})
        import autocastgen
        with autocastgen.stats() as s:
            seen = linear_example(lambda: autocastgen.autocast("cpu", dtype=torch.bfloat16))
        print(json.dumps({{"seen": seen, "table": s.table}}))
        """
    )
    out = last_json(result)
    assert out["seen"] == {"casts": 5, "cast_bytes": 480}
    assert out["table"] == {"version": 1, "ops": [LINEAR_EXAMPLE]}


def test_runtime_policy_counts_the_example():
    result = run_child(
        """
        import warnings
        import autocastgen
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # replacing PyTorch's kernel warns (tested elsewhere)
            torch.ops.autocastgen.register_runtime_policy("aten::linear", "lower_precision_fp", "cpu")
        with autocastgen.stats() as s:
            seen = linear_example(torch_autocast)
        print(json.dumps({"seen": seen, "table": s.table}))
        """
    )
    out = last_json(result)
    assert out["seen"] == {"casts": 5, "cast_bytes": 480}
    assert out["table"] == {"version": 1, "ops": [LINEAR_EXAMPLE]}


def test_nothing_counted_while_off():
    result = run_child(
        f"""
        torch.ops.load_library({str(CPU_LIBRARY)!r})
        import autocastgen
        linear_example(torch_autocast)
        print(json.dumps([autocastgen.insight.enabled(), autocastgen.insight.snapshot()]))
        """
    )
    assert last_json(result) == [False, {"version": 1, "ops": []}]


def test_eight_threads_add_up():
    # Each thread: its own Linear (own weights), autocastgen's state (a per-thread cast cache), three
    # calls; it merges its table before it ends. 8 x the example.
    result = run_child(
        f"""
        torch.ops.load_library({str(OWN_STATE_LIBRARY)!r})
        import autocastgen
        def work():
            linear_example(lambda: autocastgen.autocast("cpu", dtype=torch.bfloat16))
            autocastgen.insight.merge()
        with autocastgen.stats() as s:
            threads = [threading.Thread(target=work) for _ in range(8)]
            for t in threads: t.start()
            for t in threads: t.join()
        print(json.dumps(s.table))
        """
    )
    expected = dict(LINEAR_EXAMPLE, calls=24, ran_in={"bfloat16": 24}, casts=40, cast_bytes=3840, cache_hits=32,
                    cache_misses=16)
    assert last_json(result) == {"version": 1, "ops": [expected]}


def test_eight_threads_torch_state_add_up():
    # PyTorch's state with weights that do not require grad (nothing cacheable): every call casts
    # x, weight and bias: 8 threads x 10 calls x (64 + 256 + 32) bytes.
    result = run_child(
        f"""
        torch.ops.load_library({str(CPU_LIBRARY)!r})
        import autocastgen
        def work():
            lin = torch.nn.Linear(8, 16).requires_grad_(False)
            x = torch.randn(4, 8)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                for _ in range(10):
                    lin(x)
            autocastgen.insight.merge()
        with autocastgen.stats() as s:
            threads = [threading.Thread(target=work) for _ in range(8)]
            for t in threads: t.start()
            for t in threads: t.join()
        print(json.dumps(s.table))
        """
    )
    expected = dict(LINEAR_EXAMPLE, calls=80, ran_in={"bfloat16": 80}, casts=240, cast_bytes=80 * 352, cache_hits=0,
                    cache_misses=0)
    assert last_json(result) == {"version": 1, "ops": [expected]}


def test_env_var_writes_the_file_at_exit(tmp_path):
    path = tmp_path / "stats.json"
    run_child(
        f"""
        torch.ops.load_library({str(CPU_LIBRARY)!r})
        import autocastgen
        assert autocastgen.insight.enabled()
        linear_example(torch_autocast)
        """,
        env={"AUTOCASTGEN_STATS": str(path)},
    )
    assert json.loads(path.read_text()) == {"version": 1, "ops": [LINEAR_EXAMPLE]}
    assert [p.name for p in tmp_path.iterdir()] == ["stats.json"]  # no temporary left


def test_env_var_flush_writes_before_exit(tmp_path):
    path = tmp_path / "stats.json"
    result = run_child(
        f"""
        torch.ops.load_library({str(CPU_LIBRARY)!r})
        import autocastgen
        linear_example(torch_autocast)
        assert autocastgen.insight.flush()
        print(open({str(path)!r}).read().replace("\\n", " "))
        """,
        env={"AUTOCASTGEN_STATS": str(path)},
    )
    assert last_json(result) == {"version": 1, "ops": [LINEAR_EXAMPLE]}


def test_env_var_unwritable_path_warns_and_exits_cleanly(tmp_path):
    path = tmp_path / "missing-dir" / "stats.json"
    result = run_child(
        f"""
        torch.ops.load_library({str(CPU_LIBRARY)!r})
        import autocastgen
        linear_example(torch_autocast)
        print("done")
        """,
        env={"AUTOCASTGEN_STATS": str(path)},
    )
    assert result.stdout.strip().splitlines()[-1] == "done"
    assert (
        f"autocastgen: warning: could not write the statistics to '{path}' (AUTOCASTGEN_STATS): "
        "No such file or directory" in result.stderr
    )
    assert not path.parent.exists()


def test_flush_to_unwritable_path_warns(tmp_path):
    path = tmp_path / "missing-dir" / "stats.json"
    result = run_child(
        f"""
        import warnings
        import autocastgen
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ok = autocastgen.insight.flush({str(path)!r})
        print(json.dumps([ok, [str(w.message) for w in caught]]))
        """
    )
    ok, messages = last_json(result)
    assert ok is False
    # torch 2.15 turns the C++ warning into a Python warning; 2.11 prints it to stderr instead.
    expected = f"could not write the statistics to '{path}': No such file or directory"
    warned = [m for m in messages if expected in m] + [line for line in result.stderr.splitlines() if expected in line]
    assert len(warned) == 1, (messages, result.stderr)


def test_blocks_count_their_own_calls_and_the_env_file_keeps_all(tmp_path):
    # A stats() block reports what it counted (a difference of snapshots) and resets nothing, so the
    # AUTOCASTGEN_STATS file still holds both blocks.
    path = tmp_path / "stats.json"
    result = run_child(
        f"""
        torch.ops.load_library({str(CPU_LIBRARY)!r})
        import autocastgen
        tables = []
        for _ in range(2):
            with autocastgen.stats() as s:
                linear_example(torch_autocast)
            tables.append(s.table)
        print(json.dumps(tables))
        """,
        env={"AUTOCASTGEN_STATS": str(path)},
    )
    assert last_json(result) == [{"version": 1, "ops": [LINEAR_EXAMPLE]}] * 2
    doubled = dict(LINEAR_EXAMPLE, calls=6, ran_in={"bfloat16": 6}, casts=10, cast_bytes=960, cache_hits=8, cache_misses=4)
    assert json.loads(path.read_text()) == {"version": 1, "ops": [doubled]}


# Note [names in statistics files] (core/support/stats_names.h): what the runtime writes, the CLI
# and the report read. PyTorch takes any string as a submodule's name.
MAX_NAME_BYTES = 2**20  # kMaxStatsNameBytes; reading.MAX_NAME_BYTES (tests/report/test_report_hostile.py ties them)

LONG_NAME_CHILD = """
import autocastgen
torch.ops.load_library({library!r})
model = torch.nn.Sequential()
for name in {names!r}:
    model.add_module(name, torch.nn.Linear(8, 8))
with autocastgen.attach(model), autocastgen.stats({block!r}), torch.autocast("cpu", dtype=torch.bfloat16):
    model(torch.randn(2, 8))
"""


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=300)


def test_a_100000_character_module_name_is_written_whole_and_read_by_stats_and_report(tmp_path):
    name = ("encoder_layer_" * 7200)[:100_000]
    at_exit, block = tmp_path / "exit.json", tmp_path / "block.json"
    run_child(LONG_NAME_CHILD.format(library=str(CPU_LIBRARY), names=[name], block=str(block)),
              env={"AUTOCASTGEN_STATS": str(at_exit)})
    for path in (at_exit, block):
        assert [row.get("module") for row in json.loads(path.read_text())["ops"]] == [name]  # whole
        table = run_cli("stats", path, "--by", "module")
        assert table.returncode == 0, table.stderr[-2000:]
        # Note [long names in tables]: its head and tail around its length, the table stays narrow.
        lines = table.stdout.splitlines()
        assert f"{name[:480]}...[100000 bytes]...{name[-480:]}" in lines[2], lines[2][:2000]
        assert max(map(len, lines)) < 1200
        assert json.loads(run_cli("stats", path, "--by", "module", "--json").stdout)["ops"][0]["module"] == name
        page = tmp_path / "page.html"
        report = run_cli("report", path, "-o", page)
        assert report.returncode == 0, report.stderr[-2000:]
        assert name in page.read_text()  # the per-module table has it (Note [bounded tree]: not the tree)


def fnv1a(data: bytes) -> int:
    hash = 0xCBF29CE484222325
    for byte in data:
        hash = ((hash ^ byte) * 0x100000001B3) % 2**64
    return hash


def test_module_names_past_the_bound_are_written_shortened_alike_on_every_rank(tmp_path):
    # Two names of 1.2 MB that share their first MiB (two bytes a character: the cut must fall
    # between characters), on two ranks: each file holds two distinct names of at most the bound,
    # with the length and hash of the whole name; the ranks agree, so `--merge` adds their rows.
    names = ["ü" * 600_000 + "a", "ü" * 600_000 + "b"]
    expected = []
    for name in names:
        data = name.encode()
        marker = f"...[{len(data)} bytes, FNV-1a {fnv1a(data):016x}]"
        expected.append("ü" * ((MAX_NAME_BYTES - len(marker)) // 2) + marker)
    assert all(len(e.encode()) <= MAX_NAME_BYTES for e in expected) and expected[0] != expected[1]
    files = [tmp_path / "s.0.json", tmp_path / "s.1.json"]
    for rank in ("0", "1"):
        run_child(LONG_NAME_CHILD.format(library=str(CPU_LIBRARY), names=names, block=""),
                  env={"AUTOCASTGEN_STATS": str(tmp_path / "s.{rank}.json"), "RANK": rank})
    for path in files:
        assert sorted(row["module"] for row in json.loads(path.read_text())["ops"]) == expected
    merged = run_cli("stats", "--merge", *files, "--by", "module", "--json")
    assert merged.returncode == 0, merged.stderr[-2000:]
    rows = json.loads(merged.stdout)["ops"]
    assert sorted((row["module"], row["calls"]) for row in rows) == [(e, 2) for e in expected]
    page = tmp_path / "page.html"
    report = run_cli("report", *files, "-o", page)
    assert report.returncode == 0, report.stderr[-2000:]
    assert page.stat().st_size > 0


@pytest.mark.skipif(not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_scaled_mm", "CPU"),
                    reason=f"torch {torch.__version__} has no CPU _scaled_mm kernel")
def test_a_long_fp8_reason_is_written_as_a_member_name_the_readers_take(tmp_path):
    # An fp8 GEMM skipped by its place counts the reason `place <pattern>`, a member name of
    # `fp8_skipped`: the C++ reader takes none whose text is over 1022 bytes (yaml-cpp), and this
    # pattern's text is 2000 (a quote and a backslash are escaped). Written cut, with its marker.
    name = 'm"\\' * 400
    policy = ("autocast: {device: cpu, lower_precision: [bfloat16], fp8: {scaling: current}}\n"
              f"lists:\n  fp8: [linear]\nmodules:\n  ? {json.dumps(name)}\n  : {{fp8: off}}\n")
    path = tmp_path / "fp8.json"
    run_child(
        f"""
        import autocastgen
        autocastgen.load_policy({policy!r})
        model = torch.nn.Sequential()
        model.add_module({name!r}, torch.nn.Linear(32, 32))
        with torch.no_grad(), autocastgen.attach(model), autocastgen.stats({str(path)!r}), \\
                torch.autocast("cpu", dtype=torch.bfloat16):
            model(torch.randn(16, 32))
        """
    )
    [row] = json.loads(path.read_text())["ops"]
    [reason] = row["fp8_skipped"]
    whole = ("place " + name).encode()
    marker = f"...[{len(whole)} bytes, FNV-1a {fnv1a(whole):016x}]"
    assert reason.startswith("place " + name[:200]) and reason.endswith(marker), reason[-200:]
    assert len(json.dumps(reason)) - 2 <= 1022  # the runtime escapes as json.dumps does here
    for args in (["stats", path, "--by", "module"], ["report", path, "-o", tmp_path / "page.html"]):
        done = run_cli(*args)
        assert done.returncode == 0, done.stderr[-2000:]
