"""A policy loaded, replaced or cleared after torch.compile traced a function (docs/compile.md,
Note [policies in the trace key] in runtime/torch/state/traced.cpp).

A graph holds the casts of the policies in force when it was traced. In one process, loading,
replacing or clearing a runtime policy makes every compiled frame trace again at its next call,
whether its graph reached one of our kernels or only PyTorch's; across processes, PyTorch's compile
caches (AOTAutograd's looks graphs up by Dynamo's graph, the same for every policy) give a process
a graph of the same policies only. aot_eager runs eager kernels on AOTAutograd's graph, so its
values are compared with eager bit for bit; Inductor's by dtype and within its tolerance.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from built_tree import require_built

ROOT = Path(__file__).resolve().parents[3]
BUILD = Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", ROOT / "build"))
MM_ONLY_LIB = BUILD / "lib" / "libautocastgen_test_mm_only.so"
require_built(BUILD, "python/autocastgen/__init__.py", MM_ONLY_LIB)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from torch._dynamo.testing import CompileCounterWithBackend  # noqa: E402

import autocastgen  # noqa: E402
import child_process  # noqa: E402
from exact import CHILD_IMPORT, assert_exact  # noqa: E402

TORCH = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
MM_FP32 = "autocast: {device: cpu}\nlists:\n  fp32: [mm]\n"
MM_LOWER = "autocast: {device: cpu}\nlists:\n  lower_precision_fp: [mm]\n"

torch.manual_seed(0)
A, B = torch.randn(8, 8), torch.randn(8, 8)


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    autocastgen.clear_runtime_policies()
    yield
    autocastgen.clear_runtime_policies()
    torch._dynamo.reset()


def product(a, b):
    return torch.mm(a, b) + 1


def check_equal_to_eager(compiled, dtype: torch.dtype) -> None:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = compiled(A, B), product(A, B)
    assert want.dtype == dtype
    assert_exact(got, want)


def test_each_policy_change_traces_again_and_gives_eager_values() -> None:
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(product, backend=counter, fullgraph=True)
    # PyTorch's kernel (mm in bfloat16 on the CPU): the graph reached none of ours, so no guard
    # of ours holds it.
    check_equal_to_eager(compiled, torch.bfloat16)
    check_equal_to_eager(compiled, torch.bfloat16)
    assert counter.frame_count == 1
    steps = [
        (lambda: autocastgen.load_policy(MM_FP32), torch.float32),
        (lambda: autocastgen.load_policy(MM_LOWER), torch.bfloat16),  # replaces a policy a graph reached
        (lambda: autocastgen.register_runtime_policy("mm", "fp32"), torch.float32),
        (autocastgen.clear_runtime_policies, torch.bfloat16),  # PyTorch's kernel again
    ]
    for frames, (change, dtype) in enumerate(steps, start=2):
        change()
        check_equal_to_eager(compiled, dtype)
        check_equal_to_eager(compiled, dtype)  # and the new graph is kept
        assert counter.frame_count == frames


def test_a_policy_error_keeps_the_compiled_graphs() -> None:
    # Nothing was registered (all or nothing), so nothing is traced again.
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(product, backend=counter, fullgraph=True)
    autocastgen.load_policy(MM_FP32)
    check_equal_to_eager(compiled, torch.float32)
    with pytest.raises(autocastgen.PolicyError):
        autocastgen.load_policy("autocast: {device: cpu}\nlists:\n  fp32: [no_such_op]\n")
    check_equal_to_eager(compiled, torch.float32)
    assert counter.frame_count == 1


KEYS = f"""
    import json, torch, autocastgen
    from autocastgen._core import traced as _traced
    keys = [_traced.trace_key()]
    autocastgen.load_policy({MM_FP32!r}); keys.append(_traced.trace_key())
    autocastgen.clear_runtime_policies(); keys.append(_traced.trace_key())
    autocastgen.load_policy({MM_FP32!r}); keys.append(_traced.trace_key())
    autocastgen.load_policy({MM_LOWER!r}); keys.append(_traced.trace_key())
    torch.ops.load_library({str(MM_ONLY_LIB)!r}); keys.append(_traced.trace_key())
    print(json.dumps(keys))
"""


def test_the_key_names_the_policies_by_content_in_every_process() -> None:
    first = child_process.last_json(child_process.run_child(BUILD, "", KEYS))
    second = child_process.last_json(child_process.run_child(BUILD, "", KEYS))
    assert first == second  # by content, not by a counter of this process
    initial, loaded, cleared, again, replaced, generated = first
    assert cleared == initial and again == loaded
    assert len({initial, loaded, replaced, generated}) == 4


def test_a_library_loaded_after_compiling_is_used_at_the_next_call() -> None:
    # However the policies change (here a generated library through torch.ops.load_library, not
    # through autocastgen), the runtime drops the compiled code. The library has its own state: its
    # mm runs in float32 outside an autocastgen scope, and in the scope's dtype inside one.
    result = child_process.run_child(BUILD, CHILD_IMPORT, f"""
        import json, torch, autocastgen
        a, b = torch.randn(8, 8), torch.randn(8, 8)
        compiled = torch.compile(lambda a, b: torch.mm(a, b) + 1, backend="aot_eager", fullgraph=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            before = compiled(a, b)
            torch.ops.load_library({str(MM_ONLY_LIB)!r})
            after, want = compiled(a, b), torch.mm(a, b) + 1
        print(json.dumps([str(before.dtype), str(after.dtype), exact(after, want)]))
        """)
    assert child_process.last_json(result) == ["torch.bfloat16", "torch.float32", True]


INDUCTOR_RUN = """
    import json, torch, autocastgen
    from torch._dynamo.utils import counters
    autocastgen.load_policy(POLICY)
    a, b = torch.randn(8, 8), torch.randn(8, 8)

    def product(a, b):
        with torch.no_grad():
            return torch.mm(a, b) * 2

    compiled = torch.compile(product, backend="inductor", fullgraph=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = compiled(a, b), product(a, b)
    torch.testing.assert_close(got, want)
    hits = {group: {k: v for k, v in counters[group].items() if "hit" in k} for group in ("aot_autograd", "inductor")}
    print(json.dumps({"got": str(got.dtype), "want": str(want.dtype), "hits": hits}))
"""


def test_compile_caches_give_a_graph_to_a_process_with_the_same_policies_only(tmp_path: Path) -> None:
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "TORCHINDUCTOR_FX_GRAPH_CACHE": "1"}
    runs = []
    for policy in (MM_FP32, MM_LOWER, MM_FP32):
        result = child_process.run_child(BUILD, f"POLICY = {policy!r}\n", INDUCTOR_RUN, env)
        runs.append(child_process.last_json(result))
    assert [(run["got"], run["want"]) for run in runs] == [("torch.float32", "torch.float32"),
                                                          ("torch.bfloat16", "torch.bfloat16"),
                                                          ("torch.float32", "torch.float32")]
    # The third process has the first one's policies: the caches serve it (the key is stable).
    assert not any(runs[1]["hits"][group].get(name) for group, name in (("aot_autograd", "autograd_cache_hit"),
                                                                      ("inductor", "fxgraph_cache_hit")))
    assert runs[2]["hits"]["inductor"].get("fxgraph_cache_hit", 0) >= 1
