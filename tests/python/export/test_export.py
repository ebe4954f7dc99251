"""autocastgen.export and apply_policy: the policy baked into a torch.export program, bit for bit
eager under the policy after save and load in a process without autocastgen, places kept, never
decided again (docs/export.md). Real models: test_export_models.py.

ctest sets AUTOCASTGEN_BUILD_DIR; by hand:
  AUTOCASTGEN_BUILD_DIR=build python3 -m pytest tests/python/export/test_export.py
"""
from __future__ import annotations

import math
import operator
import os
import pathlib
import subprocess
import sys
import warnings

import pytest
import torch

import requires
from built_tree import require_built

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
CLI = pathlib.Path(os.environ.get("AUTOCASTGEN_CLI", BUILD / "bin" / "autocastgen"))
require_built(BUILD, "python/autocastgen/__init__.py", CLI)

import autocastgen  # noqa: E402
from eager_under_policy import eager  # noqa: E402
from exact import assert_exact, exact  # noqa: E402
from export_checks import ISSUE_POLICY, SavedCases  # noqa: E402

# autocastgen.export with the pinned PyTorch: an error under ctest where it says no (requires.py).
requires.supported(autocastgen._export.supported())

# Precision by place: linear in float32 only in the last projection (fc2, proj), the LayerNorm's
# module an fp32 section (its lower-precision input cast to float32 on the way in).
PLACES_POLICY = """\
autocast: {device: cpu, lower_precision: [bfloat16, float16]}
lists:
  lower_precision_fp: [linear]
  fp32:
    - {op: linear, modules: [fc2, proj]}
modules:
  ln: fp32
"""
DTYPES = [torch.bfloat16, torch.float16]


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.ln, self.fc2 = torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.fc2(self.ln(torch.nn.functional.gelu(self.fc1(x)))), dim=-1)


class CausalAttention(torch.nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.qkv, self.proj, self.heads = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim), heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in self.qkv(x).chunk(3, dim=-1))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        scores = scores.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
        return self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))


def model_and_input(name: str) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    if name == "mlp":
        return MLP(), torch.randn(4, 16) * 3
    return CausalAttention(), torch.randn(2, 8, 32)


def nodes(program: torch.export.ExportedProgram) -> list[torch.fx.Node]:
    return [n for m in program.graph_module.modules() if isinstance(m, torch.fx.GraphModule) for n in m.graph.nodes]


@pytest.fixture(autouse=True)
def no_runtime_policies():
    autocastgen.clear_runtime_policies()
    yield
    autocastgen.clear_runtime_policies()


FP8_POLICY = """\
autocast:
  device: cpu
  lower_precision: [bfloat16]
  fp8: {scaling: SCALING, granularity: tensorwise, forward: float8_e4m3fn, backward: float8_e5m2}
lists:
  fp8: [linear, mm, addmm]
"""


HAS_CPU_SCALED_MM = torch._C._dispatch_has_kernel_for_dispatch_key("aten::_scaled_mm", "CPU")


def fp8_model_and_input() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32)), torch.randn(32, 64)


CASES = [(model, policy, dtype) for model in ("mlp", "attention") for policy in ("issue", "places") for dtype in DTYPES]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory):
    """Every case exported, saved, and checked by one child without autocastgen."""
    cases = SavedCases(tmp_path_factory.mktemp("programs"))
    eager_out = {}
    for model_name, policy_name, dtype in CASES:
        policy = ISSUE_POLICY if policy_name == "issue" else PLACES_POLICY
        model, x = model_and_input(model_name)
        expected = eager(model, x, dtype, policy)
        program = autocastgen.export(model, (x,), device="cpu", dtype=dtype, policy=policy)
        name = f"{model_name}-{policy_name}-{str(dtype)[6:]}"
        cases.add(name, program, (x,), {}, expected)
        eager_out[name] = (program, expected)
    if HAS_CPU_SCALED_MM:
        model, x = fp8_model_and_input()
        policy = FP8_POLICY.replace("SCALING", "current")
        expected = eager(model, x, torch.bfloat16, policy)
        program = autocastgen.export(model, (x,), device="cpu", dtype=torch.bfloat16, policy=policy)
        cases.add("fp8", program, (x,), {}, expected)
        eager_out["fp8"] = (program, expected)
    return eager_out, cases.check()


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_the_program_is_eager_under_the_policy_after_save_and_load_without_autocastgen(saved, case) -> None:
    programs, results = saved
    name = f"{case[0]}-{case[1]}-{str(case[2])[6:]}"
    program, expected = programs[name]
    assert_exact(program.module()(model_and_input(case[0])[1]), expected)  # in this process too
    result = results[name]
    assert result["equal"], result
    # Run inside torch.autocast the casts are not decided again (the guard): the same bits.
    assert result["inside_autocast"] == {"torch.float16": True, "torch.bfloat16": True}
    assert result["record"]["dtype"] == str(case[2])[6:] and result["record"]["device"] == "cpu"
    assert result["record"]["policies"] == ["<string>"] and ":" in result["record"]["digest"]


def test_the_policy_is_what_decides_and_places_are_kept() -> None:
    # Guards against a test that cannot fail: the policies' results differ from PyTorch's lists,
    # and the places' from the same policy without places.
    model, x = model_and_input("mlp")
    pytorch = eager(model, x, torch.bfloat16, None)
    issue = autocastgen.export(model, (x,), device="cpu", dtype=torch.bfloat16, policy=ISSUE_POLICY)
    places = autocastgen.export(model, (x,), device="cpu", dtype=torch.bfloat16, policy=PLACES_POLICY)
    assert not exact(issue.module()(x), pytorch)
    autocastgen.load_policy(PLACES_POLICY)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        unattached = model(x)
    autocastgen.clear_runtime_policies()
    assert not exact(places.module()(x), unattached)
    rows = {(r["module"], r["op"]): r for r in autocastgen.precision_map(places)["rows"]}
    assert rows[("fc1", "aten::linear")]["ran_in"] == {"bfloat16": 1}
    assert rows[("fc2", "aten::linear")]["ran_in"] == {"float32": 1}
    # The section's input, cast by attach's pre-hook in eager (aten::layer_norm is not on the
    # CPU lists: it is held as the native_layer_norm it runs, Note [which ops a program keeps]).
    assert rows[("ln", "aten::native_layer_norm")]["casts_in"] == {"bfloat16->float32": 1}
    assert rows[("", "aten::gelu")]["ran_in"] == {"bfloat16": 1}


def test_policy_none_is_what_is_in_force() -> None:
    model, x = model_and_input("attention")
    program = autocastgen.export(model, (x,), device="cpu", dtype=torch.bfloat16)
    assert_exact(program.module()(x), eager(model, x, torch.bfloat16, None))  # PyTorch's lists
    assert program.graph_module.meta["custom"]["autocastgen"]["policies"][0].startswith("PyTorch ")
    autocastgen.load_policy(ISSUE_POLICY)
    program = autocastgen.export(model, (x,), device="cpu", dtype=torch.float16)
    assert_exact(program.module()(x), eager(model, x, torch.float16, ISSUE_POLICY))


def test_a_policy_for_one_export_leaves_the_runtime_policies_as_they_were() -> None:
    model, x = model_and_input("mlp")
    autocastgen.load_policy(PLACES_POLICY)
    before_force = torch.ops.autocastgen.policies_in_force()
    with autocastgen.attach(model), torch.autocast("cpu", dtype=torch.bfloat16):
        before = model(x)
    autocastgen.export(model, (x,), device="cpu", dtype=torch.bfloat16, policy=ISSUE_POLICY)
    assert torch.ops.autocastgen.policies_in_force() == before_force
    with autocastgen.attach(model), torch.autocast("cpu", dtype=torch.bfloat16):
        assert_exact(model(x), before)  # entries, scoped entries and the section as before
    with pytest.raises(autocastgen.PolicyError, match="unknown op 'gelux'"):
        autocastgen.export(model, (x,), device="cpu", dtype=torch.bfloat16,
                           policy="autocast: {device: cpu}\nlists:\n  fp32: [gelux]\n")
    assert torch.ops.autocastgen.policies_in_force() == before_force


def test_the_scope_the_call_sits_in_changes_nothing() -> None:
    model, x = model_and_input("mlp")
    autocastgen.load_policy(ISSUE_POLICY)
    plain = autocastgen.export(model, (x,), device="cpu", dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.float16):
        inside_torch = autocastgen.export(model, (x,), device="cpu", dtype=torch.bfloat16)
    with autocastgen.autocast("cpu", dtype=torch.float16):
        inside_ours = autocastgen.export(model, (x,), device="cpu", dtype=torch.bfloat16)
    for program in (inside_torch, inside_ours):
        assert program.graph_module.submod_1.code == plain.graph_module.submod_1.code
        assert_exact(program.module()(x), plain.module()(x))


def test_a_release_before_the_verified_one_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    # 2.7 has torch.export's autocast pass but bakes wrongly: the refusal is by release, with a message.
    monkeypatch.setattr(torch, "__version__", "2.7.1+cpu")
    assert autocastgen._export.supported() == "autocastgen.export is verified with PyTorch 2.15 and later; this is 2.7.1+cpu"
    model, x = model_and_input("mlp")
    with pytest.raises(autocastgen.ExportError, match=r"verified with PyTorch 2\.15 and later; this is 2\.7\.1"):
        autocastgen.export(model, (x,), device="cpu", dtype=torch.bfloat16, policy=ISSUE_POLICY)


def test_export_kwargs_reach_torch_export_dynamic_shapes_and_strict() -> None:
    model, x = model_and_input("mlp")
    other = torch.randn(7, 16)
    program = autocastgen.export(model, (x,), device="cpu", dtype=torch.bfloat16, policy=PLACES_POLICY,
                                 dynamic_shapes={"x": {0: torch.export.Dim("batch")}})
    assert_exact(program.module()(other), eager(model, other, torch.bfloat16, PLACES_POLICY))
    strict = autocastgen.export(model, (x,), device="cpu", dtype=torch.bfloat16, policy=PLACES_POLICY, strict=True)
    assert_exact(strict.module()(x), eager(model, x, torch.bfloat16, PLACES_POLICY))


def test_the_guard_keeps_autocast_from_deciding_again() -> None:
    model, x = model_and_input("mlp")
    program = autocastgen.export(model, (x,), device="cpu", dtype=torch.bfloat16, policy=ISSUE_POLICY)
    expected = program.module()(x)
    guards = [n for n in nodes(program) if n.target is torch.ops.higher_order.wrap_with_autocast]
    assert len(guards) == 1 and guards[0].args[:4] == ("cpu", None, False, None)
    # Without it (the body inlined), torch.autocast casts the program's casts again: other bits.
    unguarded = program.run_decompositions({})
    assert not any(n.target is torch.ops.higher_order.wrap_with_autocast for n in nodes(unguarded))
    assert_exact(unguarded.module()(x), expected)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not exact(unguarded.module()(x), expected)
        assert_exact(program.module()(x), expected)


def test_the_program_holds_aten_ops_and_casts_only_with_statistics_on() -> None:
    model, x = model_and_input("attention")
    autocastgen.load_policy(ISSUE_POLICY)
    plain = autocastgen.export(model, (x,), device="cpu", dtype=torch.float16)
    with autocastgen.stats() as stats, autocastgen.watch("raise"):
        program = autocastgen.export(model, (x,), device="cpu", dtype=torch.float16)
    assert not stats.ops  # the traces are no calls of the model
    assert program.graph_module.submod_1.code == plain.graph_module.submod_1.code
    for node in nodes(program):
        if node.op != "call_function":
            continue
        target = node.target
        assert (isinstance(target, torch._ops.OpOverload) and target.namespace == "aten") or target in (
            torch.ops.higher_order.wrap_with_autocast, operator.getitem), node.format_node()
    assert any(n.target is torch.ops.aten._to_copy.default for n in nodes(program))
    with autocastgen.record(), pytest.raises(autocastgen.ExportError, match="record-only mode is on"):
        autocastgen.export(model, (x,), device="cpu", dtype=torch.float16)


def test_weights_are_stored_once_in_the_dtype_every_use_casts_them_to(tmp_path: pathlib.Path) -> None:
    torch.manual_seed(0)
    model, x = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64)), torch.randn(8, 64)
    program = autocastgen.export(model, (x,), device="cpu", dtype=torch.bfloat16)  # PyTorch's lists: linear lower
    assert {k: v.dtype for k, v in program.state_dict.items()} == dict.fromkeys(
        ("0.weight", "0.bias", "2.weight", "2.bias"), torch.bfloat16)
    assert not [n for n in nodes(program) if n.target is torch.ops.aten._to_copy.default and n.args[0].op == "placeholder"
                and n.args[0].name.startswith("p_")]
    assert_exact(program.module()(x), eager(model, x, torch.bfloat16, None))
    assert program.graph_module.meta["custom"]["autocastgen"]["stored_in_lower_precision"]["0.weight"] == "bfloat16"
    torch.export.save(program, tmp_path / "bf16.pt2")
    torch.export.save(torch.export.export(model, (x,)), tmp_path / "f32.pt2")
    assert (tmp_path / "bf16.pt2").stat().st_size < 0.6 * (tmp_path / "f32.pt2").stat().st_size


def test_torch_export_inside_our_scope_warns_once_naming_autocastgen_export() -> None:
    from autocastgen._core import traced as _traced

    model, x = model_and_input("mlp")
    autocastgen.load_policy(ISSUE_POLICY)
    _traced._warned_about_export = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        autocastgen.export(model, (x,), device="cpu", dtype=torch.bfloat16)  # ours: quiet
        assert not [w for w in caught if "torch.export.export traced" in str(w.message)]
        for _ in range(2):
            with autocastgen.autocast("cpu", dtype=torch.bfloat16):
                torch.export.export(model, (x,))
    said = [str(w.message) for w in caught if "torch.export.export traced" in str(w.message)]
    assert len(said) == 1 and "autocastgen.export(model, args, device=..., dtype=...)" in said[0]


def test_run_decompositions_under_a_runtime_policy_keeps_ops_and_equals_eager() -> None:
    # Issue 48's item 4: run_decompositions({}) made "Unable to cast ... NotImplementedType" in
    # our kernels (Note [bookkeeping ops] in runtime/torch/bookkeeping_op.h).
    model, x = model_and_input("mlp")
    autocastgen.load_policy(ISSUE_POLICY)
    program = torch.export.export(model, (x,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        decomposed = program.run_decompositions({})
    assert any(n.target is torch.ops.aten.linear.default for n in nodes(decomposed))
    assert_exact(decomposed.module()(x), eager(model, x, torch.bfloat16, ISSUE_POLICY))
    cia = torch._C.DispatchKey.CompositeImplicitAutograd
    for name in torch.ops.autocastgen:
        for overload in getattr(torch.ops.autocastgen, name).overloads():
            op = getattr(getattr(torch.ops.autocastgen, name), overload)
            if not any("Tensor" in str(a.type) for a in op._schema.arguments):
                assert not torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), cia), op.name()


def test_apply_policy_gives_exports_bits_and_refuses_a_baked_program() -> None:
    model, x = model_and_input("attention")
    float32 = torch.export.export(model, (x,))
    code = float32.graph_module.code
    applied = autocastgen.apply_policy(float32, device="cpu", dtype=torch.float16, policy=ISSUE_POLICY)
    exported = autocastgen.export(model, (x,), device="cpu", dtype=torch.float16, policy=ISSUE_POLICY)
    assert float32.graph_module.code == code  # the caller's program is left as it was
    assert_exact(applied.module()(x), exported.module()(x))
    assert_exact(applied.module()(x), eager(model, x, torch.float16, ISSUE_POLICY))
    with pytest.raises(autocastgen.ExportError, match="already carries a policy"):
        autocastgen.apply_policy(applied, device="cpu", dtype=torch.bfloat16)


@pytest.mark.skipif(not HAS_CPU_SCALED_MM, reason="this PyTorch has no CPU _scaled_mm (the fp8 list runs in bfloat16 there)")
def test_fp8_entries_become_pytorchs_own_ops(saved) -> None:
    programs, results = saved
    program, expected = programs["fp8"]
    assert sum(n.target is torch.ops.aten._scaled_mm.default for n in nodes(program)) == 2
    assert_exact(program.module()(fp8_model_and_input()[1]), expected)
    assert results["fp8"]["equal"] and all(results["fp8"]["inside_autocast"].values()), results["fp8"]
    model, x = fp8_model_and_input()
    with pytest.raises(RuntimeError, match="delayed scaling takes a weight's scale from the amaxes of earlier calls"):
        autocastgen.export(model, (x,), device="cpu", dtype=torch.bfloat16, policy=FP8_POLICY.replace("SCALING", "delayed"))


def test_bad_arguments_are_refused() -> None:
    model, x = model_and_input("mlp")
    with pytest.raises(ValueError, match="dtype must be torch.float16 or torch.bfloat16"):
        autocastgen.export(model, (x,), device="cpu", dtype=torch.float32)
    with pytest.raises(ValueError, match="has no autocast key"):
        autocastgen.export(model, (x,), device="meta", dtype=torch.float16)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, AUTOCASTGEN_PYTHON=sys.executable)
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, env=env, timeout=300, check=False)


def test_the_cli_applies_a_policy_and_shows_a_programs_precision_map(tmp_path: pathlib.Path) -> None:
    model, x = model_and_input("mlp")
    torch.export.save(torch.export.export(model, (x,)), tmp_path / "f32.pt2")
    (tmp_path / "places.yaml").write_text(PLACES_POLICY)
    result = run_cli("apply", str(tmp_path / "f32.pt2"), "--policy", str(tmp_path / "places.yaml"), "--dtype",
                     "bfloat16", "-o", str(tmp_path / "bf16.pt2"))
    assert result.returncode == 0, result.stderr
    applied = torch.export.load(tmp_path / "bf16.pt2")
    assert_exact(applied.module()(x), eager(model, x, torch.bfloat16, PLACES_POLICY))
    result = run_cli("precision-map", str(tmp_path / "bf16.pt2"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("bf16.pt2: cpu bfloat16, policy ") and "places.yaml" in lines[0]
    assert any(line.split()[:4] == ["fc2", "aten::linear", "1", "float32"] for line in lines), result.stdout



def test_the_precision_map_shows_names_from_the_program_escaped() -> None:
    # Module paths, op names and the policies' names come from a saved program anyone may have
    # made: every code point 0-255, a right-to-left override and a line separator, shown escaped.
    from autocastgen._export.mapping import format_text

    hostile = "".join(map(chr, range(256))) + "\u202e\u2028"
    row = {"module": hostile, "op": hostile, "calls": 1, "ran_in": {hostile: 1}, "casts_in": {}}
    record = {"device": "cpu", "dtype": "bfloat16", "policies": [hostile], "digest": hostile, "torch": hostile,
              "stored_in_lower_precision": {hostile: hostile}}
    for per_module in (True, False):
        for mapped in ({"record": record, "rows": [row], "casts": 0}, {"record": None, "rows": [row], "casts": 0}):
            lines = format_text(hostile, mapped, per_module=per_module).split("\n")
            assert all(line.isprintable() for line in lines), lines
            assert "\\x1b" in lines[0] and "\\x9b" in lines[0]
            assert "\\u202e" in lines[-1] and "\\x00" in lines[-1]


def test_the_cli_verb_refuses_a_bad_policy_and_writes_nothing(tmp_path: pathlib.Path, capsys) -> None:
    # What the verb runs (autocastgen/_export/cli.py), in this process: a third CLI process would
    # spend its seconds importing torch.
    from autocastgen._export import cli as export_cli

    model, x = model_and_input("mlp")
    torch.export.save(torch.export.export(model, (x,)), tmp_path / "f32.pt2")
    (tmp_path / "bad.yaml").write_text("autocast: {device: cpu}\nlists:\n  fp32: [linearr]\n")
    status = export_cli.main(["apply", str(tmp_path / "f32.pt2"), "--policy", str(tmp_path / "bad.yaml"),
                               "--dtype", "float16", "-o", str(tmp_path / "out.pt2")])
    assert status == 1 and "bad.yaml:3:10: error: unknown op 'linearr'" in capsys.readouterr().err
    assert not (tmp_path / "out.pt2").exists() and not list(tmp_path.glob(".out.pt2*"))
    status = export_cli.main(["precision-map", str(tmp_path / "missing.pt2")])
    assert status == 1 and "autocastgen: error: " in capsys.readouterr().err
