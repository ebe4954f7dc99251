# Conformance on a GPU: PyTorch's own CUDA autocast test lists give bitwise the same results with our library loaded.
"""Runs every case of torch.testing._internal.autocast_test_lists.AutocastTestLists under
torch.autocast("cuda", dtype=...) for float16 and bfloat16, first with PyTorch's built-in
AutocastCUDA kernels, then after torch.ops.load_library(<build>/lib/libautocastgen_torch_cuda.so)
has replaced them with the generated ones, and demands the same dtype, shape, strides and bytes
for every output (or the same error). It checks, as the CPU test does, that every op of the
generated manifest now has its AutocastCUDA kernel from the generated autocast_cuda.cpp, and that
each case of an op in our policy ran its generated wrapper.

PyTorch's own CUDA tests run the float16 lists for bfloat16 too; here every list runs for both.
cuBLAS and cuDNN are made deterministic so that two runs of one case agree bit for bit.

Skips itself without a GPU. Run: AUTOCASTGEN_BUILD_DIR=build python3 -m pytest tests/python/runtime/test_conformance_cuda.py
(scripts/gpu-check runs it on the lent GPU machine.)
"""

from __future__ import annotations

import os
import pathlib

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS; read at its first use

import pytest  # noqa: E402
import torch  # noqa: E402

import requires  # noqa: E402

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
requires.module("expecttest")  # torch.testing._internal imports it

from torch.testing._internal import autocast_test_lists  # noqa: E402

from autocast_conformance import (  # noqa: E402
    autocast_kernel,
    differing_cases,
    make_calls,
    misregistered_kernels,
    run_all,
    wrapper_mismatches,
    wrapper_trace_function,
)

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
LIBRARY = BUILD / "lib" / "libautocastgen_torch_cuda.so"
RUNTIME = BUILD / "lib" / "libautocastgen_runtime_torch.so"
MANIFEST = BUILD / "schemas" / "autocastgen_cuda" / "autocast_cuda.manifest.json"


# How each list of AutocastTestLists is run (as PyTorch's CUDA autocast tests run it): the module
# whose function is tried besides the Tensor method, and how an entry maps to
# (op, {amp dtype name: args}, kwargs).
def _plain(entry):
    """(op, args[, kwargs | skip-on-ROCm flag | expected dtype | tensors after a leading string])."""
    op, args, kwargs = entry[0], entry[1], {}
    if len(entry) > 2:
        extra = entry[2]
        if isinstance(extra, dict):
            kwargs = extra
        elif isinstance(extra, tuple):  # einsum: (op, equation, operands)
            args = (args, *extra)
    return op, {"bf16": args, "fp16": args}, kwargs


LISTS = {
    "torch_expect_builtin_promote": (torch, _plain),
    "methods_expect_builtin_promote": (None, _plain),
    "torch_fp16": (torch, _plain),
    "torch_fp32": (torch, _plain),
    "torch_need_autocast_promote": (torch, _plain),
    "nn_fp16": (torch._C._nn, _plain),
    "nn_fp32": (torch._C._nn, _plain),
    "linalg_fp16": (torch._C._linalg, _plain),
    "methods_fp16": (None, _plain),
    "methods_fp32": (None, _plain),
    # (op, args, module): the module is the entry's own.
    "banned": (torch._C._nn, _plain),
}


@pytest.fixture(scope="module")
def runs():
    if not LIBRARY.exists() or not MANIFEST.exists():
        pytest.fail(f"{LIBRARY} or {MANIFEST} is missing: build first (AUTOCASTGEN_BUILD_DIR={BUILD})")
    # torch.testing._internal freezes the global cuDNN flags: set them through its context manager.
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True):
        return run_both()


def run_both():
    before_kernel = autocast_kernel("AutocastCUDA", "aten::conv2d")
    torch.manual_seed(0)
    lists = autocast_test_lists.AutocastTestLists(torch.device("cuda"))
    assert all(entry[2] is torch._C._nn for entry in lists.banned), "a banned op outside torch._C._nn"
    calls = make_calls(lists, LISTS)
    baseline = run_all(calls, "cuda")
    torch.ops.load_library(str(LIBRARY))
    ours = run_all(calls, "cuda", trace=wrapper_trace_function(RUNTIME))
    torch.cuda.synchronize()
    return {"calls": calls, "baseline": baseline, "ours": ours, "before_kernel": before_kernel}


def test_library_kernels_replace_pytorch_ones(runs):
    assert runs["before_kernel"] is not None and "autocast_cuda.cpp" not in runs["before_kernel"], (
        f"the AutocastCUDA kernel of aten::conv2d came from our library before it was loaded: {runs['before_kernel']}")
    folder = BUILD / "schemas" / "autocastgen_cuda"
    generated = {p.resolve() for p in [folder / "autocast_cuda.cpp", *folder.glob("autocast_cuda.shard*.cpp")]}
    wrong = misregistered_kernels("AutocastCUDA", MANIFEST, generated, BUILD)
    assert not wrong, f"AutocastCUDA kernels not registered from {sorted(map(str, generated))}: {wrong}"


def test_lists_are_all_run(runs):
    counts = {}
    for case_id, *_ in runs["calls"]:
        list_name = case_id.split("[", 1)[0]
        counts[list_name] = counts.get(list_name, 0) + 1
    for list_name in ("torch_fp16", "torch_fp32", "nn_fp16", "nn_fp32", "torch_need_autocast_promote", "banned"):
        assert counts.get(list_name, 0) > 0, f"AutocastTestLists.{list_name} gave no cases: {counts}"


def test_banned_ops_raise(runs):
    for case_id, *_ in runs["calls"]:
        if case_id.startswith("banned"):
            assert isinstance(runs["ours"][case_id][0], RuntimeError), case_id


def test_same_results_with_generated_kernels(runs):
    failures = differing_cases(runs)
    print(f"conformance_cuda: {len(runs['calls']) - len(failures)} of {len(runs['calls'])} cases bitwise equal")
    assert not failures, f"{len(failures)} of {len(runs['calls'])} cases differ:\n" + "\n".join(failures)


def test_generated_wrappers_ran(runs):
    """Each call of an op in our policy ran exactly its generated wrapper; other ops ran none."""
    # torch.norm is in no CUDA list; it decomposes into linalg_vector_norm, which cuda.yaml lists.
    failures = wrapper_mismatches(runs, MANIFEST, decompositions={"norm": "linalg_vector_norm"})
    assert not failures, "\n".join(failures)
