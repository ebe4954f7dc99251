"""Precision rules in the CLI's outputs: `check --format json`, the manifest `generate` writes (read
back by `audit diff`), and diffs that change only an entry's dtypes, condition or argument casts.

Run by ctest with AUTOCASTGEN_CLI set; the schemas are the installed PyTorch's (the CLI's default).
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
POLICY = REPO / "examples" / "recipes" / "precision_rules.yaml"
CLI = os.environ.get("AUTOCASTGEN_CLI", str(REPO / "build" / "bin" / "autocastgen"))


def cli(*args, ok=True):
    done = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)
    if ok:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def entries_of(resolved, op):
    return [e for e in resolved["entries"] if e["op"] == op]


def test_check_json_shows_every_rule():
    resolved = json.loads(cli("check", "--policy", POLICY, "--format", "json").stdout)
    pow_entries = entries_of(resolved, "pow.Tensor_Scalar")
    assert [(e["policy"], e.get("dtypes"), e.get("when"), e.get("unless")) for e in pow_entries] == [
        ("lower_precision_fp", None, {"exponent": [1, 2]}, None),
        ("fp32", ["float16"], None, {"exponent": [1, 2]}),
    ]
    assert entries_of(resolved, "mse_loss")[1]["unless"] == {"reduction": "none"}
    assert entries_of(resolved, "norm.ScalarOpt_dim")[0]["unless"] == {"p": ".inf"}
    (batch_norm,) = entries_of(resolved, "batch_norm")
    assert batch_norm["args"] == {"weight": "fp32", "bias": "fp32", "running_mean": "keep", "running_var": "keep"}
    assert "dtypes" not in entries_of(resolved, "linear")[0]  # plain entries stay plain


def test_manifest_reads_back_with_no_changes(tmp_path):
    cli("generate", "--policy", POLICY, "--out", tmp_path, "--name", "rules")
    manifest = tmp_path / "autocast_rules.manifest.json"
    ops = json.loads(manifest.read_text())["ops"]
    assert [o["op"] for o in ops].count("layer_norm") == 2
    diff = json.loads(cli("audit", "diff", POLICY, manifest, "--format", "json").stdout)
    assert (diff["added"], diff["removed"], diff["changed"]) == ([], [], [])


def edited(tmp_path, old, new):
    text = POLICY.read_text()
    assert old in text
    path = tmp_path / "edited.yaml"
    path.write_text(text.replace(old, new))
    return path


@pytest.mark.parametrize(
    "old, new, op, what",
    [
        ("{op: layer_norm, dtypes: [float16]}", "{op: layer_norm, dtypes: [float16], args: {bias: keep}}", "layer_norm", "args"),
        ("{op: norm.ScalarOpt_dim, unless: {p: .inf}}", "{op: norm.ScalarOpt_dim, unless: {p: [.inf, 1]}}", "norm.ScalarOpt_dim",
         "condition"),
        ("running_mean: keep, running_var: keep", "running_mean: fp32, running_var: keep", "batch_norm", "args"),
        ("- conv2d", "- {op: conv2d, dtypes: [bfloat16]}", "conv2d", "dtypes"),
    ],
)
def test_diff_reports_a_rule_change_as_a_change(tmp_path, old, new, op, what):
    diff = json.loads(cli("audit", "diff", POLICY, edited(tmp_path, old, new), "--format", "json").stdout)
    assert (diff["added"], diff["removed"]) == ([], [])
    assert [(c["op"], c["what"]) for c in diff["changed"]] == [(op, what)]
    assert "entries" in diff["changed"][0]


def test_diff_markdown_shows_the_rules(tmp_path):
    changed = edited(tmp_path, "{op: mse_loss, unless: {reduction: none}}", "{op: mse_loss, unless: {reduction: [none, mean]}}")
    text = cli("audit", "diff", POLICY, changed).stdout
    assert "| `mse_loss` | lower_precision_fp {when: {reduction: none}}; fp32 {unless: {reduction: none}} | " \
           "lower_precision_fp {when: {reduction: none}}; fp32 {unless: {reduction: [none, mean]}} | condition |" in text
