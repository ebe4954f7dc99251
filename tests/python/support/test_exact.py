"""tests/python/exact.py: what torch.equal lets through (another dtype of the same values, another
shape, another NaN, -0.0) is a difference, named with its path; equal bits in other strides are not.
"""
from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from exact import CHILD_IMPORT, assert_exact, difference, exact, units_apart

VALUES = torch.tensor([[1.0, -2.5, 3.0], [0.5, 4.0, -1.0]])


def nan_with_payload(payload: int) -> torch.Tensor:
    return torch.tensor([0x7FC00000 | payload], dtype=torch.int32).view(torch.float32)


def test_another_dtype_of_the_same_values_differs() -> None:
    assert torch.equal(VALUES.bfloat16(), VALUES)  # the hole this module closes
    with pytest.raises(AssertionError, match=r"^dtype torch\.bfloat16, want torch\.float32$"):
        assert_exact(VALUES.bfloat16(), VALUES)
    assert not exact(VALUES.int(), VALUES.int().float())
    assert difference(VALUES.int(), VALUES.int().float()) == "dtype torch.int32, want torch.float32"


def test_another_shape_differs() -> None:
    assert not exact(torch.zeros(2, 3), torch.zeros(3, 2))
    with pytest.raises(AssertionError, match=r"^logits: shape torch.Size\(\[2, 3\]\), want torch.Size\(\[3, 2\]\)$"):
        assert_exact(torch.zeros(2, 3), torch.zeros(3, 2), "logits")


def test_nans_are_equal_only_where_their_bits_are() -> None:
    assert exact(nan_with_payload(1), nan_with_payload(1))
    assert exact(torch.tensor([math.nan]), torch.tensor([math.nan]))
    assert not exact(nan_with_payload(1), nan_with_payload(2))
    assert not exact(torch.tensor([math.nan]), torch.tensor([-math.nan]))
    assert difference(nan_with_payload(1), nan_with_payload(2)) == (
        "1 of 1 elements differ in their bits; the first at [0]: got nan (0x7fc00001), want nan (0x7fc00002)")


def test_negative_zero_differs_from_zero() -> None:
    assert torch.equal(torch.tensor([-0.0]), torch.tensor([0.0]))
    assert not exact(torch.tensor([-0.0]), torch.tensor([0.0]))
    assert not exact(torch.tensor([-0.0], dtype=torch.bfloat16), torch.tensor([0.0], dtype=torch.bfloat16))


def test_the_count_and_the_first_differing_element_are_named() -> None:
    got = VALUES.clone()
    got[1, 0], got[1, 2] = 0.25, 7.0
    assert difference(got, VALUES) == ("2 of 6 elements differ in their bits; the first at [1, 0]: "
                                       "got 0.25 (0x3e800000), want 0.5 (0x3f000000)")


def test_equal_bits_in_other_strides_are_exact() -> None:
    transposed = VALUES.t()
    assert not transposed.is_contiguous()
    assert exact(transposed, transposed.contiguous())
    assert exact(VALUES[:, ::2], VALUES[:, ::2].clone())
    assert exact(torch.ones(3).expand(2, 3), torch.ones(2, 3))
    # unless strides are the claim (autocast_conformance: PyTorch's own layout)
    assert difference(transposed, transposed.contiguous(), strides=True) == "strides (1, 3), want (2, 1)"


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                                   torch.float16, torch.bfloat16, torch.float32, torch.float64,
                                   torch.float8_e4m3fn, torch.float8_e5m2, torch.complex64, torch.complex128],
                         ids=str)
def test_every_dtype_is_compared_by_its_bits(dtype: torch.dtype) -> None:
    values = torch.tensor([0.0, 1.0, 2.0, 3.0]).to(dtype)
    assert exact(values, values.clone())
    other = values.clone()
    other[2] = other[0]
    assert difference(other, values).startswith("1 of 4 elements differ in their bits; the first at [2]: ")
    if dtype.is_complex:  # the imaginary part alone
        assert not exact(values + 1j, values)


def test_a_tensor_is_compared_with_a_tensor_on_the_same_device_type() -> None:
    assert difference(VALUES.tolist(), VALUES) == "got list, want Tensor"
    assert difference(torch.tensor(1.0), 1.0) == "got Tensor, want float"
    assert difference(VALUES.to("meta"), VALUES) == "device meta, want cpu"
    assert exact(torch.nn.Parameter(VALUES.clone()), VALUES)  # a subclass is a tensor
    assert exact(VALUES.clone().requires_grad_(), VALUES)


def test_nested_structures_name_the_path_of_the_first_difference() -> None:
    want = {"logits": (VALUES, [VALUES.bfloat16(), VALUES.int()]), "steps": 3}
    got = {"logits": (VALUES.clone(), [VALUES.bfloat16(), VALUES.int().float()]), "steps": 3}
    with pytest.raises(AssertionError, match=r"^generation: \['logits'\]\[1\]\[1\]: dtype torch.float32, "
                                             r"want torch.int32$"):
        assert_exact(got, want, "generation")
    assert exact({"logits": (VALUES, [VALUES.bfloat16(), VALUES.int()]), "steps": 3}, want)
    assert difference([VALUES], [VALUES, VALUES]) == "got 1 items, want 2"
    assert difference((VALUES,), [VALUES]) == "got tuple, want list"
    assert difference({"a": VALUES}, {"b": VALUES}) == "keys ['a'], want ['b']"
    assert difference({"n": 2}, {"n": 2.0}) == "['n']: got int, want float"
    assert exact([math.nan, None, "x"], [math.nan, None, "x"])
    assert not exact([-0.0], [0.0])


def test_a_child_process_without_tests_python_on_its_path_imports_it() -> None:
    code = CHILD_IMPORT + "import torch\nprint(exact(torch.ones(2), torch.ones(2)), exact(torch.ones(2), torch.ones(2).half()))"
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_units_apart_measures_at_the_largest_magnitude_and_checks_the_rest(dtype: torch.dtype) -> None:
    want = torch.tensor([0.75, -0.5, 0.0, 1e-3, math.nan], dtype=dtype)
    eps = torch.finfo(dtype).eps
    assert units_apart(want.clone(), want) == 0.0
    # One unit at the largest magnitude (0.75, in [0.5, 1)): eps / 2, wherever it lands.
    got = want.clone()
    got[3] = got[3] + eps / 2
    assert units_apart(got, want) == pytest.approx(1.0, rel=0.02)
    got = want.clone()
    got[0] = torch.nextafter(got[0:1], torch.ones(1, dtype=dtype))[0]
    assert units_apart(got, want) == 1.0
    with pytest.raises(AssertionError, match="dtype"):
        units_apart(want, want.double() if dtype != torch.float64 else want.float())
    with pytest.raises(AssertionError, match="shape"):
        units_apart(want, want[:3])
    with pytest.raises(AssertionError, match="NaNs differ"):
        units_apart(want.nan_to_num(0.0), want)
