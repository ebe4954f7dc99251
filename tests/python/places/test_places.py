"""Precision by place from Python: autocastgen.attach(model), module-scoped rules (an entry's
``modules:``, the ``modules:`` section) in runtime policies and compiled policies, and the insight
by module (docs/policy-language.md "Precision by place", docs/python.md).

Each case runs in a fresh interpreter: loading a generated library or a policy cannot be undone.
ctest sets AUTOCASTGEN_BUILD_DIR; by hand:
  AUTOCASTGEN_BUILD_DIR=build python3 -m pytest tests/python/places/test_places.py
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import textwrap

import pytest

import child_process
from built_tree import require_built
from child_process import last_json
from exact import CHILD_IMPORT

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
RUNTIME = BUILD / "lib" / "libautocastgen_runtime_torch.so"
CPU_LIBRARY = BUILD / "lib" / "libautocastgen_torch_cpu.so"
CLI = pathlib.Path(os.environ.get("AUTOCASTGEN_CLI", BUILD / "bin" / "autocastgen"))

# The build's runtime, generated CPU library and package: an error under ctest where missing (built_tree.py).
require_built(BUILD, "python/autocastgen/__init__.py", RUNTIME, CPU_LIBRARY)

# A model with a nested module and an overflow in one place: the first Linear sees inputs up to
# 60000 and its outputs leave float16's range; the rest stays small.
PRELUDE = CHILD_IMPORT + textwrap.dedent(
    """
    import json, warnings
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(64, 16)
            self.act = torch.nn.ReLU()

        def forward(self, x):
            return self.act(self.proj(x))

    def make_model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 64), Block(), torch.nn.Linear(16, 4))

    def inputs():
        torch.manual_seed(1)
        return torch.rand(32, 8) * 60000

    def rows(table):
        return sorted((r.get("module"), r["op"], r["calls"], sorted(r["ran_in"])) for r in table["ops"])
    """
)


def run_child(body: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return child_process.run_child(BUILD, PRELUDE, body, env, check)


def test_attach_names_every_call_by_its_module_in_statistics_and_the_record(tmp_path: pathlib.Path) -> None:
    record = tmp_path / "record.json"
    result = run_child(
        f"""
        torch.ops.load_library({str(CPU_LIBRARY)!r})
        import autocastgen
        model = make_model()
        x = inputs() / 60000
        out = {{}}
        with autocastgen.attach(model):
            with autocastgen.stats() as s, torch.autocast("cpu", dtype=torch.bfloat16):
                model(x)
            out["inside"] = autocastgen.places.current_module()
            with autocastgen.record({str(record)!r}), torch.autocast("cpu", dtype=torch.float16):
                model(inputs())
        out["stats"] = rows(s.table)
        out["ops"] = {{k: (v["calls"], v["ran_in"], "module" in v) for k, v in s.ops.items()}}
        with autocastgen.stats() as after, torch.autocast("cpu", dtype=torch.bfloat16):
            model(x)  # removed: no module any more
        out["after"] = rows(after.table)
        print(json.dumps(out))
        """
    )
    out = last_json(result)
    assert out["inside"] is None  # every frame left after the forward
    assert out["stats"] == [["0", "aten::linear", 1, ["bfloat16"]], ["1.proj", "aten::linear", 1, ["bfloat16"]],
                            ["2", "aten::linear", 1, ["bfloat16"]]]
    assert out["ops"] == {"aten::linear": [3, {"bfloat16": 3}, False]}  # `ops` sums an op's modules
    assert out["after"] == [[None, "aten::linear", 3, ["bfloat16"]]]
    table = json.loads(record.read_text())
    by_module = {r["module"]: r for r in table["ops"]}
    assert set(by_module) == {"0", "1.proj", "2"}
    assert by_module["0"]["ranges"]["float16_overflow"] > 0  # the one place that overflows
    assert by_module["1.proj"]["ranges"]["float16_overflow"] == 0
    # The file is the record block's own table (the stats block above is not in it, Note [a
    # block's table]); record-only cast nothing.
    assert by_module["0"]["ran_in"] == {"float32": 1}

    # The CLI's view: a row per (module, op), and by default one per op.
    by = subprocess.run([str(CLI), "stats", str(record), "--by", "module"], capture_output=True, text=True, check=True)
    lines = by.stdout.splitlines()
    assert lines[0].endswith("3 rows (module, op)")
    assert [line.split()[0] for line in lines[2:5]] == ["0", "1.proj", "2"]
    plain = subprocess.run([str(CLI), "stats", str(record)], capture_output=True, text=True, check=True)
    assert plain.stdout.splitlines()[0].endswith("1 op")


def test_the_watch_names_the_module_beside_the_line() -> None:
    result = run_child(
        f"""
        torch.ops.load_library({str(CPU_LIBRARY)!r})
        import autocastgen
        model = make_model()
        with autocastgen.attach(model), autocastgen.watch("raise"):
            try:
                with torch.autocast("cpu", dtype=torch.float16):
                    model(inputs())
            except RuntimeError as error:
                print(json.dumps(str(error).splitlines()[0]))
        """
    )
    message = last_json(result)
    assert "non-finite output: aten::linear" in message
    assert "; in module '0'; called from " in message


def test_frames_are_left_when_a_forward_raises_and_module_scope_by_hand() -> None:
    result = run_child(
        """
        import autocastgen

        class Fails(torch.nn.Module):
            def forward(self, x):
                raise ValueError("boom")

        model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(Fails()))
        out = {}
        with autocastgen.attach(model):
            try:
                model(torch.randn(1, 2))
            except ValueError:
                pass
        out["after_raise"] = autocastgen.places.current_module()
        out["depth"] = int(torch.ops.autocastgen.module_depth())
        with autocastgen.ModuleScope("decoder.layers.3"):
            out["by_hand"] = autocastgen.places.current_module()
        out["globs"] = [autocastgen.places.glob_matches(p, "layers.3.attn") for p in ("layers.*.attn", "layers.*", "attn")]
        try:
            autocastgen.attach(object())
        except TypeError as error:
            out["not_a_module"] = str(error)
        print(json.dumps(out))
        """
    )
    out = last_json(result)
    assert out["after_raise"] is None and out["depth"] == 0
    assert out["by_hand"] == "decoder.layers.3"
    assert out["globs"] == [True, True, False]
    assert out["not_a_module"] == "autocastgen.attach: expected a torch.nn.Module, got object"


# A policy with both forms (the syntax): Block's projection in float32 by an entry, the
# last Linear (module "2") in float32 by the section, and the first one ("0") in float16 inside a
# bfloat16 scope by the section.
PLACES_POLICY = textwrap.dedent(
    """
    autocast:
      device: cpu
      lower_precision: [bfloat16, float16]
    lists:
      lower_precision_fp: [linear]
      fp32:
        - {op: linear, modules: ["*.proj"]}
    modules:
      "2": fp32
      "0": float16
    """
)

# What each module's linear runs in, inside a bfloat16 scope, with the policy above.
EXPECTED_RAN_IN = [["0", "aten::linear", 1, ["float16"]], ["1.proj", "aten::linear", 1, ["float32"]],
                   ["2", "aten::linear", 1, ["float32"]]]

PLACES_CHECK = """
    model = make_model()
    x = (inputs() / 60000).to(torch.bfloat16).float()
    with autocastgen.attach(model):
        with autocastgen.stats() as s, torch.autocast("cpu", dtype=torch.bfloat16):
            y = model(x)
    out = {"rows": rows(s.table), "dtype": str(y.dtype)}
    with autocastgen.stats() as plain, torch.autocast("cpu", dtype=torch.bfloat16):
        model(x)  # not attached: no place, the lists as everywhere
    out["plain"] = rows(plain.table)
    with autocastgen.attach(model), torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
        out["off"] = str(model(x).dtype)  # sections change nothing while autocast is off
"""


@pytest.mark.parametrize("loader", ["load_policy", "compile_policy"])
def test_a_policy_honours_modules_entries_and_sections(tmp_path: pathlib.Path, loader: str) -> None:
    # load_policy: the runtime-policy kernels; compile_policy: generated wrappers, as add_autocast_ops.
    policy = tmp_path / "places.yaml"
    policy.write_text(PLACES_POLICY)
    result = run_child(
        f"""
        import autocastgen
        autocastgen.{loader}({str(policy)!r})
        {textwrap.indent(textwrap.dedent(PLACES_CHECK), "        ").strip()}
        print(json.dumps(out))
        """,
        env={"AUTOCASTGEN_CACHE": str(tmp_path / "cache")},
    )
    out = last_json(result)
    assert out["rows"] == EXPECTED_RAN_IN
    # The section's fp32 module got bfloat16 activations from Block and cast them (attach's pre-hook).
    assert out["dtype"] == "torch.float32"
    assert out["plain"] == [[None, "aten::linear", 3, ["bfloat16"]]]
    assert out["off"] == "torch.float32"


def test_patterns_matching_no_module_warn_with_where_and_strict_raises(tmp_path: pathlib.Path) -> None:
    policy = tmp_path / "typo.yaml"
    policy.write_text(
        "autocast:\n  device: cpu\nlists:\n  fp32:\n    - {op: softmax.int, modules: [\"layers.*.atn\"]}\nmodules:\n  lm_head: fp32\n"
    )
    result = run_child(
        f"""
        import autocastgen
        autocastgen.load_policy({str(policy)!r})
        model = make_model()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            autocastgen.attach(model).remove()
        out = {{"warnings": sorted(str(w.message) for w in caught)}}
        try:
            autocastgen.attach(model, strict=True)
        except ValueError as error:
            out["strict"] = str(error)
        autocastgen.clear_runtime_policies()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            autocastgen.attach(model).remove()
        out["after_clear"] = [str(w.message) for w in caught]
        # YAML text: its name (load_policy's name=, <string> by default), not the private file.
        for name in (None, "mine.yaml"):
            text = "autocast: {{device: cpu}}\\nmodules:\\n  lm_headd: fp32\\n"
            autocastgen.load_policy(text) if name is None else autocastgen.load_policy(text, name=name)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                autocastgen.attach(model).remove()
            out[f"text {{name}}"] = [str(w.message) for w in caught]
            autocastgen.clear_runtime_policies()
        print(json.dumps(out))
        """
    )
    out = last_json(result)
    assert len(out["warnings"]) == 2
    # Where: the policy's file:line:col as its diagnostics name the file.
    assert out["warnings"][0].startswith("autocastgen.attach: the entry's modules: pattern 'layers.*.atn' (")
    assert "typo.yaml:5:12) matches" in out["warnings"][0]
    assert "matches no module of the attached Sequential" in out["warnings"][0]
    assert out["warnings"][1].startswith("autocastgen.attach: the modules: section pattern 'lm_head' (")
    assert "typo.yaml:7:3) matches" in out["warnings"][1]
    assert out["strict"].startswith("autocastgen.attach: the ")
    assert out["after_clear"] == []
    assert len(out["text None"]) == 1 and "(<string>:3:3) matches no module" in out["text None"][0], out
    assert len(out["text mine.yaml"]) == 1 and "(mine.yaml:3:3) matches no module" in out["text mine.yaml"][0], out


def test_any_character_in_the_policy_name_reaches_attach_and_the_forward() -> None:
    # The name of YAML text is in every pattern's `where`, and the runtime hands attach() its
    # patterns as three lists, not fields joined by a tab (a name with a tab once raised "too many
    # values to unpack"). The issue's name, then every code point 1-255 in names of 16 (a load takes
    # about 0.1 s): the rules apply, and the warning for the pattern that matches nothing names the
    # policy as a terminal shows it. A line break is refused first (load_policy's names are one
    # line: diagnostics are file:line:col).
    text = PLACES_POLICY + "  lm_headd: fp32\n"
    result = run_child(
        f"""
        import autocastgen
        from autocastgen._core.terminal import shown
        model = make_model()
        x = (inputs() / 60000).to(torch.bfloat16).float()

        def run(name):
            autocastgen.load_policy({text!r}, name=name)
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    handle = autocastgen.attach(model)
                with handle, autocastgen.stats() as s, torch.autocast("cpu", dtype=torch.bfloat16):
                    y = model(x)
                patterns = autocastgen.places.registered_patterns()
            finally:
                autocastgen.clear_runtime_policies()
            return rows(s.table), str(y.dtype), [str(w.message) for w in caught], patterns

        plain = run("plain.yaml")
        out = {{"plain": plain[:3], "wrong": []}}
        try:
            run("my\\npolicy.yaml")
        except ValueError as error:
            out["line_break"] = str(error)
        codes = [code for code in range(1, 256) if code != 10]
        for name in ["my\\tpolicy.yaml"] + ["my" + "".join(map(chr, codes[i:i + 16])) + "policy.yaml"
                                           for i in range(0, len(codes), 16)]:
            got = run(name)
            expected = (plain[0], plain[1], [m.replace("plain.yaml", shown(name)) for m in plain[2]],
                        [(p, w.replace("plain.yaml", name), k) for p, w, k in plain[3]])
            if got != expected:
                out["wrong"].append([name, repr(got)[:2000]])
        print(json.dumps(out))
        """
    )
    out = last_json(result)
    assert out["wrong"] == []
    rows, dtype, warned = out["plain"]
    assert rows == EXPECTED_RAN_IN and dtype == "torch.float32"
    assert len(warned) == 1 and "pattern 'lm_headd' (plain.yaml:" in warned[0], warned
    assert out["line_break"].startswith("autocastgen.load_policy: name must be a one-line, non-empty str")


def test_attached_rules_under_torch_compile_equal_eager_and_retrace_when_rules_change() -> None:
    # fullgraph: the hooks inline; aot_eager bit for bit, Inductor within tolerance; the statistics
    # of the compiled calls keep their modules; dropping the rules traces again (the guard).
    result = run_child(
        f"""
        import autocastgen
        autocastgen.load_policy({PLACES_POLICY!r})
        model = make_model()
        x = (inputs() / 60000).to(torch.bfloat16).float()
        handle = autocastgen.attach(model)

        def step(x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return model(x)

        eager = step(x)
        out = {{"eager": str(eager.dtype)}}
        for backend in ("aot_eager", "inductor"):
            torch._dynamo.reset()
            compiled = torch.compile(step, backend=backend, fullgraph=True)
            with autocastgen.stats() as s:
                got = compiled(x)
            out[backend] = {{"dtype": str(got.dtype), "rows": rows(s.table),
                             "equal": exact(got, eager),
                             "close": torch.allclose(got, eager, rtol=1e-2, atol=1e-2)}}
        autocastgen.clear_runtime_policies()
        again = compiled(x)  # the same compiled function: the module rules changed
        out["after_clear"] = {{"dtype": str(again.dtype), "close": torch.allclose(again, step(x), rtol=1e-2, atol=1e-2)}}
        handle.remove()
        print(json.dumps(out))
        """
    )
    out = last_json(result)
    assert out["eager"] == "torch.float32"
    assert out["aot_eager"] == {"dtype": "torch.float32", "rows": EXPECTED_RAN_IN, "equal": True, "close": True}
    assert out["inductor"]["dtype"] == "torch.float32" and out["inductor"]["close"]
    assert out["inductor"]["rows"] == EXPECTED_RAN_IN
    # Without the rules the generated library is gone too (cleared runtime policies give PyTorch's
    # kernel back): every linear in bfloat16 again, retraced.
    assert out["after_clear"] == {"dtype": "torch.bfloat16", "close": True}


def test_register_runtime_policy_takes_modules() -> None:
    result = run_child(
        """
        import autocastgen
        autocastgen.register_runtime_policy("aten::mm", "fp32", "cpu", modules=["*.attn"])
        x = torch.randn(4, 4)
        out = {}
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out["outside"] = str(torch.mm(x, x).dtype)  # no entry applies: untouched
            with autocastgen.ModuleScope("layers.0.attn"):
                out["inside"] = str(torch.mm(x.bfloat16(), x.bfloat16()).dtype)
        try:
            autocastgen.register_runtime_policy("aten::mm", "fp32", "cpu", modules=[""])
        except autocastgen.PolicyError as error:
            out["empty"] = str(error)
        print(json.dumps(out))
        """
    )
    out = last_json(result)
    assert out["outside"] == "torch.float32" and out["inside"] == "torch.float32"
    assert "an empty module pattern matches no module" in out["empty"]
