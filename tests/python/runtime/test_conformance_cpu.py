# Conformance: PyTorch's own CPU autocast test lists give bitwise the same results with our library loaded.
"""Runs every case of torch.testing._internal.autocast_test_lists.AutocastCPUTestLists under
torch.autocast("cpu", dtype=...) (bfloat16 and float16, as PyTorch's own CPU autocast tests do),
first with PyTorch's built-in AutocastCPU kernels, then again after
torch.ops.load_library(<build>/lib/libautocastgen_torch_cpu.so) has replaced them with the
generated ones, and demands the same dtype, shape, strides and bytes for every output (or the same
error). Loading is irreversible, so one module-scoped fixture does both runs in this process.

It also checks that, after loading, the dispatcher's AutocastCPU kernel of every op of the
generated manifest comes from the generated autocast_cpu.cpp (or one of its shards), and that each
case of an op in our policy really ran a generated wrapper (read through the runtime's
wrapper_trace()).

Run: AUTOCASTGEN_BUILD_DIR=build python3 -m pytest tests/python/runtime/test_conformance_cpu.py
"""

from __future__ import annotations

import os
import pathlib

import pytest
import torch

import requires

requires.module("expecttest")  # torch.testing._internal imports it

from torch.testing._internal import autocast_test_lists  # noqa: E402

from autocast_conformance import (  # noqa: E402
    autocast_kernel,
    difference,
    differing_cases,
    make_calls,
    misregistered_kernels,
    run_all,
    wrapper_mismatches,
    wrapper_trace_function,
)

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
LIBRARY = BUILD / "lib" / "libautocastgen_torch_cpu.so"
RUNTIME = BUILD / "lib" / "libautocastgen_runtime_torch.so"
MANIFEST = BUILD / "schemas" / "autocastgen_cpu" / "autocast_cpu.manifest.json"

# How each list of AutocastCPUTestLists is run (as test/test_autocast.py's TestAutocastCPU runs
# it): the module whose function is tried besides the Tensor method, and how an entry's fields
# map to (op, {amp dtype name: args}, kwargs).  A list this table does not know fails the test,
# so a new list in a newer PyTorch is noticed.
def _same_args_both_dtypes(entry):
    op, args = entry[0], entry[1]
    kwargs = entry[2] if len(entry) > 2 else {}
    return op, {"bf16": args, "fp16": args}, kwargs


def _args_per_dtype(entry):  # (op, args for bfloat16, args for float16[, expected out dtype])
    return entry[0], {"bf16": entry[1], "fp16": entry[2]}, {}


LISTS = {
    "torch_expect_builtin_promote": (torch, _args_per_dtype),
    "methods_expect_builtin_promote": (None, _args_per_dtype),
    "torch_16": (torch, _same_args_both_dtypes),
    "torch_fp32": (torch, _same_args_both_dtypes),
    "nn_16": (torch._C._nn, _same_args_both_dtypes),
    "nn_fp32": (torch._C._nn, _same_args_both_dtypes),
    "torch_need_autocast_promote": (torch, _args_per_dtype),
}


@pytest.fixture(scope="module")
def runs():
    if not LIBRARY.exists() or not MANIFEST.exists():
        pytest.fail(f"{LIBRARY} or {MANIFEST} is missing: build first (AUTOCASTGEN_BUILD_DIR={BUILD})")
    before_kernel = autocast_kernel("AutocastCPU", "aten::conv2d")
    torch.manual_seed(0)
    calls = make_calls(autocast_test_lists.AutocastCPUTestLists(torch.device("cpu")), LISTS)
    baseline = run_all(calls, "cpu")
    torch.ops.load_library(str(LIBRARY))
    ours = run_all(calls, "cpu", trace=wrapper_trace_function(RUNTIME))
    return {"calls": calls, "baseline": baseline, "ours": ours, "before_kernel": before_kernel}


def test_comparison_notices_differences():
    t = torch.tensor([1.0, float("nan"), -0.0])
    assert difference(t, t.clone()) is None  # NaN in the same place is equal
    assert difference(t, torch.tensor([1.0, float("nan"), 0.0])) is not None  # -0.0 is not 0.0
    assert difference(t, t.to(torch.bfloat16)) is not None
    assert difference(t, t.reshape(3, 1)) is not None
    m = torch.randn(2, 3)
    assert difference(m, m.t().contiguous().t()) is not None  # same values, other strides
    assert difference((m, m), (m, m + 1)).startswith("output[1]: 6 of 6 elements differ in their bits; the first at [0, 0]: ")
    assert difference([m], [m, m]) is not None
    assert difference(RuntimeError("a"), RuntimeError("b")) is not None
    assert difference(RuntimeError("a"), m) is not None


def test_library_kernels_replace_pytorch_ones(runs):
    assert runs["before_kernel"] is not None and "autocast_cpu.cpp" not in runs["before_kernel"], (
        "the AutocastCPU kernel of aten::conv2d came from our library before it was loaded: "
        f"{runs['before_kernel']}")
    # The generated source, or its shards (add_autocast_ops SHARDS: autocast_cpu.shard<k>.cpp).
    folder = BUILD / "schemas" / "autocastgen_cpu"
    generated = {p.resolve() for p in [folder / "autocast_cpu.cpp", *folder.glob("autocast_cpu.shard*.cpp")]}
    wrong = misregistered_kernels("AutocastCPU", MANIFEST, generated, BUILD)
    assert not wrong, f"AutocastCPU kernels not registered from {sorted(map(str, generated))}: {wrong}"


def test_lists_are_all_run(runs):
    counts = {}
    for case_id, *_ in runs["calls"]:
        list_name = case_id.split("[", 1)[0]
        counts[list_name] = counts.get(list_name, 0) + 1
    for list_name in ("torch_16", "torch_fp32", "nn_16", "nn_fp32", "torch_need_autocast_promote"):
        assert counts.get(list_name, 0) > 0, f"AutocastCPUTestLists.{list_name} gave no cases: {counts}"


def test_same_results_with_generated_kernels(runs):
    failures = differing_cases(runs)
    assert not failures, f"{len(failures)} of {len(runs['calls'])} cases differ:\n" + "\n".join(failures)


def test_generated_wrappers_ran(runs):
    """Each call of an op in our policy ran exactly its generated wrapper; other ops ran none."""
    failures = wrapper_mismatches(runs, MANIFEST)
    assert not failures, "\n".join(failures)
