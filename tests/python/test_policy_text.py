"""User text the Python side reads or prints itself: a policy's `extends:` line (Note [reading
extends: without a parser] in python/autocastgen/_extends.py) against PyYAML's reading of the same
text, bounded on hostile lines (the regular expression it replaced took 45 s on 60,000 spaces);
`load_policy`'s YAML text with a relative `extends:`, and a policy in a folder whose name is not
UTF-8; names escaped for a terminal (Note [names on
a terminal] in _terminal.py).

Bounds are checked as limits, not timings: the hostile lines are read in a fresh interpreter with
10 CPU seconds and 200 MB of address space (child_process.run_bounded); past them it is killed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from child_process import run_bounded  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", ROOT / "build"))
if not (BUILD / "python" / "autocastgen" / "_extends.py").is_file():
    pytest.skip(f"{BUILD} has no python/autocastgen (build the autocastgen_python target)", allow_module_level=True)

# Each as YAML reads it: the parser must agree (PyYAML is the reference, the C++ reader the authority).
AGREED = [
    "extends: base.yaml\n",
    "extends:   base.yaml   # the CPU one\nlists: {}\n",
    "autocast: {device: cpu}\nextends: ../up/base.yaml\n",
    'extends: "a \\"q\\" \\\\ b\\x41\\u00e9\\U0001F600\\t.yaml"\n',
    "extends: 'it''s here.yaml' # a comment\n",
    "extends: a#b.yaml\n",
    "extends: with spaces inside.yaml\n",
    "extends: base.yaml\r\nlists: {}\r\n",
    'extends: "\\x2e./\\/x.yaml"\n',
    "extends: /abs/olute.yaml\n",
]
# Not one-line values the linear reader takes: it says None, and the C++ reader decides.
REFUSED = [
    "extends:\n",
    "extends:\n  base.yaml\n",
    "extends: [a.yaml]\n",
    "extends: {a: b}\n",
    'extends: "not closed\n',
    "extends: 'not closed\n",
    'extends: "a" trailing\n',
    'extends: "bad \\q escape"\n',
    "extends: &anchor base.yaml\n",
    "extends: - a\n",
    "extends:base.yaml\n",
    "  extends: nested.yaml\n",
    "lists: {}\n",
]


def find_extends(text: str):
    sys.path.insert(0, str(BUILD / "python"))
    from autocastgen._extends import find_extends as find

    return find(text)


@pytest.mark.parametrize("text", AGREED)
def test_extends_as_yaml_reads_it(text):
    found = find_extends(text)
    assert found is not None and found.value == yaml.safe_load(text)["extends"]
    # The span is the value's text: replacing it with a JSON string gives a policy whose extends: is that.
    rewritten = text[:found.start] + json.dumps("/x/y z.yaml") + text[found.end:]
    assert yaml.safe_load(rewritten) == {**yaml.safe_load(text), "extends": "/x/y z.yaml"}


@pytest.mark.parametrize("text", REFUSED)
def test_extends_that_is_not_a_one_line_value(text):
    assert find_extends(text) is None


def test_hostile_extends_lines_are_read_in_bounded_time_and_memory():
    code = """
        import json
        from autocastgen._extends import find_extends
        lines = [
            "extends:" + " " * 60000 + "x",
            "extends: a" + " " * 60000 + "b #",
            "extends: a" + " \\t" * 100000 + "#",
            'extends: "' + "\\\\\\\\" * 200000,
            'extends: "' + "\\\\x" * 200000,
            "extends: '" + "''" * 200000,
            "extends: " + "#" * 1000000,
            ("extends: x\\n" * 200000),
            "lists:\\n" + "  - " + "extends" * 200000 + "\\n",
        ]
        found = [find_extends(line) for line in lines]
        print(json.dumps([None if f is None else len(f.value) for f in found]))
        """
    done = run_bounded(BUILD, code, memory_mb=200, cpu_s=10)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == [1, 60002, 1, None, None, None, None, 1, None]


def test_load_policy_text_with_a_relative_extends(tmp_path, monkeypatch):
    sys.path.insert(0, str(BUILD / "python"))
    import autocastgen
    from autocastgen.policy import _absolute_extends

    folder = tmp_path / "it's \"odd\" \\ here"
    folder.mkdir()
    (folder / "base.yaml").write_text("autocast: {device: cpu}\nlists:\n  fp32: [mm]\n")
    monkeypatch.chdir(folder)
    text = "extends:    'base.yaml'   # relative to the current folder\nlists:\n  lower_precision_fp: [addmm]\n"
    rewritten = _absolute_extends(text)
    assert yaml.safe_load(rewritten)["extends"] == str(folder / "base.yaml")
    assert rewritten.endswith("   # relative to the current folder\nlists:\n  lower_precision_fp: [addmm]\n")
    try:
        assert autocastgen.load_policy(text) == 2
    finally:
        autocastgen.clear_runtime_policies()
    # A 60,000-space extends: line is the runtime's located error, at once.
    with pytest.raises(autocastgen.PolicyError) as error:
        autocastgen.load_policy("extends:" + " " * 60000 + "\n", name="spaces.yaml")
    assert str(error.value).startswith("spaces.yaml:1:"), str(error.value)[:300]


def test_load_policy_from_a_folder_whose_name_is_not_utf8(tmp_path):
    # The runtime's op takes text: the folder is reached through a link, extends: still resolves in it.
    sys.path.insert(0, str(BUILD / "python"))
    import autocastgen

    folder = os.fsencode(tmp_path) + b"/odd \xff 'folder'"
    os.makedirs(folder)
    with open(folder + b"/base.yaml", "w") as f:
        f.write("autocast: {device: cpu}\nlists:\n  fp32: [mm]\n")
    with open(folder + b"/good.yaml", "w") as f:
        f.write("extends: base.yaml\nlists:\n  lower_precision_fp: [addmm]\n")
    with open(folder + b"/bad.yaml", "w") as f:
        f.write("extends: base.yaml\nlists:\n  fp32: [no_such_op]\n")
    try:
        assert autocastgen.load_policy(os.fsdecode(folder + b"/good.yaml")) == 2
    finally:
        autocastgen.clear_runtime_policies()
    with pytest.raises(autocastgen.PolicyError) as error:
        autocastgen.load_policy(Path(os.fsdecode(folder + b"/bad.yaml")))
    assert str(error.value).startswith(f"{tmp_path}/odd \\xff 'folder'/bad.yaml:3:10: error: unknown op 'no_such_op'")
    with pytest.raises(autocastgen.PolicyError, match=r"its file name is not UTF-8"):
        autocastgen.load_policy(os.fsdecode(folder + b"/\xfe.yaml"))


SHOWN = [
    ("model.layers.0", "model.layers.0"),
    ("tab\there", "tab\\x09here"),
    ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
    ("line\nbreak\r", "line\\x0abreak\\x0d"),
    ("rtl\u202eevil", "rtl\\u202eevil"),
    ("sep\u2028arator", "sep\\u2028arator"),
    ("del\x7f c1\x85", "del\\x7f c1\\x85"),
    ("not utf-8 " + os.fsdecode(b"\xff\xfe"), "not utf-8 \\xff\\xfe"),
    ("back\\slash 'quote' é 日本", "back\\slash 'quote' é 日本"),
]


@pytest.mark.parametrize("name, want", SHOWN)
def test_names_are_escaped_for_a_terminal(name, want):
    sys.path.insert(0, str(BUILD / "python"))
    from autocastgen._terminal import shown

    assert shown(name) == want
