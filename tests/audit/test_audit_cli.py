#!/usr/bin/env python3
"""`autocastgen audit` end to end on the mini schema fixture: coverage formats, diff shapes, exit
statuses (0, 2 with --fail-on, 1 on errors), manifests as inputs, --schemas given twice,
--extra-schemas, compiler arguments after `--`, --torch-version through the release cache, and
precision by place (entries' `modules:` and the `modules:` section) through check, manifests,
diff and coverage."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MINI = "tests/data/schemas/mini_native_functions.yaml"
CLI = ""


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], cwd=cwd, capture_output=True, text=True)


class AuditCli(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)

    def tearDown(self) -> None:
        self.tmp.cleanup()

    def write(self, name: str, text: str) -> str:
        path = self.dir / name
        path.write_text(text)
        return str(path)

    def test_coverage_md_and_json_agree(self) -> None:
        policy = self.write("p.yaml", "autocast: {device: cpu}\nlists:\n  lower_precision_fp: [mm, addmm]\n"
                                      "  fp32: [log]\n  promote: [cat]\n")
        md = run("audit", "coverage", "--policy", policy, "--schemas", MINI)
        js = run("audit", "coverage", "--policy", policy, "--schemas", MINI, "--format", "json")
        self.assertEqual(md.returncode, 0, md.stderr)
        self.assertEqual(js.returncode, 0, js.stderr)
        report = json.loads(js.stdout)
        self.assertEqual(report["counts"]["lower_precision_fp"], 2)
        self.assertEqual(report["counts"]["total"], 4)
        self.assertEqual([o["op"] for o in report["ops"]], ["mm", "addmm", "log", "cat"])
        self.assertEqual(report["ops"][0]["source"], "p.yaml:3:24")  # outside the working directory: the file name only
        listed = {o["op"] for o in report["ops"]}
        uncovered = [op for fam in report["not_covered"] for op in fam["ops"]]
        self.assertFalse(listed & {o["op"] for o in uncovered if "listed" not in o})
        self.assertIn("exp", {o["op"] for o in uncovered})
        self.assertEqual(report["eligible"]["listed"], 4)
        self.assertEqual(report["eligible"]["overloads"], report["eligible"]["listed"] + report["eligible"]["not_listed"])
        self.assertIn(f"4 of {report['eligible']['overloads']} eligible overloads are listed", md.stdout)
        for family in report["not_covered"]:
            self.assertIn(f"### {family['title']} ", md.stdout)

    def test_diff_json_shape_order_and_fail_on(self) -> None:
        a = self.write("a.yaml", "autocast: {device: cuda}\nlists:\n  lower_precision_fp: [mm, conv1d]\n"
                                 "  fp32: [log, exp]\n")
        b = self.write("b.yaml", "autocast: {device: cuda}\nlists:\n  lower_precision_fp: [mm, addmm]\n"
                                 "  fp32: [exp, conv1d, relu]\n")
        out = run("audit", "diff", a, b, "--schemas", MINI, "--format", "json")
        self.assertEqual(out.returncode, 0, out.stderr)
        d = json.loads(out.stdout)
        self.assertEqual(d["added"], [{"op": "addmm", "policy": "lower_precision_fp"}, {"op": "relu", "policy": "fp32"}])
        self.assertEqual(d["removed"], [{"op": "log", "policy": "fp32"}])
        self.assertEqual([(c["op"], c["from"], c["to"]) for c in d["changed"]], [("conv1d", "lower_precision_fp", "fp32")])
        # The same run twice gives the same bytes (stable order).
        self.assertEqual(run("audit", "diff", a, b, "--schemas", MINI, "--format", "json").stdout, out.stdout)
        self.assertEqual(run("audit", "diff", a, b, "--schemas", MINI, "--fail-on", "added,changed").returncode, 2)
        self.assertEqual(run("audit", "diff", a, b, "--schemas", MINI, "--fail-on", "removed").returncode, 2)
        self.assertEqual(run("audit", "diff", a, a, "--schemas", MINI, "--fail-on", "added,removed,changed").returncode, 0)
        md = run("audit", "diff", a, b, "--schemas", MINI)
        self.assertIn("2 added, 1 removed, 1 changed.", md.stdout)
        self.assertIn("| `conv1d` | lower_precision_fp | fp32 | policy |", md.stdout)
        self.assertNotEqual(run("audit", "diff", a, b, "--schemas", MINI, "--fail-on", "everything").returncode, 0)

    def test_manifest_against_its_policy(self) -> None:
        text = (ROOT / "tests/data/policies/mini_all_policies.yaml").read_text().replace(", mybackend::fused_linear", "")
        policy = self.write("mini.yaml", text)
        gen = run("generate", "--policy", policy, "--schemas", MINI, "--out", str(self.dir), "--name", "mini")
        self.assertEqual(gen.returncode, 0, gen.stderr)
        manifest = self.dir / "autocast_mini.manifest.json"
        same = run("audit", "diff", policy, str(manifest), "--schemas", MINI, "--fail-on", "added,removed,changed")
        self.assertEqual(same.returncode, 0, same.stdout + same.stderr)
        self.assertIn("0 added, 0 removed, 0 changed.", same.stdout)
        # Edit the manifest: one policy changes, one op goes, one op from a newer PyTorch appears.
        m = json.loads(manifest.read_text())
        m["ops"] = [o for o in m["ops"] if o["op"] != "log"]
        for o in m["ops"]:
            if o["op"] == "mm":
                o["policy"] = "fp32"
        m["ops"].append({"op": "gelu", "policy": "fp32"})
        edited = self.write("edited.json", json.dumps(m, indent=1))
        out = run("audit", "diff", policy, edited, "--schemas", MINI, "--format", "json")
        self.assertEqual(out.returncode, 0, out.stderr)
        d = json.loads(out.stdout)
        self.assertEqual(d["added"], [{"op": "gelu", "policy": "fp32"}])
        self.assertEqual(d["removed"], [{"op": "log", "policy": "fp32"}])
        self.assertEqual([(c["op"], c["from"], c["to"]) for c in d["changed"]], [("mm", "lower_precision_fp", "fp32")])
        self.assertIn("warning: 'gelu' is not in the op schemas", out.stderr)

    def test_schemas_twice(self) -> None:
        v2 = self.write("v2.yaml", "- func: mm(Tensor self, Tensor mat2) -> Tensor\n"
                                   "- func: gelu(Tensor self) -> Tensor\n- func: log(Tensor self) -> Tensor\n")
        a = self.write("a.yaml", "autocast: {device: cpu}\nlists:\n  fp32: [log, exp]\n")
        b = self.write("b2.yaml", "autocast: {device: cpu}\nlists:\n  fp32: [log, gelu]\n")
        out = run("audit", "diff", a, b, "--schemas", MINI, "--schemas", v2, "--format", "json")
        self.assertEqual(out.returncode, 0, out.stderr)
        d = json.loads(out.stdout)
        self.assertEqual(d["added"], [{"op": "gelu", "policy": "fp32", "schemas": "not in A's op schemas"}])
        self.assertEqual(d["removed"], [{"op": "exp", "policy": "fp32", "schemas": "not in B's op schemas"}])
        # With one schema file for both, B does not resolve (gelu is unknown): an error, status 1.
        bad = run("audit", "diff", a, b, "--schemas", MINI)
        self.assertEqual(bad.returncode, 1)
        self.assertIn("b2.yaml:3:15: error: unknown op 'gelu'", bad.stderr)
        self.assertEqual(run("audit", "diff", a, b, "--schemas", MINI, "--schemas", v2, "--schemas", v2).returncode, 1)

    def test_extra_schemas_apply_to_both_sides(self) -> None:
        # A policy imported with a backend's own schema file diffs against one without its ops.
        custom = "tests/data/schemas/custom_ops.yaml"
        base = self.write("base.yaml", "autocast: {device: privateuseone}\nlists:\n  lower_precision_fp: [mm]\n")
        own = self.write("own.yaml", "autocast: {device: privateuseone}\nlists:\n"
                                     "  lower_precision_fp: [mm, mybackend::fused_linear]\n")
        out = run("audit", "diff", base, own, "--schemas", MINI, "--extra-schemas", custom, "--format", "json")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(json.loads(out.stdout)["added"], [{"op": "mybackend::fused_linear", "policy": "lower_precision_fp"}])
        # Twice --schemas (A's, then B's) with one --extra-schemas: the extra file is on both sides.
        out = run("audit", "diff", own, own, "--schemas", MINI, "--schemas", MINI, "--extra-schemas", custom,
                  "--fail-on", "added,removed,changed")
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        cov = run("audit", "coverage", "--policy", own, "--schemas", MINI, "--extra-schemas", custom, "--format", "json")
        self.assertEqual(cov.returncode, 0, cov.stderr)
        self.assertEqual(json.loads(cov.stdout)["counts"]["total"], 2)
        # Without it, the backend's op is unknown, located.
        bad = run("audit", "diff", base, own, "--schemas", MINI)
        self.assertEqual(bad.returncode, 1)
        self.assertIn("own.yaml:3:28: error: unknown op 'mybackend::fused_linear'", bad.stderr)

    def test_compiler_arguments_after_double_dash(self) -> None:
        a = self.write("a.yaml", "autocast: {device: cpu}\nlists:\n  fp32: [log]\n")
        # A third input is not a compiler argument: it must follow `--`.
        extra = run("audit", "diff", a, a, a, "--schemas", MINI)
        self.assertEqual(extra.returncode, 105, extra.stderr)
        self.assertIn("compiler arguments for C++ inputs go after `--`", extra.stderr)
        # After `--` they are taken; with no C++ input, a warning says they do nothing.
        for verb in (["audit", "diff", a, a], ["audit", "coverage", "--policy", a]):
            out = run(*verb, "--schemas", MINI, "--", "-DMY_BACKEND", "-I", "/opt/sdk/include")
            self.assertEqual(out.returncode, 0, f"{verb}: {out.stderr}")
            self.assertIn("warning: compiler arguments after `--` are given, but no input is C++", out.stderr)

    def test_coverage_reads_manifests(self) -> None:
        policy = self.write("p.yaml", "autocast: {device: cpu}\nlists:\n  lower_precision_fp: [mm]\n  fp32: [log]\n")
        gen = run("generate", "--policy", policy, "--schemas", MINI, "--out", str(self.dir), "--name", "p")
        self.assertEqual(gen.returncode, 0, gen.stderr)
        from_policy = json.loads(run("audit", "coverage", "--policy", policy, "--schemas", MINI, "--format", "json").stdout)
        out = run("audit", "coverage", "--policy", str(self.dir / "autocast_p.manifest.json"), "--schemas", MINI, "--format", "json")
        self.assertEqual(out.returncode, 0, out.stderr)
        from_manifest = json.loads(out.stdout)
        self.assertEqual(from_manifest["counts"], from_policy["counts"])
        self.assertEqual(from_manifest["not_covered"], from_policy["not_covered"])

    def test_torch_version_reads_the_release_cache(self) -> None:
        # A cache folder as scripts/torch-releases makes it (AUTOCASTGEN_TORCH_CACHE points at it).
        cache = self.dir / "cache"
        release = cache / "2.7.1"
        (release / "torchgen" / "packaged" / "ATen" / "native").mkdir(parents=True)
        (release / "include").mkdir()
        (release / "version.txt").write_text("2.7.1\n")
        (release / "torchgen" / "packaged" / "ATen" / "native" / "native_functions.yaml").write_text((ROOT / MINI).read_text())
        env = {**os.environ, "AUTOCASTGEN_TORCH_CACHE": str(cache)}
        policy = self.write("p.yaml", "autocast: {device: cpu}\nlists:\n  fp32: [log]\n")

        def cli(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([CLI, *args], cwd=ROOT, capture_output=True, text=True, env=env)

        out = cli("audit", "coverage", "--policy", policy, "--torch-version", "2.7", "--format", "json")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(json.loads(out.stdout)["counts"]["total"], 1)
        diff = cli("audit", "diff", policy, policy, "--torch-version", "2.7", "--fail-on", "added,removed,changed")
        self.assertEqual(diff.returncode, 0, diff.stdout + diff.stderr)
        check = cli("check", "--policy", policy, "--torch-version", "2.7.1")
        self.assertEqual(check.returncode, 0, check.stderr)
        self.assertIn("ok for PyTorch 2.7.1:", check.stdout)
        # A release the cache lacks: the error names the command that fetches it.
        missing = cli("audit", "coverage", "--policy", policy, "--torch-version", "2.5")
        self.assertEqual(missing.returncode, 1)
        self.assertIn(f"autocastgen: error: --torch-version 2.5: PyTorch 2.5 is not in the release cache ({cache}): fetch it "
                      "once with 'scripts/torch-releases fetch 2.5'", missing.stderr)

    def test_options_before_and_after_positionals(self) -> None:
        # Every option takes one value per occurrence, so positionals may follow options.
        a = self.write("a.yaml", "autocast: {device: cpu}\nlists:\n  fp32: [log]\n")
        b = self.write("b.yaml", "autocast: {device: cpu}\nlists:\n  fp32: [log, exp]\n")
        spellings = [
            ["audit", "diff", "--schemas", MINI, a, b, "--format", "json"],
            ["audit", "diff", "--format", "json", "--schemas", MINI, "--schemas", MINI, "--torch-version", "2.15", a, b],
            ["audit", "diff", "--fail-on", "removed", "--schemas", MINI, a, b, "--format", "json"],
            ["audit", "diff", a, "--schemas", MINI, b, "--format", "json"],
        ]
        for args in spellings:
            out = run(*args)
            self.assertEqual(out.returncode, 0, f"{args}: {out.stderr}")
            self.assertEqual(json.loads(out.stdout)["added"], [{"op": "exp", "policy": "fp32"}], args)
        for verb in (["check", "--policy", b], ["audit", "coverage", "--policy", b]):
            self.assertEqual(run(*verb[:1 + (verb[0] == "audit")], "--schemas", MINI, *verb[1 + (verb[0] == "audit"):]).returncode, 0, verb)
        schema = run("schema", "--schemas", MINI, "--torch-version", "2.15")
        self.assertEqual(schema.returncode, 0, schema.stderr)
        gen = run("generate", "--schemas", MINI, "--policy", b, "--out", str(self.dir / "out"), "--torch-version", "2.15")
        self.assertEqual(gen.returncode, 0, gen.stderr)

    def test_torch_version_errors(self) -> None:
        b = self.write("b.yaml", "autocast: {device: cpu}\nlists:\n  fp32: [log]\n")
        for version, message in [("2.x", "--torch-version '2.x' is not a release number"),
                                 ("3.0", "--torch-version 3.0: not a release autocastgen supports")]:
            out = run("check", "--policy", b, "--schemas", MINI, "--torch-version", version)
            self.assertEqual(out.returncode, 1)
            self.assertIn(message, out.stderr)
        # The release is read beside a schema file that lies in a torch package.
        native = self.dir / "site" / "torchgen" / "packaged" / "ATen" / "native" / "native_functions.yaml"
        native.parent.mkdir(parents=True)
        native.write_text((ROOT / MINI).read_text())
        (self.dir / "site" / "torch").mkdir()
        (self.dir / "site" / "torch" / "version.py").write_text("__version__ = '2.7.1+cpu'\ngit_version = 'x'\n")
        ok = run("check", "--policy", b, "--schemas", str(native))
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assertIn("ok for PyTorch 2.7.1:", ok.stdout)
        self.assertEqual(run("check", "--policy", b, "--schemas", str(native), "--torch-version", "2.7").returncode, 0)
        bad = run("check", "--policy", b, "--schemas", str(native), "--torch-version", "2.8")
        self.assertEqual(bad.returncode, 1)
        self.assertIn("--torch-version 2.8 does not match the schemas", bad.stderr)
        self.assertIn("belongs to PyTorch 2.7.1 (read from", bad.stderr)
        other = self.dir / "cache" / "2.8.0" / "torchgen" / "custom.yaml"
        other.parent.mkdir(parents=True)
        other.write_text((ROOT / "tests/data/schemas/custom_ops.yaml").read_text())
        (self.dir / "cache" / "2.8.0" / "version.txt").write_text("2.8.0\n")
        mixed = run("check", "--policy", b, "--schemas", str(native), "--schemas", str(other))
        self.assertEqual(mixed.returncode, 1)
        self.assertIn("the schema files belong to different PyTorch releases", mixed.stderr)
        # Writes nothing when the release is refused.
        out_dir = self.dir / "never"
        gen = run("generate", "--policy", b, "--schemas", MINI, "--torch-version", "9.9", "--out", str(out_dir))
        self.assertEqual(gen.returncode, 1)
        self.assertFalse(out_dir.exists())

    # Note [precision by place]: tests/data/policies/mini_modules.yaml extends a base with a section.
    MODULES = "tests/data/policies/mini_modules.yaml"

    def test_check_shows_module_rules(self) -> None:
        text = run("check", "--policy", self.MODULES, "--schemas", MINI, "--torch-version", "2.15")
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("; 5 overloads (9 entries); 6 entries scoped to modules; modules: {lm_head: fp32, layers.0: fp32, "
                      "encoder.*: off, layers.2: float16, decoder.norm: fp32}\n", text.stdout)
        resolved = json.loads(run("check", "--policy", self.MODULES, "--schemas", MINI, "--torch-version", "2.15",
                                  "--format", "json").stdout)
        # The section in order, the derived file's patterns first.
        self.assertEqual(list(resolved["modules"].items()), [("lm_head", "fp32"), ("layers.0", "fp32"), ("encoder.*", "off"),
                                                             ("layers.2", "float16"), ("decoder.norm", "fp32")])
        softmax = [e for e in resolved["entries"] if e["op"] == "softmax.int"]
        # The scoped entry first though the base lists the plain one.
        self.assertEqual([(e["policy"], e.get("modules")) for e in softmax],
                         [("fp32", ["layers.*.attn"]), ("fp32_set_opt_dtype", None)])
        log = [e for e in resolved["entries"] if e["op"] == "log"]
        self.assertEqual([(e.get("dtypes"), e.get("modules")) for e in log], [(["float16"], ["*.attn", "lm_head"]), (["bfloat16"], ["encoder"])])
        # A policy without module rules says nothing of them.
        plain = self.write("p.yaml", "autocast: {device: cpu}\nlists: {fp32: [log]}\n")
        out = run("check", "--policy", plain, "--schemas", MINI)
        self.assertNotIn("modules", out.stdout)
        self.assertNotIn("modules", json.loads(run("check", "--policy", plain, "--schemas", MINI, "--format", "json").stdout))

    def test_manifest_carries_module_rules_and_reads_back(self) -> None:
        gen = run("generate", "--policy", self.MODULES, "--schemas", MINI, "--torch-version", "2.15", "--out", str(self.dir))
        self.assertEqual(gen.returncode, 0, gen.stderr)
        manifest = self.dir / "autocast_mini_modules.manifest.json"
        data = json.loads(manifest.read_text())
        self.assertEqual(list(data["modules"])[0], "lm_head")
        diff = run("audit", "diff", self.MODULES, str(manifest), "--schemas", MINI, "--torch-version", "2.15", "--format", "json",
                   "--fail-on", "added,removed,changed")
        self.assertEqual(diff.returncode, 0, diff.stdout + diff.stderr)
        self.assertEqual(json.loads(diff.stdout)["header"], [])
        # A manifest's section is checked as a policy's: a dtype outside lower_precision is an error.
        data["modules"]["layers.9"] = "float16"
        data["lower_precision"] = ["bfloat16"]
        bad = self.write("bad.manifest.json", json.dumps(data, indent=2))
        out = run("audit", "diff", self.MODULES, bad, "--schemas", MINI, "--torch-version", "2.15")
        self.assertEqual(out.returncode, 1)
        self.assertIn("error: 'layers.2: float16' names a dtype that is not a lower-precision dtype of this policy "
                      "('lower_precision: [bfloat16]')", out.stderr)
        # Scoped entries of an overload come before its other entries in a manifest too.
        data = json.loads(manifest.read_text())
        ops = data["ops"]
        first = next(i for i, o in enumerate(ops) if o["op"] == "softmax.int")
        ops[first], ops[first + 1] = ops[first + 1], ops[first]
        swapped = self.write("swapped.manifest.json", json.dumps(data, indent=2))
        out = run("audit", "diff", self.MODULES, swapped, "--schemas", MINI, "--torch-version", "2.15")
        self.assertEqual(out.returncode, 1)
        self.assertIn("error: 'softmax.int' is scoped to modules after an entry that is not; an overload's scoped entries come first",
                      out.stderr)

    def test_diff_and_coverage_show_module_rules(self) -> None:
        text = (ROOT / self.MODULES).read_text()
        base = (ROOT / "tests/data/policies/mini_modules_base.yaml").read_text()
        self.write("mini_modules_base.yaml", base)
        edited = self.write("mini_modules.yaml", text.replace('["layers.*.attn"]', '["layers.*.mlp"]')
                            .replace("  layers.2: float16", "  layers.2: bfloat16").replace("  layers.0: fp32", "  layers.1: off"))
        out = run("audit", "diff", self.MODULES, edited, "--schemas", MINI, "--torch-version", "2.15", "--format", "json")
        self.assertEqual(out.returncode, 0, out.stderr)
        diff = json.loads(out.stdout)
        self.assertEqual([(c["op"], c["what"]) for c in diff["changed"]], [("softmax.int", "modules")])
        self.assertEqual(diff["changed"][0]["entries"]["to"][0], {"policy": "fp32", "modules": ["layers.*.mlp"]})
        self.assertEqual(diff["header"], [{"field": "modules: layers.0", "from": "fp32", "to": "none"},
                                          {"field": "modules: layers.2", "from": "float16", "to": "bfloat16"},
                                          {"field": "modules: layers.1", "from": "none", "to": "off"}])
        md = run("audit", "diff", self.MODULES, edited, "--schemas", MINI, "--torch-version", "2.15").stdout
        self.assertIn("| `softmax.int` | fp32 {modules: [layers.*.attn]}; fp32_set_opt_dtype | "
                      "fp32 {modules: [layers.*.mlp]}; fp32_set_opt_dtype | modules |", md)
        # Only the order of the section changed: one row says so.
        reordered = self.write("mini_modules.yaml", text.replace("  lm_head: fp32\n  layers.0: fp32\n", "  layers.0: fp32\n  lm_head: fp32\n"))
        diff = json.loads(run("audit", "diff", self.MODULES, reordered, "--schemas", MINI, "--torch-version", "2.15",
                              "--format", "json").stdout)
        self.assertEqual([h["field"] for h in diff["header"]], ["modules (order)"])
        cov = run("audit", "coverage", "--policy", self.MODULES, "--schemas", MINI, "--torch-version", "2.15")
        self.assertIn("| `encoder.*` | off | tests/data/policies/mini_modules.yaml:18:4 |", cov.stdout)
        self.assertIn("| `softmax.int` | fp32 | `{modules: [layers.*.attn]}` |", cov.stdout)
        report = json.loads(run("audit", "coverage", "--policy", self.MODULES, "--schemas", MINI, "--torch-version", "2.15",
                                "--format", "json").stdout)
        self.assertEqual(report["modules"]["decoder.norm"], "fp32")
        self.assertEqual(report["ops"][0]["modules"], ["layers.*.attn"])


def main() -> int:
    global CLI
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--autocastgen", required=True)
    args, rest = parser.parse_known_args()
    CLI = os.path.abspath(args.autocastgen)
    result = unittest.main(argv=[sys.argv[0], *rest], exit=False, verbosity=2).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
