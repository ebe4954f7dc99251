"""The advisor's fp8 places (docs/advise.md, "fp8 places"; Note [fp8 places] in
python/autocastgen/advisor/_fp8.py): the decision alone with injected timings and validations,
then the real measured path on a small model, checking that the proposal is consistent with what
it recorded (never which place wins by wall time).

ctest sets AUTOCASTGEN_BUILD_DIR; by hand: AUTOCASTGEN_BUILD_DIR=build python3 -m pytest tests/python/advisor/test_advise_fp8.py
"""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest
import torch

import child_process
from built_tree import require_built
from child_process import last_json

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
CLI = pathlib.Path(os.environ.get("AUTOCASTGEN_CLI", BUILD / "bin" / "autocastgen"))
# The build's package and runtime: an error under ctest where missing (built_tree.py).
require_built(BUILD, "python/autocastgen/__init__.py", "lib/libautocastgen_runtime_torch.so")


def _decide_module():
    from autocastgen.advisor import _fp8

    return _fp8


def test_decide_keeps_only_faster_places_that_pass_validation() -> None:
    fa = _decide_module()
    P = fa.Fp8Place
    places = [P("wide", ("linear",), 2e-3, 1e-3), P("tiny", ("linear",), 1e-4, 3e-4),
              P("fails", ("linear",), 2e-3, 1e-3), P("odd", ("linear",), None, None, can_fp8=False),
              P("also", ("linear", "mm"), 3e-3, 2e-3)]
    alone = {"wide": (True, "error 0.1 of the tolerance"), "fails": (False, "error 3 of the tolerance"),
             "also": (True, "error 0.2 of the tolerance")}
    asked = []

    def validate_alone(place):
        asked.append(place.module)
        return alone[place.module]

    out = fa.decide(places, "bfloat16", validate_alone, lambda ps: (True, "error 0.3 of the tolerance"))
    by = {p.module: p for p in out}
    assert [p.module for p in out] == ["also", "fails", "odd", "tiny", "wide"]
    assert sorted(asked) == ["also", "fails", "wide"]  # only places that improve are validated
    assert {m for m, p in by.items() if p.kept} == {"also", "wide"}
    assert by["wide"].reason == "fp8 1 ms vs bfloat16 2 ms (2.00x); validation passes (error 0.1 of the tolerance)"
    assert by["tiny"].reason == "not kept: no faster in fp8 (fp8 0.3 ms vs bfloat16 0.1 ms)"
    assert by["fails"].reason.startswith("not kept: validation fails in fp8 (error 3 of the tolerance)")
    assert by["odd"].reason.startswith("not kept: its GEMMs do not run in fp8 here")


def test_decide_drops_the_least_gain_while_the_kept_places_fail_together() -> None:
    fa = _decide_module()
    P = fa.Fp8Place
    places = [P("a", ("linear",), 4e-3, 1e-3), P("b", ("linear",), 2e-3, 1e-3), P("c", ("linear",), 3e-3, 1e-3)]
    together = []

    def validate_together(ps):
        names = sorted(p.module for p in ps)
        together.append(names)
        return (len(names) <= 2, "error 2 of the tolerance" if len(names) > 2 else "ok")

    out = fa.decide(places, "bfloat16", lambda p: (True, "ok"), validate_together)
    assert together == [["a", "b", "c"], ["a", "c"]]
    by = {p.module: p for p in out}
    assert not by["b"].kept and by["b"].reason.startswith("not kept: the kept places together fail validation")
    assert by["a"].kept and by["c"].kept


MODEL = """
import torch
torch.manual_seed(0)

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wide = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256))
        self.tiny = torch.nn.Linear(256, 16)
        self.odd = torch.nn.Linear(16, 10)  # 10 outputs: fp8 cannot take it

    def forward(self, x):
        return self.odd(self.tiny(x + self.wide(x)))

model = Net().eval()
inputs = torch.randn(64, 256)
"""


def test_advise_fp8_measured_proposal_is_consistent_with_its_measurements(tmp_path: pathlib.Path) -> None:
    if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_scaled_mm", "CPU"):
        pytest.skip(f"torch {torch.__version__} has no CPU _scaled_mm kernel (2.4, 2.7)")
    (tmp_path / "model.py").write_text(MODEL)
    result = child_process.run_child(BUILD, "", f"""
        import json, sys
        sys.path.insert(0, {str(tmp_path)!r})
        import torch, autocastgen
        from model import model, inputs
        advice = autocastgen.advise(model, inputs, fp8=True, fp8_repeats=3)
        path = advice.write({str(tmp_path / "advised.yaml")!r})
        autocastgen.load_policy(path)  # the written file loads
        autocastgen.clear_runtime_policies()
        print(json.dumps({{"places": [vars(p) | {{"improves": p.improves}} for p in advice.places],
                          "log": advice.log, "report": advice.report()}}))
        """, None, True)
    out = last_json(result)
    places = {p["module"]: p for p in out["places"]}
    assert sorted(places) == ["odd", "tiny", "wide.0", "wide.2"]
    assert not places["odd"]["can_fp8"] and not places["odd"]["kept"]
    for p in out["places"]:
        assert p["reason"]
        if p["kept"]:
            # Every kept place improved by its own measurements and passed validation.
            assert p["fp8_seconds"] < p["lower_seconds"] and p["passed"] is True
            assert p["reason"].startswith("fp8 ") and "validation passes" in p["reason"]
        elif p["can_fp8"] and not p["improves"]:
            assert p["reason"].startswith("not kept: no faster in fp8")
            assert p["passed"] is None  # not validated
        elif p["can_fp8"] and p["passed"] is False:
            assert p["reason"].startswith("not kept: validation fails")
    text = (tmp_path / "advised.yaml").read_text()
    assert text.startswith("# Written by autocastgen advise --fp8 for bfloat16 autocast")
    assert "autocast:\n  fp8: {scaling: current" in text
    for module, p in places.items():
        assert (f'"{module}"' in text.split("# Places left in")[0]) == p["kept"]
        assert p["reason"] in text
    whats = [entry[0] for entry in out["log"]]
    assert whats[0] == "float32" and "time lower" in whats and "time fp8" in whats
    # The CLI on the same script gives the same places (timings may differ, so not the same choice).
    written = tmp_path / "cli.yaml"
    cli = subprocess.run([str(CLI), "advise", "--fp8", str(tmp_path / "model.py"), "--policy",
                          str(REPO / "schemas" / "policies" / "cpu.yaml"), "-o", str(written)],
                         capture_output=True, text=True, cwd=tmp_path)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.startswith("autocastgen advise --fp8: ") and "of 4 places kept in fp8" in cli.stdout
    assert written.read_text().startswith("# Written by autocastgen advise --fp8")
