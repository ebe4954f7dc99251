"""Exactness, the claim behind every "equal to eager" and "bit for bit" of the tests: the same dtype,
shape, device type and bits (Note [exact results]). It imports torch alone, so the processes that
check saved programs without autocastgen use it too (CHILD_IMPORT).

Note [exact results]
torch.equal compares values after type promotion: a bfloat16 tensor equals its float32 copy and an
int32 tensor its float32 copy, so a program that upcast its output passed every "bit for bit" check.
Here two tensors are exact when both are tensors of the same layout, dtype, shape and device type
and their raw bits agree, viewed as integers of the same width: a NaN equals only a NaN with the
same bits, and -0.0 differs from 0.0. Strides are not compared unless asked (`strides=True`, where
PyTorch's own layout is the claim): a contiguous copy is exact. Tuples and lists compare item by
item (same type and length), dicts key by key (same keys), other values by type and == (floats by
repr, so nan equals nan and -0.0 differs from 0.0). A difference names its path (`[1]['logits']`).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

# Code that imports `exact` in a child process (python -I, -c, a forked child), whose sys.path has
# no tests/python: prepended to the child's code.
CHILD_IMPORT = f"import sys\nsys.path.append({str(Path(__file__).resolve().parent)!r})\nfrom exact import exact\n"

_SAME_WIDTH_INTEGER = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def difference(got: Any, want: Any, path: str = "", *, strides: bool = False) -> str | None:
    """None when `got` is exactly `want`, else what differs first, at which path."""
    where = f"{path}: " if path else ""
    if isinstance(got, torch.Tensor) or isinstance(want, torch.Tensor):
        return _tensor_difference(got, want, where, strides)
    if type(got) is not type(want):
        return f"{where}got {type(got).__name__}, want {type(want).__name__}"
    if isinstance(got, (tuple, list)):
        if len(got) != len(want):
            return f"{where}got {len(got)} items, want {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            if (found := difference(g, w, f"{path}[{i}]", strides=strides)) is not None:
                return found
        return None
    if isinstance(got, dict):
        if set(got) != set(want):
            return f"{where}keys {sorted(got, key=repr)}, want {sorted(want, key=repr)}"
        for key in want:
            if (found := difference(got[key], want[key], f"{path}[{key!r}]", strides=strides)) is not None:
                return found
        return None
    if isinstance(got, float):
        return None if repr(got) == repr(want) else f"{where}got {got!r}, want {want!r}"
    return None if got == want else f"{where}got {got!r}, want {want!r}"


def exact(got: Any, want: Any, *, strides: bool = False) -> bool:
    """Whether `got` is exactly `want` (Note [exact results])."""
    return difference(got, want, strides=strides) is None


def assert_exact(got: Any, want: Any, what: object = "", *, strides: bool = False) -> None:
    """Raises AssertionError saying what differs first (dtype, shape, device, bits, at which path),
    after `what` (the case: a name, a step, a tuple of them)."""
    found = difference(got, want, strides=strides)
    if found is not None:
        label = str(what)
        raise AssertionError(f"{label}: {found}" if label else found)


def units_apart(got: torch.Tensor, want: torch.Tensor) -> float:
    """How far two floating tensors of the same dtype, shape and device type (checked first, as
    exactness checks them) are apart at most, in units in the last place of `want`'s dtype at its
    largest magnitude: for a result whose arithmetic is by nature another implementation's, beside
    the exactness of everything else. NaNs must be NaNs on both sides."""
    for attribute in ("dtype", "shape"):
        assert getattr(got, attribute) == getattr(want, attribute), (attribute, getattr(got, attribute),
                                                                     getattr(want, attribute))
    assert got.device.type == want.device.type and want.is_floating_point(), (got.device, want.dtype)
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan), "NaNs differ in place"
    finite = want.detach().double().masked_fill(nan, 0.0)
    largest = float(finite.abs().max()) if finite.numel() else 0.0
    unit = torch.finfo(want.dtype).eps * 2.0 ** math.floor(math.log2(largest)) if largest else torch.finfo(want.dtype).tiny
    apart = (got.detach().double().masked_fill(nan, 0.0) - finite).abs()
    return float(apart.max()) / unit if apart.numel() else 0.0


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of `t`'s elements as integers of their width (a complex element: its two parts,
    a last dimension of 2)."""
    t = t.detach().resolve_conj().resolve_neg()
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.view(_SAME_WIDTH_INTEGER[t.element_size()])


def _tensor_difference(got: Any, want: Any, where: str, strides: bool) -> str | None:
    if not (isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor)):
        return f"{where}got {type(got).__name__}, want {type(want).__name__}"
    for attribute in ("layout", "dtype", "shape"):
        if getattr(got, attribute) != getattr(want, attribute):
            return f"{where}{attribute} {getattr(got, attribute)}, want {getattr(want, attribute)}"
    if got.device.type != want.device.type:
        return f"{where}device {got.device}, want {want.device}"
    if strides and got.stride() != want.stride():
        return f"{where}strides {got.stride()}, want {want.stride()}"
    got_bits, want_bits = _bits(got.to(want.device)), _bits(want)
    differs = got_bits != want_bits
    if want.is_complex():
        differs = differs.any(-1)
    count = int(differs.sum())
    if count == 0:
        return None
    first = tuple(torch.nonzero(differs)[0].tolist())
    return (f"{where}{count} of {want.numel()} elements differ in their bits; the first at {list(first)}: "
            f"got {_element(got, first)}, want {_element(want, first)}")


def _element(t: torch.Tensor, index: tuple[int, ...]) -> str:
    """An element's value and bits (hexadecimal, per part for a complex one)."""
    element = t.detach()[index].cpu()
    parts = _bits(element).reshape(-1).tolist()
    width = 2 * element.element_size() // (2 if element.is_complex() else 1)
    hexadecimal = "/".join(f"0x{part & ((1 << (4 * width)) - 1):0{width}x}" for part in parts)
    try:
        value = repr(element.item())
    except (RuntimeError, NotImplementedError):  # a dtype without scalars (float4_e2m1fn_x2)
        return hexadecimal
    return f"{value} ({hexadecimal})"
