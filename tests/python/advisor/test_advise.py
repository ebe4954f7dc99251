"""The policy advisor (autocastgen.advise, `autocastgen advise`; docs/advise.md).

Models, each small enough to run in milliseconds:
- Note [the overflow model]: Linear(16, 64) -> ReLU -> Linear(64, 64) with its weights x20000 ->
  LayerNorm -> Linear(64, 32) -> ReLU -> Linear(32, 4), on a 32x16 batch. The third module's
  outputs reach ~84000 (above float16's 65504); the LayerNorm brings them back, so every other
  Linear stays far inside float16's range. In float16 the base policy gives NaN.
- Note [the cancellation model]: head(relu(diff(x))) + probe(x) on raw readings x ~ 1000 + N(0, 1).
  `diff` computes differences of neighbouring inputs: bfloat16 keeps steps of 4 at 1000, so its
  outputs (~N(0, 2)) become noise. `probe` has weights 4e-5 (outputs ~0.2 from inputs ~1000: the
  most bits "lost" on paper, harmless in fact: no cancellation) and `head` is ordinary. Nothing
  leaves bfloat16's range; only the validation search can find `diff`, and the risk order tries
  `probe` first, so the greedy removal has work to do.

ctest sets AUTOCASTGEN_BUILD_DIR and AUTOCASTGEN_CLI; by hand:
  AUTOCASTGEN_BUILD_DIR=build AUTOCASTGEN_CLI=build/bin/autocastgen PYTHONPATH=build/python \\
      python3 -m pytest tests/python/advisor/test_advise.py
The transformers test runs in scripts/test's default build (scripts/models-venv) and skips where
transformers is not installed.
"""

from __future__ import annotations

import json
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
CLI = os.environ.get("AUTOCASTGEN_CLI", str(BUILD / "bin" / "autocastgen"))
CPU_POLICY = REPO / "schemas" / "policies" / "cpu.yaml"
CUDA_POLICY = REPO / "schemas" / "policies" / "cuda.yaml"

# The build's package and CLI: an error under ctest where missing (built_tree.py).
require_built(BUILD, "python/autocastgen/__init__.py", CLI)

import autocastgen  # noqa: E402
from autocastgen.advisor import AdviseError, advise_record  # noqa: E402


def overflow_model():
    """Note [the overflow model]."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 64), torch.nn.LayerNorm(64),
        torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    with torch.no_grad():
        model[2].weight.mul_(20000)
    return model.eval(), torch.randn(32, 16) * 4


class Cancellation(torch.nn.Module):
    """Note [the cancellation model]."""

    def __init__(self) -> None:
        super().__init__()
        self.diff, self.head, self.probe = torch.nn.Linear(16, 16), torch.nn.Linear(16, 4), torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.head(torch.relu(self.diff(x))) + self.probe(x)


def cancellation_model():
    torch.manual_seed(0)
    model = Cancellation().eval()
    with torch.no_grad():
        eye = torch.eye(16)
        model.diff.weight.copy_(eye - torch.roll(eye, 1, dims=1))
        model.diff.bias.zero_()
        model.probe.weight.mul_(4e-5)
        model.probe.bias.zero_()
    return model, 1000 + torch.randn(64, 16)


def run_under(policy, model, x, dtype):
    """The model's output under a policy file, and the statistics per (module, op)."""
    autocastgen.clear_runtime_policies()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        autocastgen.load_policy(policy)
    try:
        with torch.no_grad(), autocastgen.attach(model), autocastgen.stats() as s:
            with torch.autocast("cpu", dtype=dtype):
                out = model(x)
    finally:
        autocastgen.clear_runtime_policies()
    return out, {(e.get("module"), e["op"]): e for e in s.table["ops"]}


def record_file(tmp_path, model, x, dtype=torch.float16, attached=True):
    """A record taken as docs/advise.md says: record-only, the model attached, the base loaded."""
    path = tmp_path / "model.record.json"
    autocastgen.clear_runtime_policies()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        autocastgen.load_policy(CPU_POLICY)
    autocastgen.insight.reset()
    try:
        with torch.no_grad(), autocastgen.record():
            if attached:
                with autocastgen.attach(model), torch.autocast("cpu", dtype=dtype):
                    model(x)
            else:
                with torch.autocast("cpu", dtype=dtype):
                    model(x)
        path.write_text(json.dumps(autocastgen.insight.snapshot()))
    finally:
        autocastgen.clear_runtime_policies()
    return path


def cli(*args):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=120)


def test_float16_overflow_moves_exactly_the_one_place(tmp_path):
    model, x = overflow_model()
    advice = autocastgen.advise(model, x, policy=CPU_POLICY, dtype=torch.float16)
    assert [(m.module, m.op, m.by, m.section) for m in advice.moved] == [("2", "aten::linear", "ranges", None)]
    assert "max |out| 83951.9, float16 headroom -0.4 bits, 0.488% of elements out of range" == advice.moved[0].reason
    # The base fails (NaN), the proposal passes: the float32 run, the base and the proposal.
    assert [(r.what, r.passed) for r in advice.log] == [("float32", True), ("base", False), ("proposal", True)]
    assert advice.runs == 3 and advice.minimal
    # Four Linears: all four in float16 before, three after; FLOPs: 2*32*(16*64 + 64*64 + 64*32 + 32*4) in all.
    before, after = advice.share["before"], advice.share["after"]
    assert (before["gemm_calls"], before["lower_calls"], after["lower_calls"]) == (4, 4, 3)
    assert before["gemm_flops"] == after["gemm_flops"] == 2 * 32 * (16 * 64 + 64 * 64 + 64 * 32 + 32 * 4)
    assert after["flops"] == pytest.approx(1 - 64 * 64 / (16 * 64 + 64 * 64 + 64 * 32 + 32 * 4))

    written = advice.write(tmp_path / "advised.yaml")
    text = written.read_text()
    assert "extends: " + json.dumps(os.path.relpath(CPU_POLICY, tmp_path)) in text
    assert '    # 2: max |out| 83951.9' in text and '    - {op: linear, modules: ["2"]}' in text
    # What the file does, measured independently: finite, close to float32, the other Linears float16.
    with torch.no_grad():
        reference = model(x)
    base_out, _ = run_under(CPU_POLICY, model, x, torch.float16)
    assert not torch.isfinite(base_out).all()
    out, rows = run_under(written, model, x, torch.float16)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), reference, rtol=1e-2, atol=1e-2 * float(reference.abs().max()))
    ran_in = {module: rows[(module, "aten::linear")]["ran_in"] for module in ("0", "2", "4", "6")}
    assert ran_in == {"0": {"float16": 1}, "2": {"float32": 1}, "4": {"float16": 1}, "6": {"float16": 1}}
    # The file passes check, loads, and generates wrappers (the add_autocast_ops() route).
    checked = cli("check", "--policy", written)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    autocastgen.clear_runtime_policies()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert autocastgen.load_policy(written) > 0
    autocastgen.clear_runtime_policies()
    generated = cli("generate", "--target", "torch", "--policy", written, "--name", "advised", "--out",
                    tmp_path / "gen")
    assert generated.returncode == 0, generated.stdout + generated.stderr
    assert "modules" in (tmp_path / "gen" / "autocast_advised.cpp").read_text().lower()


def test_the_same_advice_twice():
    model, x = overflow_model()
    first = autocastgen.advise(model, x, policy=CPU_POLICY, dtype="float16")
    second = autocastgen.advise(model, x, policy=CPU_POLICY, dtype="float16")
    assert first.text == second.text and first.log == second.log and first.share == second.share


def test_bfloat16_validation_search_finds_the_precision_place():
    model, x = cancellation_model()
    advice = autocastgen.advise(model, x, policy=CPU_POLICY, dtype=torch.bfloat16)
    assert [(m.module, m.op, m.by) for m in advice.moved] == [("diff", "aten::linear", "validation")]
    assert advice.moved[0].reason.startswith("needed to pass validation (max |in| 100")
    # float32, base (fails), all three, bisection over [probe, diff, head]: [probe] fails, [probe, diff]
    # passes; without probe it still passes.
    assert [(r.what, r.places, r.passed) for r in advice.log] == [
        ("float32", 0, True), ("base", 0, False), ("all", 3, True), ("bisect", 1, False), ("bisect", 2, True),
        ("remove", 1, True)]
    assert advice.share["after"]["lower_calls"] == 2 and advice.share["before"]["lower_calls"] == 3
    # The places stay in float32 by place, not by op.
    out, rows = run_under(advice.text, model, x, torch.bfloat16)
    assert rows[("diff", "aten::linear")]["ran_in"] == {"float32": 1}
    assert rows[("head", "aten::linear")]["ran_in"] == rows[("probe", "aten::linear")]["ran_in"] == {"bfloat16": 1}


def test_a_validate_function_decides():
    model, x = cancellation_model()
    calls = []

    def validate(reference, output):
        calls.append(output.dtype)
        return bool(((output.float() - reference).abs() <= 0.05 * reference.abs().max()).all())

    advice = autocastgen.advise(model, x, policy=CPU_POLICY, dtype=torch.bfloat16, validate=validate)
    assert [m.module for m in advice.moved] == ["diff"]
    assert len(calls) == advice.runs - 1  # every run but the float32 one


def test_max_runs_bounds_the_search():
    model, x = cancellation_model()
    with pytest.raises(AdviseError, match=r"max_runs=4 reached before a set of places passed: base \(0 places\): "
                                          r"fail, error .* of the tolerance; all \(3 places\): pass"):
        autocastgen.advise(model, x, policy=CPU_POLICY, dtype=torch.bfloat16, max_runs=4)
    # Enough runs to pass but not to finish the removal: a passing set, said not to be minimal.
    advice = autocastgen.advise(model, x, policy=CPU_POLICY, dtype=torch.bfloat16, max_runs=5)
    assert not advice.minimal and [m.module for m in advice.moved] == ["diff", "probe"]
    assert "max_runs reached before the set was minimal" in advice.text


def test_a_module_all_of_whose_places_move_is_a_section():
    # Two blocks of two Linears; block "0" overflows in both (large inputs), block "1" not at all.
    torch.manual_seed(0)
    block = lambda: torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))  # noqa: E731
    model = torch.nn.Sequential(block(), torch.nn.LayerNorm(8), block()).eval()
    x = torch.randn(4, 8) * 1e5
    advice = autocastgen.advise(model, x, policy=CPU_POLICY, dtype=torch.float16)
    assert [(m.module, m.section) for m in advice.moved] == [("0.0", "0"), ("0.1", "0")]
    assert '\nmodules:\n  # linear in 0.0: max |out|' in advice.text and '\n  "0": fp32\n' in advice.text
    out, rows = run_under(advice.text, model, x, torch.float16)
    assert torch.isfinite(out).all()
    assert rows[("2.0", "aten::linear")]["ran_in"] == {"float16": 1}


def test_a_transformers_model_from_a_config():
    # GPT-2 built from a config (no download), its second block's MLP up-projection scaled x1e5:
    # c_fc's outputs reach 72000 (float16: inf) and c_proj gets them as inputs (GELU keeps them).
    # Both places are in transformer.h.1.mlp, which holds nothing else: one section.
    transformers = requires.module("transformers")  # scripts/models-venv (requires.py)
    config = transformers.GPT2Config(vocab_size=128, n_positions=32, n_embd=64, n_layer=2, n_head=4,
                                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        model.transformer.h[1].mlp.c_fc.weight.mul_(1e5)
    tokens = torch.randint(0, 128, (2, 16))
    inputs = {"input_ids": tokens, "use_cache": False}
    advice = autocastgen.advise(model, inputs, policy=CPU_POLICY, dtype=torch.float16)
    assert [(m.module, m.op, m.by, m.section) for m in advice.moved] == [
        ("transformer.h.1.mlp.c_fc", "aten::addmm", "ranges", "transformer.h.1.mlp"),
        ("transformer.h.1.mlp.c_proj", "aten::addmm", "ranges", "transformer.h.1.mlp")]
    assert [(r.what, r.passed) for r in advice.log] == [("float32", True), ("base", False), ("proposal", True)]
    assert advice.log[1].detail == "non-finite output"
    # 11 GEMM calls (4 addmm per block, 2 attention, lm_head): 9 stay in float16.
    assert (advice.share["after"]["gemm_calls"], advice.share["after"]["lower_calls"]) == (11, 9)
    assert advice.text == autocastgen.advise(model, inputs, policy=CPU_POLICY, dtype=torch.float16).text
    # The advice validates: the logits under it are finite and close to float32's.
    with torch.no_grad():
        reference = model(**inputs).logits
    autocastgen.clear_runtime_policies()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        autocastgen.load_policy(advice.text)
    try:
        with torch.no_grad(), autocastgen.attach(model), torch.autocast("cpu", dtype=torch.float16):
            logits = model(**inputs).logits
    finally:
        autocastgen.clear_runtime_policies()
    assert torch.isfinite(logits).all()
    torch.testing.assert_close(logits.float(), reference, rtol=1e-2, atol=1e-2 * float(reference.abs().max()))
    # bfloat16 has the range: nothing to move, the base passes.
    bf16 = autocastgen.advise(model, inputs, policy=CPU_POLICY, dtype=torch.bfloat16)
    assert bf16.moved == () and [(r.what, r.passed) for r in bf16.log] == [("float32", True), ("base", True)]


def test_cli_advises_from_a_record_file(tmp_path):
    model, x = overflow_model()
    record = record_file(tmp_path, model, x)
    out = tmp_path / "sub" / "advised.yaml"
    out.parent.mkdir()
    result = cli("advise", record, "--policy", CPU_POLICY, "--dtype", "float16", "-o", out)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:2] == [
        "autocastgen advise: float16: 1 place moved to float32 (1 by ranges, 0 by validation)",
        "  aten::linear in 2: max |out| 83951.9, float16 headroom -0.4 bits, 0.488% of elements out of range"]
    text = out.read_text()
    assert text.startswith("# Written by autocastgen advise for float16 autocast from model.record.json: 1 place")
    assert "# From measured ranges alone (not verified by running the model)." in text
    assert f"extends: {json.dumps(os.path.relpath(CPU_POLICY, out.parent))}" in text
    # The same proposal as the Python API's (one implementation): the same entries.
    advice = autocastgen.advise(model, x, policy=CPU_POLICY, dtype=torch.float16)
    assert text.split("extends:")[1].split("\n", 1)[1] == advice.text.split("extends:")[1].split("\n", 1)[1]
    assert cli("check", "--policy", out).returncode == 0
    # A larger margin moves more: with 13 bits the first Linear (max |out| 8.5, 12.9 bits) moves too.
    wide = advise_record(record, CPU_POLICY, "float16", margin_bits=13)
    assert '{op: linear, modules: ["0", "2"]}' in wide.text


def test_cli_errors(tmp_path):
    model, x = overflow_model()
    unattached = record_file(tmp_path, model, x, attached=False)
    result = cli("advise", unattached, "--policy", CPU_POLICY, "--dtype", "float16", "-o", tmp_path / "o.yaml")
    assert result.returncode == 1 and not (tmp_path / "o.yaml").exists()
    assert result.stderr.startswith(f"autocastgen: error: {unattached}: the record has no module paths: take it "
                                    "with the model attached")
    result = cli("advise", unattached, "--policy", CPU_POLICY, "--dtype", "float8", "-o", tmp_path / "o.yaml")
    assert result.returncode != 0 and "--dtype: float8 not in {float16,bfloat16}" in result.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("autocast:\n  device: cpu\nlists:\n  fp32: [no_such_op]\n")
    result = cli("advise", record_file(tmp_path, model, x), "--policy", bad, "--dtype", "float16", "-o",
                 tmp_path / "o.yaml")
    assert result.returncode == 1 and "unknown op 'no_such_op'" in result.stderr
    assert "the base policy has errors; no advice written" in result.stderr
    assert not (tmp_path / "o.yaml").exists()


def nonfinite_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)).eval()
    with torch.no_grad():
        model[0].weight.fill_(1e38)
    return model, torch.ones(2, 8)


def test_errors(tmp_path):
    model, x = overflow_model()
    with pytest.raises(AdviseError, match=r"the base policy '.*cuda.yaml' is for device 'cuda', but the model runs "
                                          r"on 'cpu': give a cpu policy"):
        autocastgen.advise(model, x, policy=CUDA_POLICY, dtype=torch.float16)
    bf16_only = tmp_path / "bf16_only.yaml"
    bf16_only.write_text(f"extends: {json.dumps(str(CPU_POLICY))}\nautocast:\n  lower_precision: [bfloat16]\n")
    with pytest.raises(AdviseError, match=r"float16 is not a lower-precision dtype of the base policy"):
        autocastgen.advise(model, x, policy=bf16_only, dtype=torch.float16)
    with pytest.raises(AdviseError, match=r"dtype float32: the advisor advises float16 or bfloat16 autocast"):
        autocastgen.advise(model, x, policy=CPU_POLICY, dtype=torch.float32)
    with pytest.raises(autocastgen.PolicyError, match=r"unknown op 'no_such_op'"):
        bad = tmp_path / "bad.yaml"
        bad.write_text("autocast:\n  device: cpu\nlists:\n  fp32: [no_such_op]\n")
        autocastgen.advise(model, x, policy=bad, dtype=torch.float16)
    broken, ones = nonfinite_model()
    with pytest.raises(AdviseError, match=r"autocastgen.advise: the float32 run is already non-finite: non-finite outputs "
                                          r"from aten::linear in module '0', aten::linear in module '1'; lower"):
        autocastgen.advise(broken, ones, policy=CPU_POLICY, dtype=torch.float16)
    # The same from a record file: the record says which op went first.
    with pytest.raises(AdviseError, match=r"model.record.json: the float32 run is already non-finite: non-finite "
                                          r"outputs from aten::linear in module '0', aten::linear in module '1'"):
        advise_record(record_file(tmp_path, broken, ones), CPU_POLICY, "float16")
    with pytest.raises(AdviseError, match=r"the record has no module paths"):
        advise_record(record_file(tmp_path, model, x, attached=False), CPU_POLICY, "float16")
    record = record_file(tmp_path, model, x)
    with pytest.raises(AdviseError, match=r"the base policy '.*cuda.yaml' is for device 'cuda'"):
        advise_record(record, CUDA_POLICY, "float16", device="cpu")
    with pytest.raises(AdviseError, match=r"float16 is not a lower-precision dtype of the base policy '.*bf16_only.yaml' "
                                          r"\(lower_precision: \[bfloat16\]\)"):
        advise_record(record, bf16_only, "float16")
    (tmp_path / "not_json.json").write_text("{\"version\": 1,\n \"ops\": [}\n")
    with pytest.raises(AdviseError, match=r"not_json.json: cannot read the record:\n.*not_json.json:2:10: error: invalid JSON"):
        advise_record(tmp_path / "not_json.json", CPU_POLICY, "float16")
    (tmp_path / "stats.json").write_text(json.dumps({"version": 1, "ops": [
        {"op": "aten::linear", "policy": "lower_precision_fp", "module": "0", "calls": 1, "ran_in": {"float16": 1}}]}))
    with pytest.raises(AdviseError, match=r"stats.json: the record has no value ranges: take it in record-only mode"):
        advise_record(tmp_path / "stats.json", CPU_POLICY, "float16")


def test_a_record_only_process_is_refused(tmp_path):
    # AUTOCASTGEN_RECORD is read when the runtime loads: a child process.
    code = ("import sys, torch, autocastgen\n"
            f"sys.path[:0] = [{str(pathlib.Path(__file__).parent)!r}, {str(pathlib.Path(__file__).parents[1])!r}]\n"
            "from test_advise import overflow_model, CPU_POLICY\n"
            "model, x = overflow_model()\n"
            "try:\n"
            "    autocastgen.advise(model, x, policy=CPU_POLICY)\n"
            "except autocastgen.AdviseError as error:\n"
            "    print(error)\n")
    env = dict(os.environ, AUTOCASTGEN_RECORD=str(tmp_path / "r.json"),
               PYTHONPATH=os.pathsep.join([str(BUILD / "python"), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.stdout.startswith("record-only mode is on for the whole process (AUTOCASTGEN_RECORD)"), result.stderr
