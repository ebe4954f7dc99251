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

Run: AUTOCASTGEN_BUILD_DIR=build python3 -m pytest tests/python/test_conformance_cpu.py
"""

from __future__ import annotations

import ctypes
import json
import os
import pathlib
import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")  # torch.testing._internal imports it
autocast_test_lists = pytest.importorskip("torch.testing._internal.autocast_test_lists")

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
LIBRARY = BUILD / "lib" / "libautocastgen_torch_cpu.so"
RUNTIME = BUILD / "lib" / "libautocastgen_runtime_torch.so"
MANIFEST = BUILD / "schemas" / "autocastgen_cpu" / "autocast_cpu.manifest.json"

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

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


class WrapperTrace(ctypes.Structure):
    """autocastgen::torch::WrapperTrace (runtime/include/autocastgen/torch/policy_call.h)."""

    _fields_ = [("last_op", ctypes.c_char_p), ("calls", ctypes.c_uint64)]


def wrapper_trace_function():
    """autocastgen::torch::wrapper_trace(), the calling thread's trace of generated wrappers."""
    runtime = ctypes.CDLL(str(RUNTIME), mode=ctypes.RTLD_GLOBAL)
    function = runtime._ZN11autocastgen5torch13wrapper_traceEv  # mangled autocastgen::torch::wrapper_trace()
    function.restype = ctypes.POINTER(WrapperTrace)
    function.argtypes = []
    return lambda: function().contents


def make_calls():
    """[(case id, op, amp dtype name, callable)] for every entry of every list, both dtypes, and
    both the module function and the Tensor method where they exist."""
    torch.manual_seed(0)
    lists = autocast_test_lists.AutocastCPUTestLists(torch.device("cpu"))
    found = {name: value for name, value in vars(lists).items() if isinstance(value, list)}
    unknown = sorted(set(found) - set(LISTS))
    assert not unknown, f"AutocastCPUTestLists has lists this test does not know how to run: {unknown}"
    calls = []
    for list_name, entries in found.items():
        module, unpack = LISTS[list_name]
        for index, entry in enumerate(entries):
            op, args_by_dtype, kwargs = unpack(entry)
            for dtype_name, args in args_by_dtype.items():
                variants = []
                if module is not None and hasattr(module, op):
                    variants.append((f"{module.__name__}.{op}", getattr(module, op), args))
                if hasattr(torch.Tensor, op):
                    variants.append((f"Tensor.{op}", getattr(torch.Tensor, op), args))
                assert variants, f"{list_name}: {op} is neither a function of {module} nor a Tensor method"
                for label, function, call_args in variants:
                    case_id = f"{list_name}[{index}] {label} autocast={dtype_name}"
                    calls.append((case_id, op, dtype_name,
                                  (lambda f=function, a=call_args, k=kwargs: f(*a, **k))))
    return calls


def run_all(calls, trace=None):
    """{case id: (output or exception, wrapper trace after the call or None)}."""
    results = {}
    for case_id, _, dtype_name, call in calls:
        assert not torch.is_autocast_enabled("cpu")
        before = None
        if trace is not None:
            t = trace()
            t.last_op = None
            before = t.calls
        try:
            with torch.autocast("cpu", dtype=AMP_DTYPES[dtype_name]):
                out = call()
        except Exception as error:  # noqa: BLE001 -- a PyTorch error must be reproduced exactly
            out = error
        seen = None
        if trace is not None:
            t = trace()
            seen = (t.calls - before, t.last_op.decode() if t.last_op else None)
        results[case_id] = (out, seen)
    return results


def autocast_cpu_kernel(qualified_name):
    """Where the active AutocastCPU kernel of an op was registered (file path), or None."""
    for line in torch._C._dispatch_dump(qualified_name).splitlines():
        match = re.match(r"AutocastCPU: registered at (.*):\d+ ", line)
        if match:
            return match.group(1)
    return None


def manifest_ops():
    with open(MANIFEST) as fh:
        return [entry["op"] for entry in json.load(fh)["ops"]]


@pytest.fixture(scope="module")
def runs():
    if not LIBRARY.exists() or not MANIFEST.exists():
        pytest.fail(f"{LIBRARY} or {MANIFEST} is missing: build first (AUTOCASTGEN_BUILD_DIR={BUILD})")
    before_kernel = autocast_cpu_kernel("aten::conv2d")
    calls = make_calls()
    baseline = run_all(calls)
    torch.ops.load_library(str(LIBRARY))
    ours = run_all(calls, trace=wrapper_trace_function())
    return {"calls": calls, "baseline": baseline, "ours": ours, "before_kernel": before_kernel}


def bits(t):
    return t.detach().resolve_conj().resolve_neg().contiguous().reshape(-1).view(torch.uint8)


def difference(expected, actual, path="output"):
    """Description of the first difference between two results, or None."""
    if isinstance(expected, BaseException) or isinstance(actual, BaseException):
        if type(expected) is not type(actual) or str(expected) != str(actual):
            return f"{path}: expected {expected!r}, got {actual!r}"
        return None
    if type(expected) is not type(actual):
        return f"{path}: expected {type(expected).__name__}, got {type(actual).__name__}"
    if isinstance(expected, torch.Tensor):
        for what in ("dtype", "shape", "layout", "device"):
            if getattr(expected, what) != getattr(actual, what):
                return f"{path}: {what} {getattr(expected, what)} != {getattr(actual, what)}"
        if expected.stride() != actual.stride():
            return f"{path}: strides {expected.stride()} != {actual.stride()}"
        if not torch.equal(bits(expected), bits(actual)):
            return f"{path}: values differ bitwise: expected {expected}, got {actual}"
        return None
    if isinstance(expected, (tuple, list)):
        if len(expected) != len(actual):
            return f"{path}: length {len(expected)} != {len(actual)}"
        for i, (e, a) in enumerate(zip(expected, actual)):
            found = difference(e, a, f"{path}[{i}]")
            if found:
                return found
        return None
    if isinstance(expected, float):
        return None if repr(expected) == repr(actual) else f"{path}: {expected!r} != {actual!r}"
    return None if expected == actual else f"{path}: {expected!r} != {actual!r}"


def test_comparison_notices_differences():
    t = torch.tensor([1.0, float("nan"), -0.0])
    assert difference(t, t.clone()) is None  # NaN in the same place is equal
    assert difference(t, torch.tensor([1.0, float("nan"), 0.0])) is not None  # -0.0 is not 0.0
    assert difference(t, t.to(torch.bfloat16)) is not None
    assert difference(t, t.reshape(3, 1)) is not None
    m = torch.randn(2, 3)
    assert difference(m, m.t().contiguous().t()) is not None  # same values, other strides
    assert difference((m, m), (m, m + 1)) == f"output[1]: values differ bitwise: expected {m}, got {m + 1}"
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
    wrong = {}
    ops = manifest_ops()
    assert ops
    for op in ops:
        where = autocast_cpu_kernel(op if "::" in op else f"aten::{op}")
        # A relative __FILE__ (ccache with CCACHE_BASEDIR rewrites paths so) is relative to the
        # build directory, where the compiler ran.
        if where is None or (BUILD / where).resolve() not in generated:
            wrong[op] = where
    assert not wrong, f"AutocastCPU kernels not registered from {sorted(map(str, generated))}: {wrong}"


def test_lists_are_all_run(runs):
    counts = {}
    for case_id, *_ in runs["calls"]:
        list_name = case_id.split("[", 1)[0]
        counts[list_name] = counts.get(list_name, 0) + 1
    for list_name in ("torch_16", "torch_fp32", "nn_16", "nn_fp32", "torch_need_autocast_promote"):
        assert counts.get(list_name, 0) > 0, f"AutocastCPUTestLists.{list_name} gave no cases: {counts}"


def test_same_results_with_generated_kernels(runs):
    failures = []
    for case_id, op, _, _ in runs["calls"]:
        found = difference(runs["baseline"][case_id][0], runs["ours"][case_id][0])
        if found:
            failures.append(f"{case_id} ({op}): {found}")
    assert not failures, f"{len(failures)} of {len(runs['calls'])} cases differ:\n" + "\n".join(failures)


def test_generated_wrappers_ran(runs):
    """Each call of an op in our policy ran exactly its generated wrapper; other ops ran none."""
    ours = {op.split(".")[0] for op in manifest_ops()}
    failures = []
    for case_id, op, _, _ in runs["calls"]:
        calls, last_op = runs["ours"][case_id][1]
        # Tensor.__eq__ and friends reach aten::eq etc., which are in no list.
        base = op.strip("_") if op.startswith("__") else op
        if base in ours:
            if calls != 1 or last_op is None or last_op.split("::")[1].split(".")[0] != base:
                failures.append(f"{case_id}: {calls} wrapper calls, last {last_op}")
        elif calls != 0:
            failures.append(f"{case_id}: {op} is in no list, yet {calls} wrapper calls ran (last {last_op})")
    assert not failures, "\n".join(failures)
