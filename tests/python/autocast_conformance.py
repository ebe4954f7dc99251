"""What the conformance tests share: running PyTorch's autocast test lists, reading which kernel
the dispatcher holds, the wrapper trace, and a bitwise comparison of results.

test_conformance_cpu.py runs AutocastCPUTestLists against libautocastgen_torch_cpu.so,
test_conformance_cuda.py AutocastTestLists against libautocastgen_torch_cuda.so (on a GPU).
"""
from __future__ import annotations

import ctypes
import json
import re

import torch

import exact

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class WrapperTrace(ctypes.Structure):
    """autocastgen::torch::WrapperTrace (runtime/include/autocastgen/torch/policy_call.h)."""

    _fields_ = [("last_op", ctypes.c_char_p), ("calls", ctypes.c_uint64)]


def wrapper_trace_function(runtime_library):
    """autocastgen::torch::wrapper_trace(), the calling thread's trace of generated wrappers."""
    runtime = ctypes.CDLL(str(runtime_library), mode=ctypes.RTLD_GLOBAL)
    function = runtime._ZN11autocastgen5torch13wrapper_traceEv  # mangled autocastgen::torch::wrapper_trace()
    function.restype = ctypes.POINTER(WrapperTrace)
    function.argtypes = []
    return lambda: function().contents


def make_calls(lists, table):
    """[(case id, op, amp dtype name, callable)] for every entry of every list of `lists` (an
    Autocast*TestLists object), both amp dtypes, and both the module function and the Tensor method
    where they exist. `table` maps a list's name to (module or None, unpack), unpack(entry) giving
    (op, {amp dtype name: args}, kwargs). A list the table does not know fails, so a new list in a
    newer PyTorch is noticed."""
    found = {name: value for name, value in vars(lists).items() if isinstance(value, list)}
    unknown = sorted(set(found) - set(table))
    assert not unknown, f"{type(lists).__name__} has lists this test does not know how to run: {unknown}"
    calls = []
    for list_name, entries in found.items():
        module, unpack = table[list_name]
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


def run_all(calls, device_type, trace=None):
    """{case id: (output or exception, (wrapper calls, last op) after the call, or None)}."""
    results = {}
    for case_id, _, dtype_name, call in calls:
        assert not torch.is_autocast_enabled(device_type)
        before = None
        if trace is not None:
            t = trace()
            t.last_op = None
            before = t.calls
        try:
            with torch.autocast(device_type, dtype=AMP_DTYPES[dtype_name]):
                out = call()
        except Exception as error:  # noqa: BLE001 -- a PyTorch error must be reproduced exactly
            out = error
        seen = None
        if trace is not None:
            t = trace()
            seen = (t.calls - before, t.last_op.decode() if t.last_op else None)
        results[case_id] = (out, seen)
    return results


def autocast_kernel(dispatch_key, qualified_name):
    """Where the active kernel of an op for `dispatch_key` (AutocastCPU, AutocastCUDA) was
    registered (file path), or None."""
    for line in torch._C._dispatch_dump(qualified_name).splitlines():
        match = re.match(rf"{dispatch_key}: registered at (.*):\d+ ", line)
        if match:
            return match.group(1)
    return None


def manifest_ops(manifest):
    with open(manifest) as fh:
        return [entry["op"] for entry in json.load(fh)["ops"]]


def difference(expected, actual, path="output"):
    """Description of the first difference between two results, or None: the same exception, or
    exact results (exact.py: dtype, shape, bits) in the same strides."""
    if isinstance(expected, BaseException) or isinstance(actual, BaseException):
        if type(expected) is not type(actual) or str(expected) != str(actual):
            return f"{path}: expected {expected!r}, got {actual!r}"
        return None
    if type(expected) is not type(actual):
        return f"{path}: expected {type(expected).__name__}, got {type(actual).__name__}"
    return exact.difference(actual, expected, path, strides=True)


def differing_cases(runs):
    """['case (op): difference'] for every case whose result with the generated kernels differs."""
    failures = []
    for case_id, op, _, _ in runs["calls"]:
        found = difference(runs["baseline"][case_id][0], runs["ours"][case_id][0])
        if found:
            failures.append(f"{case_id} ({op}): {found}")
    return failures


def wrapper_mismatches(runs, manifest, decompositions=None):
    """Cases where an op of the policy did not run exactly its generated wrapper, or an op in no
    list ran one. `decompositions` maps an op in no list to the listed op its implementation
    calls (torch.norm reaches linalg_vector_norm's wrapper, as it reaches PyTorch's kernel)."""
    decompositions = decompositions or {}
    ours = {op.split(".")[0] for op in manifest_ops(manifest)}
    failures = []
    for case_id, op, _, _ in runs["calls"]:
        calls, last_op = runs["ours"][case_id][1]
        # Tensor.__eq__ and friends reach aten::eq etc., which are in no list.
        base = op.strip("_") if op.startswith("__") else op
        if base in decompositions:
            if calls != 1 or last_op is None or last_op.split("::")[1].split(".")[0] != decompositions[base]:
                failures.append(f"{case_id}: {calls} wrapper calls, last {last_op}, not {decompositions[base]}")
        elif base in ours:
            if calls != 1 or last_op is None or last_op.split("::")[1].split(".")[0] != base:
                failures.append(f"{case_id}: {calls} wrapper calls, last {last_op}")
        elif calls != 0:
            failures.append(f"{case_id}: {op} is in no list, yet {calls} wrapper calls ran (last {last_op})")
    return failures


def misregistered_kernels(dispatch_key, manifest, generated, build_dir):
    """{op: where its kernel came from} for the manifest's ops whose `dispatch_key` kernel is not
    from one of the `generated` source files."""
    wrong = {}
    ops = manifest_ops(manifest)
    assert ops
    for op in ops:
        where = autocast_kernel(dispatch_key, op if "::" in op else f"aten::{op}")
        # A relative __FILE__ (ccache with CCACHE_BASEDIR rewrites paths so) is relative to the
        # build directory, where the compiler ran.
        if where is None or (build_dir / where).resolve() not in generated:
            wrong[op] = where
    return wrong
