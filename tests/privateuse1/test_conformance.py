"""PyTorch's own autocast op lists, run on mydevice under torch.autocast("mydevice").

The cases are those of torch.testing._internal.autocast_test_lists.AutocastTestLists (the lists
PyTorch tests its CUDA autocast with), constructed for torch.device("mydevice"). For each case,
under float16 and under bfloat16:
- the output dtype is the one PyTorch's list expects (the lower-precision dtype for the *_fp16
  lists, float32 for *_fp32 and the promote lists, the listed dtype for the built-in promotions),
  for the torch.* / torch._C._nn.* / torch._C._linalg.* function and for the Tensor method alike;
- the values equal the same op run on the CPU, outside autocast, with the inputs cast by hand.
Ops that a list has but mydevice's policy does not are reported (test_not_in_policy_report), and
must be exactly the ones named there; they are not counted as passed. The banned op raises
PyTorch's own error text.
"""

from __future__ import annotations

import collections.abc
import json
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from conftest import MYDEVICE_DIR, import_mydevice
from exact import difference

mydevice = import_mydevice()

LOWER = (torch.float16, torch.bfloat16)

# (list name, module whose function is tried first, policy dtype: "lower", "fp32" or None for the
# dtype the case names itself).
CATEGORIES = [
    ("torch_expect_builtin_promote", torch, None),
    ("methods_expect_builtin_promote", None, None),
    ("torch_fp16", torch, "lower"),
    ("torch_fp32", torch, "fp32"),
    ("torch_need_autocast_promote", torch, "fp32"),
    ("nn_fp16", torch._C._nn, "lower"),
    ("nn_fp32", torch._C._nn, "fp32"),
    ("linalg_fp16", torch._C._linalg, "lower"),
    ("methods_fp16", None, "lower"),
    ("methods_fp32", None, "fp32"),
]

# Cases whose op takes a different path on an accelerator than on the CPU, so mydevice's result is
# close to the CPU control but not bit for bit: compared with the dtype's tolerance.
NOT_BITWISE = {
    "lstm_cell": "PrivateUse1 takes the fused-cell path (_thnn_fused_lstm_cell, as CUDA); the CPU does not",
    "gru_cell": "PrivateUse1 takes the fused-cell path (_thnn_fused_gru_cell, as CUDA); the CPU does not",
}

# Ops of PyTorch's CUDA lists that the device-neutral generic.yaml (and so mydevice's policy) does
# not list, and why. A change to the policy that adds or drops one shows up here.
EXPECTED_NOT_IN_POLICY = {
    "cudnn_convolution": "cuDNN only; PyTorch lists it for AutocastCUDA, not for the generic backends",
    "cudnn_convolution_transpose": "cuDNN only; PyTorch lists it for AutocastCUDA, not for the generic backends",
}
if tuple(int(part) for part in torch.__version__.split(".")[:2]) < (2, 12):
    EXPECTED_NOT_IN_POLICY["rms_norm"] = (
        "PyTorch lists it for the generic backends from 2.12 (generic.yaml: since 2.12); this torch is older"
    )


@dataclass(frozen=True)
class Case:
    category: str
    index: int
    op: str
    args: tuple
    kwargs: dict
    module: Any
    policy_dtype: str | None  # "lower", "fp32", or None
    out_type: torch.dtype | None  # for the built-in promotion lists
    problem: str | None  # why the case cannot run as PyTorch wrote it

    @property
    def aten_name(self) -> str:
        return self.op[2:-2] if self.op.startswith("__") and self.op.endswith("__") else self.op


def _cases() -> list[Case]:
    if mydevice is None:
        return []
    from torch.testing._internal.autocast_test_lists import AutocastTestLists

    lists = AutocastTestLists(torch.device("mydevice"))
    cases = []
    for category, module, policy_dtype in CATEGORIES:
        for index, entry in enumerate(getattr(lists, category)):
            op, args, extra = entry[0], entry[1], entry[2] if len(entry) > 2 else None
            kwargs, out_type, problem = {}, None, None
            if policy_dtype is None:
                out_type = extra
            elif isinstance(extra, dict):
                kwargs = extra
            elif isinstance(extra, bool):
                problem = "skipped by PyTorch's list on ROCm" if extra else None
            elif extra is not None:
                # ("einsum", "bkhd,bqhd->bqkh", (mat0, mat1)): PyTorch's test reads the third item
                # as its skip flag, so it never runs this case (2-D inputs for a 4-D equation).
                problem = (f"malformed in PyTorch's list ({op!r} has a third item {type(extra).__name__}); PyTorch's own "
                           "test skips it; run here with the equation 'ij,jk->ik' instead")
            if isinstance(args, str):
                problem = problem or f"arguments are a str: {args!r}"
            cases.append(Case(category, index, op, tuple(args) if not isinstance(args, str) else (),
                              kwargs, module, policy_dtype, out_type, problem))
            if op == "einsum" and isinstance(args, str) and isinstance(extra, tuple):
                # The same operands with an equation that fits them, so einsum is still checked.
                cases.append(Case(category, index, op, ("ij,jk->ik", *extra), {}, module, policy_dtype, None, None))
    return cases


CASES = _cases()


def _policy_ops() -> set[str]:
    """The aten base names of the ops mydevice's generated autocast kernels cover (its manifest)."""
    manifests = list(MYDEVICE_DIR.glob("autocastgen_*/autocast_*.manifest.json"))
    assert len(manifests) == 1, f"expected one manifest under {MYDEVICE_DIR}, found {manifests}"
    names = set()
    for entry in json.loads(manifests[0].read_text())["ops"]:
        op = entry["op"]
        if "::" in op:
            continue
        names.add(op.split(".")[0])
    return names


POLICY_OPS = _policy_ops() if mydevice is not None else set()


def _in_policy(case: Case) -> bool:
    return case.policy_dtype is None or case.aten_name in POLICY_OPS


def _to_cpu(value: Any, dtype: torch.dtype | None) -> Any:
    """A mydevice argument as the CPU control gets it: moved to the CPU, floats cast to `dtype`."""
    if isinstance(value, torch.Tensor):
        value = value.cpu()
        return value.to(dtype) if dtype is not None and value.is_floating_point() else value
    if isinstance(value, (str, bytes)):
        return value
    if isinstance(value, collections.abc.Iterable):
        return type(value)(_to_cpu(v, dtype) for v in value)
    return value


def _same(device_result: Any, cpu_result: Any, path: str = "result") -> str | None:
    """None when every tensor is on mydevice and exact (Note [exact results] in tests/python/exact.py:
    dtype, shape and every bit) against the CPU control, else where they differ."""
    if isinstance(device_result, torch.Tensor):
        if device_result.device.type != "mydevice":
            return f"{path} is on {device_result.device}, not mydevice"
        return difference(device_result.cpu(), cpu_result, path)
    if isinstance(device_result, collections.abc.Iterable) and not isinstance(device_result, str):
        for i, (a, b) in enumerate(zip(device_result, cpu_result, strict=True)):
            if (found := _same(a, b, f"{path}[{i}]")) is not None:
                return found
        return None
    return None if device_result == cpu_result else f"{path} {device_result!r} vs {cpu_result!r}"


def _assert_within_ulps(result: Any, control: Any, what: str, ulps: int = 4) -> None:
    """Same dtypes and shapes, values within `ulps` units of the dtype's epsilon at the output's scale.

    The fused cells compute in float32 and round once; the CPU's unfused cell rounds after every
    op, so the two differ by a few units in the last place.
    """
    if isinstance(result, torch.Tensor):
        assert result.dtype == control.dtype, f"{what}: dtype {result.dtype} vs {control.dtype}"
        scale = control.abs().max().item()
        tolerance = ulps * torch.finfo(control.dtype).eps * max(scale, 1.0)
        torch.testing.assert_close(result, control, rtol=0, atol=tolerance, msg=lambda m: f"{what}: {m}")
        return
    for r, c in zip(result, control, strict=True):
        _assert_within_ulps(r, c, what, ulps)


def _for_dtype(case: Case, amp_dtype: torch.dtype) -> tuple:
    """The case's arguments for a run under `amp_dtype`.

    PyTorch wrote the promote list for float16 autocast: it mixes float16 with float32 inputs.
    Under bfloat16 autocast PyTorch's own at::autocast::prioritize refuses a float16 input
    (test_bfloat16_autocast_refuses_float16_in_promote), so there the float16 inputs become bfloat16.
    """
    if case.category != "torch_need_autocast_promote" or amp_dtype == torch.float16:
        return case.args

    def convert(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.to(amp_dtype) if value.dtype == torch.float16 else value
        if isinstance(value, (list, tuple)):
            return type(value)(convert(v) for v in value)
        return value

    return convert(case.args)


def _run_case(case: Case, amp_dtype: torch.dtype) -> None:
    args = _for_dtype(case, amp_dtype)
    if case.policy_dtype == "lower":
        expected, cast_to = amp_dtype, amp_dtype
    elif case.policy_dtype == "fp32":
        expected, cast_to = torch.float32, torch.float32
    else:
        expected, cast_to = case.out_type, None
    outputs = {}
    with torch.autocast("mydevice", dtype=amp_dtype):
        assert torch.is_autocast_enabled("mydevice")
        if case.module is not None and hasattr(case.module, case.op):
            outputs["function"] = getattr(case.module, case.op)(*args, **case.kwargs)
        if hasattr(torch.Tensor, case.op):
            outputs["method"] = getattr(args[0], case.op)(*args[1:], **case.kwargs)
    assert outputs, f"{case.op} is neither in {case.module} nor a Tensor method"
    for variant, output in outputs.items():
        if isinstance(output, torch.Tensor):
            assert output.dtype == expected, f"{variant} {case.op} produced {output.dtype}, PyTorch's list expects {expected}"

    cpu_args = _to_cpu(args, cast_to)
    if case.module is not None and hasattr(case.module, case.op):
        control = getattr(case.module, case.op)(*cpu_args, **case.kwargs)
    else:
        control = getattr(cpu_args[0], case.op)(*cpu_args[1:], **case.kwargs)
    for variant, output in outputs.items():
        if case.op in NOT_BITWISE:
            _assert_within_ulps(_to_cpu(output, None), control, f"{variant} {case.op}")
            continue
        found = _same(output, control)
        assert found is None, f"{variant} {case.op}: {found}"


@pytest.mark.parametrize("amp_dtype", LOWER, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("case", [c for c in CASES if _in_policy(c) and c.problem is None],
                         ids=lambda c: f"{c.category}-{c.index}-{c.op}")
def test_autocast_list_case(case: Case, amp_dtype: torch.dtype, mydevice_module) -> None:
    _run_case(case, amp_dtype)


def test_not_in_policy_report(mydevice_module, capsys) -> None:
    """Reports every case that is not run above, and why; the policy gaps must be the known ones."""
    not_listed = sorted({c.aten_name for c in CASES if not _in_policy(c)})
    unrunnable = [c for c in CASES if c.problem is not None]
    runnable = [c for c in CASES if _in_policy(c) and c.problem is None]
    with capsys.disabled():
        listed = sum(1 for c in CASES if not (c.op == "einsum" and c.args and c.args[0] == "ij,jk->ik"))
        print(f"\nAutocastTestLists(torch.device('mydevice')): {listed} cases (and einsum with a corrected "
              f"equation); {len(runnable)} run per dtype (float16, bfloat16)")
        for name, why in NOT_BITWISE.items():
            print(f"  compared within the dtype's tolerance, not bit for bit: {name}: {why}")
        for name in not_listed:
            print(f"  not in mydevice's policy: {name}: {EXPECTED_NOT_IN_POLICY.get(name, 'UNEXPECTED')}")
        for case in unrunnable:
            print(f"  not run: {case.category}[{case.index}] {case.op}: {case.problem}")
    in_lists = {c.aten_name for c in CASES if c.policy_dtype is not None}
    expected = {name for name in EXPECTED_NOT_IN_POLICY if name in in_lists}
    assert set(not_listed) == expected, (
        f"ops of PyTorch's lists that mydevice's policy lacks: {not_listed}; expected {sorted(expected)} "
        "(update EXPECTED_NOT_IN_POLICY with the reason when the policy changes on purpose)"
    )


def test_bfloat16_autocast_refuses_float16_in_promote(mydevice_module) -> None:
    """A float16 input to a promote op under bfloat16 autocast: PyTorch's prioritize refuses it."""
    half = torch.randn(8, dtype=torch.float16, device="mydevice")
    single = torch.randn(8, device="mydevice")
    with torch.autocast("mydevice", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="Unexpected floating ScalarType in at::autocast::prioritize"):
            torch.dot(half, single)


def _pytorch_banned_message(op_name: str, args: tuple) -> str:
    """PyTorch's own error for a banned op: its AutocastCUDA kernel, called directly (no GPU needed)."""
    op = getattr(torch.ops.aten, op_name).default
    with pytest.raises(RuntimeError) as raised:
        op.redispatch(torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA), *args)
    return str(raised.value)


def test_banned_op_raises_pytorchs_message(mydevice_module) -> None:
    from torch.testing._internal.autocast_test_lists import AutocastTestLists

    (op, args, module), = AutocastTestLists(torch.device("mydevice")).banned
    expected = _pytorch_banned_message(op, tuple(a.cpu() for a in args))
    assert "unsafe to autocast" in expected
    for amp_dtype in LOWER:
        with torch.autocast("mydevice", dtype=amp_dtype):
            with pytest.raises(RuntimeError, match="unsafe to autocast") as raised:
                getattr(module, op)(*args)
        message = str(raised.value)
        # The banned driver raises the policy's message as written: PyTorch's, character for character.
        assert message == expected, f"{message!r}\n!=\n{expected!r}"
    # Outside autocast the op runs.
    assert getattr(module, op)(*args).device.type == "mydevice"
