"""Custom ops in programs (issue 57, item 4; docs/export.md, "Custom ops"; docs/deploy.md, "Custom
ops in ONNX"): a program that calls a custom op gets the op's policy baked like any other op's.

- A user's own op (tests/python/user_op_library.py: torch.library.custom_op, a fake kernel) given a
  policy by ``load_policy`` text (``policy=``, with a place: the op in float32 in one module) and by
  ``register_runtime_policy``: ``autocastgen.export`` and ``apply_policy`` give eager's bits under
  the policy, float16 and bfloat16; the precision map shows the op in the dtype the policy says; the
  saved program gives the same bits in a process that imports the op's library and not autocastgen;
  the CLI's ``apply --import user_op_library`` bakes a saved float32 program (refused without it).
- transformers' grouped GEMM (``transformers::grouped_mm_fallback``, which a small Mixtral's experts
  call while traced) under the shipped CPU policy plus the op's entry and a place: the same, and the
  CLI's ``precision-map --import transformers.integrations.moe`` shows it (without ``--import`` the
  file is refused naming the op and the flag).
- ``export_onnx`` refuses both programs naming the op and saying how to register a translation; given
  one (``translations=``), it exports: the user's op closer to eager than float32, Mixtral with
  transformers' own grouped-GEMM translation.

ctest sets AUTOCASTGEN_BUILD_DIR; by hand (transformers from scripts/models-venv):
  AUTOCASTGEN_BUILD_DIR=build $(scripts/models-venv) -m pytest tests/python/export/test_export_custom_ops.py
"""
from __future__ import annotations

import math
import os
import pathlib
import subprocess
import sys
import warnings
from typing import Any

import pytest
import torch

import requires
from built_tree import require_built

REPO = pathlib.Path(__file__).resolve().parents[3]
SUPPORT = pathlib.Path(__file__).resolve().parents[1]  # tests/python: user_op_library.py
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
CLI = pathlib.Path(os.environ.get("AUTOCASTGEN_CLI", BUILD / "bin" / "autocastgen"))
require_built(BUILD, "python/autocastgen/__init__.py", CLI)

import autocastgen  # noqa: E402
import user_op_library  # noqa: E402  (registers acg_user::gated_gelu)
from exact import assert_exact, exact, units_apart  # noqa: E402
from export_checks import SavedCases  # noqa: E402

# autocastgen.export with the pinned PyTorch: an error under ctest where it says no (requires.py).
requires.supported(autocastgen._export.supported())

DTYPES = (torch.bfloat16, torch.float16)

# The user's op in the lower-precision dtype but in the module `second`, where it runs in float32
# (a place); the linear layers' GEMMs in float32.
USER_POLICY = """\
autocast: {device: cpu, lower_precision: [bfloat16, float16]}
lists:
  lower_precision_fp: [acg_user::gated_gelu]
  fp32:
    - linear
    - addmm
    - {op: "acg_user::gated_gelu", modules: [second]}
"""

# Over the shipped CPU policy: transformers' grouped GEMM in the lower-precision dtype, but in float32
# in the second layer's experts; the custom op, which the traced model calls, and aten's _grouped_mm,
# which eager calls on the CPU (docs/export.md, "Custom ops").
MOE_POLICY = """\
autocast: {device: cpu, lower_precision: [bfloat16, float16]}
lists:
  lower_precision_fp: [transformers::grouped_mm_fallback, _grouped_mm]
  fp32:
    - {op: "transformers::grouped_mm_fallback", modules: ["*.layers.1.mlp.experts"]}
    - {op: _grouped_mm, modules: ["*.layers.1.mlp.experts"]}
"""


class TwoBlocks(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first, self.second = user_op_library.GatedBlock(16), user_op_library.GatedBlock(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x))


def eager(model: torch.nn.Module, args: tuple, dtype: torch.dtype, *policies: str) -> torch.Tensor:
    """The model under the policies (loaded in order, each over the last), attached, in torch.autocast."""
    for policy in policies:
        autocastgen.load_policy(policy)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="autocastgen.attach: .* matches no module")
            with autocastgen.attach(model), torch.autocast("cpu", dtype=dtype):
                return model(*args)
    finally:
        autocastgen.clear_runtime_policies()


def rows_of(program: Any, op: str) -> dict[str, dict[str, Any]]:
    """The precision map's rows of `op`, by module."""
    return {row["module"]: row for row in autocastgen.precision_map(program)["rows"] if row["op"] == op}


@pytest.fixture(autouse=True)
def no_runtime_policies():
    autocastgen.clear_runtime_policies()
    yield
    autocastgen.clear_runtime_policies()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_users_op_takes_its_policy_and_its_place(dtype: torch.dtype, tmp_path: pathlib.Path) -> None:
    model, x = TwoBlocks(), torch.randn(3, 16)
    expected = eager(model, (x,), dtype, USER_POLICY)
    assert expected.dtype == torch.float32  # the head's linear runs in float32
    program = autocastgen.export(model, (x,), device="cpu", dtype=dtype, policy=USER_POLICY)
    assert_exact(program.module()(x), expected)
    applied = autocastgen.apply_policy(torch.export.export(model, (x,)), device="cpu", dtype=dtype, policy=USER_POLICY)
    assert_exact(applied.module()(x), expected)
    low = str(dtype).removeprefix("torch.")
    for baked in (program, applied):
        rows = rows_of(baked, "acg_user::gated_gelu")
        assert rows["first"]["ran_in"] == {low: 1} and rows["first"]["casts_in"] == {f"float32->{low}": 1}, rows
        assert rows["second"]["ran_in"] == {"float32": 1} and rows["second"]["casts_in"] == {}, rows
    # The gate weight of `first` is stored in the lower-precision dtype (every use casts it so).
    assert program.graph_module.meta["custom"]["autocastgen"]["stored_in_lower_precision"] == {"first.gate": low}
    # Without the op's entry it runs in float32, as its inputs come: the policy made the difference.
    assert not exact(eager(model, (x,), dtype, USER_POLICY.replace("[acg_user::gated_gelu]", "[]")), expected)

    cases = SavedCases(tmp_path, imports=("user_op_library",), path=(SUPPORT,))
    cases.add("user_op", program, (x,), {}, expected)
    result = cases.check()["user_op"]
    assert result["equal"] and all(result["inside_autocast"].values()), result


def test_a_runtime_policy_registered_for_the_op_is_baked() -> None:
    """register_runtime_policy in force (policy=None): the op in float32 while PyTorch's lists run
    the linear layers in bfloat16, so its inputs are cast up."""
    model, x = TwoBlocks(), torch.randn(3, 16)
    autocastgen.register_runtime_policy("acg_user::gated_gelu", "fp32", "cpu")
    program = autocastgen.export(model, (x,), device="cpu", dtype=torch.bfloat16)
    assert_exact(program.module()(x), eager(model, (x,), torch.bfloat16))
    rows = rows_of(program, "acg_user::gated_gelu")
    assert {module: row["ran_in"] for module, row in rows.items()} == {"first": {"float32": 1}, "second": {"float32": 1}}
    assert rows["first"]["casts_in"] == {"bfloat16->float32": 1}, rows
    assert any("register_runtime_policy" in name or "acg_user" in name
               for name in program.graph_module.meta["custom"]["autocastgen"]["policies"]), \
        program.graph_module.meta["custom"]["autocastgen"]["policies"]


# --- transformers' grouped GEMM ---------------------------------------------------------------------

class Logits(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x, use_cache=False).logits


@pytest.fixture(scope="module")
def mixtral() -> dict[str, Any]:
    """A small Mixtral exported in bfloat16 under the shipped CPU policy and MOE_POLICY, and eager's
    logits under the same. transformers calls its custom op where it is traced
    (torch.compiler.is_compiling(), float32 weights) and torch.nn.functional.grouped_mm in eager on
    the CPU: `expected` is eager as it runs, `traced_branch` eager taking the traced branch (its
    _can_use_grouped_mm False, as under torch.compile), so running the custom op under its policy."""
    transformers = requires.module("transformers")
    moe = requires.module("transformers.integrations.moe", "transformers")
    config = transformers.MixtralConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                        num_experts_per_tok=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = Logits(transformers.MixtralForCausalLM(config).eval())
    x = torch.randint(0, 128, (2, 8), generator=torch.Generator().manual_seed(1))
    shipped = str(autocastgen.shipped_policy("cpu"))
    autocastgen.clear_runtime_policies()
    expected = eager(model, (x,), torch.bfloat16, shipped, MOE_POLICY)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(moe, "_can_use_grouped_mm", lambda *args: False)
        traced_branch = eager(model, (x,), torch.bfloat16, shipped, MOE_POLICY)
        # Without the custom op's entries the traced branch runs it in float32: the entry decided.
        assert not exact(eager(model, (x,), torch.bfloat16, shipped), traced_branch)
    autocastgen.load_policy(shipped)
    try:
        program = autocastgen.export(model, (x,), device="cpu", dtype=torch.bfloat16, policy=MOE_POLICY)
    finally:
        autocastgen.clear_runtime_policies()
    return {"model": model, "x": x, "program": program, "expected": expected, "traced_branch": traced_branch}


def test_transformers_grouped_gemm_takes_its_policy_and_its_place(mixtral: dict[str, Any], tmp_path: pathlib.Path) -> None:
    program, x, expected = mixtral["program"], mixtral["x"], mixtral["expected"]
    assert_exact(program.module()(x), expected)
    assert_exact(program.module()(x), mixtral["traced_branch"])
    rows = rows_of(program, "transformers::grouped_mm_fallback")
    assert {module: row["ran_in"] for module, row in rows.items()} == {
        "model.model.layers.0.mlp.experts": {"bfloat16": 2}, "model.model.layers.1.mlp.experts": {"float32": 2}}, rows
    assert rows["model.model.layers.0.mlp.experts"]["casts_in"].get("float32->bfloat16", 0) >= 2, rows
    policies = program.graph_module.meta["custom"]["autocastgen"]["policies"]
    assert any(name.endswith("policies/cpu.yaml") for name in policies), policies

    cases = SavedCases(tmp_path, imports=("transformers.integrations.moe",))
    cases.add("mixtral", program, (x,), {}, expected)
    result = cases.check()["mixtral"]
    assert result["equal"] and all(result["inside_autocast"].values()), result


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, AUTOCASTGEN_PYTHON=sys.executable, **env)
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, env=env, timeout=300, check=False)


def test_the_cli_applies_a_policy_to_a_program_calling_a_users_op(tmp_path: pathlib.Path) -> None:
    """apply --import: the op registered before the program is read and the policy resolved."""
    model, x = TwoBlocks(), torch.randn(3, 16)
    torch.export.save(torch.export.export(model, (x,)), tmp_path / "f32.pt2")
    (tmp_path / "policy.yaml").write_text(USER_POLICY)
    command = ("apply", str(tmp_path / "f32.pt2"), "--policy", str(tmp_path / "policy.yaml"), "--dtype", "float16",
               "-o", str(tmp_path / "f16.pt2"))
    refused = run_cli(*command, PYTHONPATH=str(SUPPORT))
    assert refused.returncode == 1 and "acg_user.gated_gelu" in refused.stderr and "--import" in refused.stderr
    applied = run_cli(*command, "--import", "user_op_library", PYTHONPATH=str(SUPPORT))
    assert applied.returncode == 0, applied.stderr
    program = torch.export.load(tmp_path / "f16.pt2")
    assert_exact(program.module()(x), eager(model, (x,), torch.float16, USER_POLICY))


def test_the_cli_shows_a_custom_op_with_its_library_imported(mixtral: dict[str, Any], tmp_path: pathlib.Path) -> None:
    torch.export.save(mixtral["program"], tmp_path / "mixtral.pt2")
    refused = run_cli("precision-map", str(tmp_path / "mixtral.pt2"))
    assert refused.returncode == 1
    assert "torch.ops.transformers.grouped_mm_fallback.default" in refused.stderr and "--import MODULE" in refused.stderr
    shown = run_cli("precision-map", str(tmp_path / "mixtral.pt2"), "--by", "op", "--import",
                    "transformers.integrations.moe")
    assert shown.returncode == 0, shown.stderr
    line = next(line for line in shown.stdout.splitlines() if line.startswith("transformers::grouped_mm_fallback "))
    assert line.split()[1:4] == ["4", "bfloat16", "2,"], line  # 4 calls: 2 in bfloat16, 2 in float32
    assert "float32 2" in line


# --- ONNX -------------------------------------------------------------------------------------------

def onnx_packages() -> None:
    for package in ("onnx", "onnxscript", "onnxruntime"):
        requires.module(package)


def gated_gelu_to_onnx(x: Any, weight: Any) -> Any:
    """acg_user::gated_gelu as ONNX (an ONNX Script function, traced): gelu(x @ weight) * sigmoid(x)."""
    from onnxscript import opset18 as op

    h = op.MatMul(x, weight)
    half, one, root2 = (op.CastLike(op.Constant(value_float=v), h) for v in (0.5, 1.0, math.sqrt(2.0)))
    return op.Mul(op.Mul(op.Mul(h, half), op.Add(op.Erf(op.Div(h, root2)), one)), op.Sigmoid(x))


def test_export_onnx_refuses_a_users_op_and_takes_its_translation() -> None:
    onnx_packages()
    from autocastgen.deploy import DeployError

    model, x = TwoBlocks(), torch.randn(3, 16)
    program = autocastgen.export(model, (x,), device="cpu", dtype=torch.bfloat16, policy=USER_POLICY)
    with pytest.raises(DeployError) as refused:
        autocastgen.export_onnx(program)
    message = str(refused.value)
    assert "ONNX has no translation of acg_user::gated_gelu (2 nodes" in message, message
    assert "translations={torch.ops.acg_user.gated_gelu.default: function}" in message and "docs/deploy.md" in message

    exported = autocastgen.export_onnx(program, translations={torch.ops.acg_user.gated_gelu.default: gated_gelu_to_onnx})
    assert {"Erf", "Sigmoid"} <= {node.op_type for node in exported.model.graph.node}
    out = exported.run(x)[0]
    expected = program.module()(x).detach()
    assert out.dtype == expected.dtype
    # The translation's nodes are one call: with no bfloat16 kernels on the CPU provider they run in
    # float32 and round once, where eager's kernel rounds after its GEMM and its GELU (docs/deploy.md,
    # "Custom ops in ONNX"): within a bfloat16 rounding of the largest output, not bit for bit.
    assert (out - expected).abs().max() <= 2 ** -8 * expected.abs().max()


def test_export_onnx_refuses_transformers_grouped_gemm_and_takes_transformers_translation(
        mixtral: dict[str, Any]) -> None:
    onnx_packages()
    from autocastgen.deploy import DeployError

    program, x, expected = mixtral["program"], mixtral["x"], mixtral["expected"]
    with pytest.raises(DeployError) as refused:
        autocastgen.export_onnx(program)
    message = str(refused.value)
    assert "ONNX has no translation of transformers::grouped_mm_fallback (4 nodes" in message, message
    assert "translations={torch.ops.transformers.grouped_mm_fallback.default: function}" in message
    exporter_onnx = requires.module("transformers.exporters.exporter_onnx", "transformers")
    grouped_mm = exporter_onnx._aten_grouped_mm  # what transformers' ONNX exporter registers for the op
    exported = autocastgen.export_onnx(
        program, translations={torch.ops.transformers.grouped_mm_fallback.default: grouped_mm})
    # Its nodes round once, as the grouped GEMM does. ONNX Runtime's arithmetic elsewhere in the model
    # is its own and differs by CPU (on a machine with AVX-512 the logits were eager's bits; on an AVX2
    # one, 2026-12-07, a quarter of them from the fifth token on are 2**-9 apart, half a unit of the
    # largest): eager's dtype and shape exactly, and within one unit of eager at its largest value.
    assert units_apart(exported.run(x)[0], expected) <= 1


class GroupedGemm(torch.nn.Module):
    """transformers' grouped GEMM alone, on float32 weights (as its experts hold them)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 64, 32, generator=torch.Generator().manual_seed(2)))

    def forward(self, x: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return torch.ops.transformers.grouped_mm_fallback(x, self.weight, offs)


def test_transformers_translation_of_the_grouped_gemm_rounds_once_as_eager(mixtral: dict[str, Any]) -> None:
    # What the Mixtral's logits cannot show exactly (ONNX Runtime's other kernels are its own): the
    # grouped GEMM's translation, in bfloat16 under the policy, gives eager's bits.
    onnx_packages()
    exporter_onnx = requires.module("transformers.exporters.exporter_onnx", "transformers")
    model = GroupedGemm()
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(3))
    offs = torch.tensor([4, 8, 12, 16], dtype=torch.int32)
    autocastgen.load_policy(MOE_POLICY)
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            expected = model(x, offs)
        program = autocastgen.export(model, (x, offs), device="cpu", dtype=torch.bfloat16)
    finally:
        autocastgen.clear_runtime_policies()
    assert expected.dtype == torch.bfloat16
    exported = autocastgen.export_onnx(
        program, translations={torch.ops.transformers.grouped_mm_fallback.default: exporter_onnx._aten_grouped_mm})
    assert_exact(exported.run(x, offs)[0], expected)
