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
ctest sets AUTOCASTGEN_BUILD_DIR; by hand:
  AUTOCASTGEN_BUILD_DIR=build python3 -m pytest tests/python/test_stats.py
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import textwrap

import pytest

import child_process
from child_process import last_json

torch = pytest.importorskip("torch")

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
RUNTIME = BUILD / "lib" / "libautocastgen_runtime_torch.so"
CPU_LIBRARY = BUILD / "lib" / "libautocastgen_torch_cpu.so"
OWN_STATE_LIBRARY = BUILD / "lib" / "libautocastgen_torch_cpu_own_state.so"

pytestmark = pytest.mark.skipif(
    not (RUNTIME.is_file() and CPU_LIBRARY.is_file() and (BUILD / "python" / "autocastgen").is_dir()),
    reason="the build's runtime, generated CPU library or Python package is missing (set AUTOCASTGEN_BUILD_DIR)",
)

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


@pytest.mark.skipif(not OWN_STATE_LIBRARY.is_file(), reason="the autocastgen-state CPU library is not built")
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


@pytest.mark.skipif(not OWN_STATE_LIBRARY.is_file(), reason="the autocastgen-state CPU library is not built")
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
