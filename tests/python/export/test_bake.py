"""The bake (autocastgen/_export/bake.py, Note [baking a policy]) pinned down on one small model: what
decides the casts (the policy given, what is in force, PyTorch's lists), the program's record word
for word, the checks of the target and of the release, and what reaches torch.export and the
program-file reader. test_export.py checks the baked programs of several models against eager, after
save and load without autocastgen; these are the short tests scripts/mutants runs for each mutant of
bake.py (docs/testing.md).

ctest sets AUTOCASTGEN_BUILD_DIR; by hand:
  AUTOCASTGEN_BUILD_DIR=build python3 -m pytest tests/python/export/test_bake.py
"""
from __future__ import annotations

import os
import pathlib

import pytest
import torch
import torch._dynamo  # noqa: F401 - torch.export's imports, made at collection (a bake is then ~2 s)
import torch._export.serde.serialize  # noqa: F401
import torch.export._trace  # noqa: F401

import requires
from built_tree import require_built

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
require_built(BUILD, "python/autocastgen/__init__.py")

import autocastgen  # noqa: E402
from autocastgen._export import bake  # noqa: E402
from eager_under_policy import eager  # noqa: E402
from exact import assert_exact, exact  # noqa: E402
from hostile_programs import corrupt_weights, needs_trust, rewrite  # noqa: E402

requires.supported(autocastgen._export.supported())

# linear in float32 and gelu in the lower precision: PyTorch's CPU lists decide the other way.
POLICY = """\
autocast: {device: cpu, lower_precision: [bfloat16, float16]}
lists:
  lower_precision_fp: [gelu]
  fp32: [linear, addmm, mm]
"""
# By place: linear in the lower precision except in fc2.
PLACES = """\
autocast: {device: cpu, lower_precision: [bfloat16, float16]}
lists:
  lower_precision_fp: [linear]
  fp32:
    - {op: linear, modules: [fc2]}
"""


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.fc2(torch.nn.functional.gelu(self.fc1(x))), dim=-1)


def small() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(1)
    return Small(), torch.randn(4, 8) * 3


@pytest.fixture(autouse=True)
def no_runtime_policies():
    autocastgen.clear_runtime_policies()
    yield
    autocastgen.clear_runtime_policies()


@pytest.fixture(scope="module")
def float32() -> torch.export.ExportedProgram:
    model, x = small()
    return torch.export.export(model, (x,))


def the_record(program: torch.export.ExportedProgram) -> dict:
    return program.graph_module.meta["custom"]["autocastgen"]


# --- the target and the release --------------------------------------------------------------------

def test_the_target_is_a_device_type_and_a_lower_precision() -> None:
    assert bake._target("cpu", torch.float16) == ("cpu", torch.float16)
    assert bake._target(torch.device("cpu"), "bfloat16") == ("cpu", torch.bfloat16)
    assert bake._target("cuda:1", "float16") == ("cuda", torch.float16)
    for dtype, shown in ((torch.float32, "torch.float32"), ("float32", "torch.float32"), ("half_", "None"),
                         ("no_such", "None"), (None, "None"), ("__name__", "'torch'")):
        with pytest.raises(ValueError) as error:
            bake._target("cpu", dtype)
        assert str(error.value) == f"autocastgen.export: dtype must be torch.float16 or torch.bfloat16, not {shown}"
    for device, kind in ((0, "int"), (None, "NoneType")):
        with pytest.raises(TypeError) as error:
            bake._target(device, torch.float16)
        assert str(error.value) == f"autocastgen.export: device must be a str or torch.device, not {kind}"


@pytest.mark.parametrize(("version", "why"), [
    ("2.15.0", None), ("2.15.0+cpu", None), ("2.16.1", None), ("3.0.0", None), ("2.15.0a0+git1234", None),
    ("2.16+cpu", None),
    ("2.14.9", "autocastgen.export is verified with PyTorch 2.15 and later; this is 2.14.9"),
    ("2.7.1+cpu", "autocastgen.export is verified with PyTorch 2.15 and later; this is 2.7.1+cpu"),
    ("1.99.0", "autocastgen.export is verified with PyTorch 2.15 and later; this is 1.99.0"),
])
def test_the_release_is_checked_by_number(version: str, why: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "__version__", version)
    assert bake.supported() == why


def test_a_pytorch_without_the_autocast_pass_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch._export.utils

    monkeypatch.delattr(torch._export.utils, "_collect_all_valid_cia_ops")
    why = bake.supported()
    assert why is not None and why.startswith("autocastgen.export needs a PyTorch with torch.export's autocast pass "
                                              "(cannot import name '_collect_all_valid_cia_ops'"), why
    assert why.endswith(f"); this is {torch.__version__}"), why
    model, x = small()
    with pytest.raises(autocastgen.ExportError) as error:
        autocastgen.export(model, (x,), device="cpu", dtype=torch.float16)
    assert str(error.value) == why


def test_record_only_mode_is_refused() -> None:
    model, x = small()
    with autocastgen.record(), pytest.raises(autocastgen.ExportError) as error:
        autocastgen.export(model, (x,), device="cpu", dtype=torch.float16)
    assert str(error.value) == ("autocastgen.export: record-only mode is on (autocastgen.record), which leaves every op "
                                "untouched: the program would have no casts. Export outside the record block")


# --- what decides the casts ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_policy_given_decides(float32: torch.export.ExportedProgram, dtype: torch.dtype) -> None:
    model, x = small()
    baked = autocastgen.apply_policy(float32, device="cpu", dtype=str(dtype).removeprefix("torch."), policy=POLICY)
    want = eager(model, x, dtype, POLICY)
    assert_exact(baked.module()(x), want)
    assert not exact(want, eager(model, x, dtype, None)) and not exact(want, model(x))  # the policy decides
    # Run inside torch.autocast, the baked casts are not decided again.
    with torch.autocast("cpu", dtype=dtype):
        assert_exact(baked.module()(x), want)
    assert the_record(baked) == {
        "format": 1, "device": "cpu", "dtype": str(dtype).removeprefix("torch."), "policies": ["<string>"],
        "digest": the_record(baked)["digest"], "torch": torch.__version__, "stored_in_lower_precision": {},
    }
    assert ":" in the_record(baked)["digest"]
    assert float32.graph_module.meta.get("custom", {}).get("autocastgen") is None  # the caller's is left as it was


def test_what_is_in_force_decides_without_a_policy(float32: torch.export.ExportedProgram) -> None:
    model, x = small()
    baked = autocastgen.apply_policy(float32, device="cpu", dtype=torch.bfloat16)
    assert_exact(baked.module()(x), eager(model, x, torch.bfloat16, None))
    record = the_record(baked)
    assert record["policies"] == [f"PyTorch {torch.__version__}'s autocast lists"]
    # PyTorch's lists put linear in bfloat16: its weights are stored so, once.
    assert record["stored_in_lower_precision"] == dict.fromkeys(("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"),
                                                                  "bfloat16")
    assert {name: t.dtype for name, t in baked.state_dict.items()} == dict.fromkeys(
        ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"), torch.bfloat16)
    want = eager(model, x, torch.bfloat16, POLICY)  # (which clears the runtime policies after)
    autocastgen.load_policy(POLICY, name="mine.yaml")
    baked = autocastgen.apply_policy(float32, device="cpu", dtype=torch.bfloat16)
    assert_exact(baked.module()(x), want)
    assert the_record(baked)["policies"] == ["mine.yaml"]
    # A policy given for the export is loaded over what is in force, for the export only.
    before = torch.ops.autocastgen.policies_in_force()
    baked = autocastgen.apply_policy(float32, device="cpu", dtype=torch.bfloat16, policy=PLACES)
    assert the_record(baked)["policies"] == ["mine.yaml", "<string>"]
    assert torch.ops.autocastgen.policies_in_force() == before


def test_places_decide_by_the_nodes_modules(float32: torch.export.ExportedProgram) -> None:
    model, x = small()
    baked = autocastgen.apply_policy(float32, device="cpu", dtype=torch.bfloat16, policy=PLACES)
    assert_exact(baked.module()(x), eager(model, x, torch.bfloat16, PLACES))
    rows = {(r["module"], r["op"]): r["ran_in"] for r in autocastgen.precision_map(baked)["rows"]}
    assert rows[("fc1", "aten::linear")] == {"bfloat16": 1} and rows[("fc2", "aten::linear")] == {"float32": 1}


def test_the_record_names_each_policy_in_force(monkeypatch: pytest.MonkeyPatch) -> None:
    class Ops:
        def __init__(self, owners: list[str], generated: list[str]) -> None:
            self.answer = ("sha:1", owners, generated)

        def policies_in_force(self) -> tuple:
            return self.answer

    monkeypatch.setattr(bake, "_ops", lambda: Ops(["a.yaml", "<string>"], ["0123456789abcdef", "fedcba9876543210"]))
    assert bake._record_entry("cpu", torch.float16, {"w": "float16"}) == {
        "format": 1, "device": "cpu", "dtype": "float16",
        "policies": ["a.yaml", "<string>", "generated library 0123456789ab", "generated library fedcba987654"],
        "digest": "sha:1", "torch": torch.__version__, "stored_in_lower_precision": {"w": "float16"}}
    monkeypatch.setattr(bake, "_ops", lambda: Ops([], []))
    assert bake._record_entry("cuda", torch.bfloat16, {})["policies"] == [f"PyTorch {torch.__version__}'s autocast lists"]


# --- export and apply_policy -----------------------------------------------------------------------

def test_export_bakes_the_model_as_eager_runs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # torch.export.export gets the arguments, the keyword arguments, and strict=False unless given.
    calls = []
    real = torch.export.export

    def recording(*args: object, **kwargs: object) -> torch.export.ExportedProgram:
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.export, "export", recording)
    model, x = small()
    program = autocastgen.export(model, [x], {}, device="cpu", dtype="float16", policy=POLICY)
    assert_exact(program.module()(x), eager(model, x, torch.float16, POLICY))
    assert the_record(program)["policies"] == ["<string>"] and the_record(program)["dtype"] == "float16"
    assert calls == [{"strict": False}]
    autocastgen.export(model, (x,), device="cpu", dtype=torch.float16, strict=True,
                       dynamic_shapes=({0: torch.export.Dim("batch")},))
    assert calls[1]["strict"] is True and set(calls[1]) == {"strict", "dynamic_shapes"}
    with pytest.raises(ValueError, match="has no autocast key"):
        autocastgen.export(model, (x,), device="meta", dtype=torch.float16)
    assert len(calls) == 2


def test_a_program_that_carries_a_policy_is_refused(float32: torch.export.ExportedProgram) -> None:
    baked = autocastgen.apply_policy(float32, device="cpu", dtype=torch.float16, policy=POLICY)
    with pytest.raises(autocastgen.ExportError) as error:
        autocastgen.apply_policy(baked, device="cpu", dtype=torch.bfloat16)
    assert str(error.value) == ("autocastgen.apply_policy: the program already carries a policy (<string>, cpu float16); "
                                "apply a policy to its float32 program instead")
    with pytest.raises(ValueError, match="dtype must be"):
        autocastgen.apply_policy(float32, device="cpu", dtype=torch.float32)


def test_a_file_is_read_as_data_unless_trusted(float32: torch.export.ExportedProgram, tmp_path: pathlib.Path) -> None:
    model, x = small()
    path = tmp_path / "f32.pt2"
    torch.export.save(float32, path)
    applied = autocastgen.apply_policy(path, device="cpu", dtype=torch.bfloat16, policy=POLICY)
    assert_exact(applied.module()(x), eager(model, x, torch.bfloat16, POLICY))
    assert autocastgen.precision_map(path) == autocastgen.precision_map(float32)
    # The map reads no weight: one whose records do not inflate maps all the same.
    corrupt = corrupt_weights(path, tmp_path / "corrupt.pt2")
    assert autocastgen.precision_map(corrupt) == autocastgen.precision_map(float32)
    with pytest.raises(autocastgen.ProgramFileError, match="cannot be read"):
        autocastgen.apply_policy(corrupt, device="cpu", dtype=torch.bfloat16)
    # A file only pickle reads: refused, then read when trusted (PyTorch's loader).
    trust = rewrite(path, tmp_path / "trust.pt2", needs_trust(torch.full((4,), 0.25)))
    for call in (lambda **t: autocastgen.apply_policy(trust, device="cpu", dtype=torch.bfloat16, **t),
                 lambda **t: autocastgen.precision_map(trust, **t)):
        with pytest.raises(autocastgen.ProgramFileError, match="is a custom object"):
            call()
        assert call(trusted=True)


def test_pytorchs_lists_decide_in_the_dtype_given(float32: torch.export.ExportedProgram) -> None:
    # Without a policy, PyTorch's own autocast kernels decide, in torch.autocast's dtype: float16 here.
    model, x = small()
    baked = autocastgen.apply_policy(float32, device="cpu", dtype=torch.float16)
    assert_exact(baked.module()(x), eager(model, x, torch.float16, None))
    assert the_record(baked)["stored_in_lower_precision"]["fc1.weight"] == "float16"


class Branching(torch.nn.Module):
    """Python that looks at the autocast state, and a keyword argument."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, *, shift: torch.Tensor) -> torch.Tensor:
        y = self.fc(x) + shift
        if torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.float16:
            y = y * 2  # eager under float16 autocast takes this branch
        return y


def test_the_model_is_traced_as_eager_runs_it() -> None:
    # The model's Python sees eager's autocast state (Note [exporting as eager runs]), and its
    # keyword arguments reach torch.export.
    model, x, shift = Branching(), torch.randn(3, 8), torch.randn(4)
    program = autocastgen.export(model, (x,), {"shift": shift}, device="cpu", dtype=torch.float16)
    with torch.autocast("cpu", dtype=torch.float16):
        want = model(x, shift=shift)
    assert_exact(program.module()(x, shift=shift), want)


def test_the_refusal_names_every_policy_of_the_record(float32: torch.export.ExportedProgram) -> None:
    autocastgen.load_policy(POLICY, name="mine.yaml")
    baked = autocastgen.apply_policy(float32, device="cpu", dtype=torch.bfloat16, policy=PLACES)
    with pytest.raises(autocastgen.ExportError) as error:
        autocastgen.apply_policy(baked, device="cpu", dtype=torch.bfloat16)
    assert str(error.value) == ("autocastgen.apply_policy: the program already carries a policy (mine.yaml, <string>, "
                                "cpu bfloat16); apply a policy to its float32 program instead")
