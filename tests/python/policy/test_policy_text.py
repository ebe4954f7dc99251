"""User text the Python side hands on or prints itself: a policy's `extends:` read by the one reader
of policies, the C++ one (Note [the files a chain read] in core/policy/resolver.cpp), against
PyYAML's reading of the same text: through `load_policy`'s YAML text (the runtime's
load_runtime_policy_text, relative to the current directory) and through `autocastgen check
--files` (the CLI's, which compile_policy asks which files to hash); hostile `extends:` lines end
in located errors within bounds (a regular expression the Python side once used took 45 s on
60,000 spaces); a policy in a folder whose name is not UTF-8, as a file and as the current
directory of text; names escaped for a terminal (Note [names on a terminal] in _core/terminal.py).

Bounds are checked as limits, not timings: the CLI reads the hostile lines with 10 CPU seconds
and 200 MB of address space; past them it is killed.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest

import requires
from built_tree import require_built

yaml = requires.module("yaml", "pyyaml")

ROOT = Path(__file__).resolve().parents[3]
BUILD = Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", ROOT / "build"))
CLI = os.environ.get("AUTOCASTGEN_CLI") or str(BUILD / "bin" / "autocastgen")
require_built(BUILD, "python/autocastgen/policy/_load.py", CLI)  # an error under ctest where missing

BASE = "autocast: {device: cpu}\nlists:\n  fp32: [mm]\n"
# Every spelling of a top-level `extends:` (ABS: an absolute folder), and texts that are not one:
# what PyYAML reads decides what the reader must do: read the base it names, or give a located error.
SPELLINGS = [
    "extends: base.yaml\n",
    "extends:   base.yaml   # the CPU one\nlists: {}\n",
    "autocast: {device: cpu}\nextends: ../up/base.yaml\n",
    'extends: "a \\"q\\" \\\\ b\\x41\\u00e9\\U0001F600\\t.yaml"\n',
    "extends: 'it''s here.yaml' # a comment\n",
    "extends: a#b.yaml\n",
    "extends: with spaces inside.yaml\n",
    "extends: base.yaml\r\nlists: {}\r\n",
    'extends: "\\x2e./\\/x.yaml"\n',
    "extends: ABS/olute.yaml\n",
    # The Python side's reader took none of these; the C++ reader reads them as YAML does.
    "extends:\n  base.yaml\n",
    "extends: &anchor base.yaml\n",
    "extends: >-\n  base.yaml\n",
    "{extends: base.yaml, lists: {}}\n",
    "  extends: nested.yaml\n",
    # Not a base: each is a located error.
    "extends:\n",
    "extends: [a.yaml]\n",
    "extends: {a: b}\n",
    'extends: "not closed\n',
    "extends: 'not closed\n",
    'extends: "a" trailing\n',
    'extends: "bad \\q escape"\n',
    "extends: - a\n",
    "extends:base.yaml\n",
    "lists: {}\n",
]


def yaml_base(text: str):
    """The base PyYAML reads in ``text``: its path, "" for a mapping without ``extends:``, None for
    anything else (not YAML, not a mapping, not a path)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if isinstance(data, dict) and "extends" not in data:
        return ""
    value = data.get("extends") if isinstance(data, dict) else None
    return value if isinstance(value, str) and value else None


def chain_files(policy: Path) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, "check", "--policy", str(policy), "--files"], capture_output=True, timeout=60)


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_extends_is_read_as_yaml_reads_it(spelling, tmp_path, monkeypatch):
    import autocastgen

    folder = tmp_path / "in" / "here"
    folder.mkdir(parents=True)
    text = spelling.replace("ABS", str(tmp_path))
    base = yaml_base(text)
    if base:
        (folder / base).parent.mkdir(parents=True, exist_ok=True)
        (folder / base).write_text(BASE)
    # The CLI's reader: the policy, then the base YAML names, relative to the policy's folder.
    policy = folder / "policy.yaml"
    policy.write_text(text)
    done = chain_files(policy)
    if base is None:
        assert done.returncode == 1 and done.stdout == b""
        assert re.match(rf"{re.escape(str(policy))}:\d+:\d+: error: ", done.stderr.decode()), done.stderr
    else:
        assert done.returncode == 0, done.stderr
        read = [Path(os.fsdecode(p)).resolve() for p in done.stdout.split(b"\0")[:-1]]
        assert read == [policy, (folder / base).resolve()] if base else read == [policy]
    # The runtime's reader of text: the same base, relative to the current directory.
    monkeypatch.chdir(folder)
    try:
        if not base:  # no base: the text has no device either
            with pytest.raises(autocastgen.PolicyError) as error:
                autocastgen.load_policy(text)
            assert re.match(r"<string>:\d+:\d+: error: ", str(error.value)), str(error.value)
        else:
            assert autocastgen.load_policy(text) == 1
    finally:
        autocastgen.clear_runtime_policies()


# Hostile `extends:` lines, each with what the reader must say: the base PyYAML reads in it (a
# file that is not there), the file's own located error (None), or its refusal by size.
TOO_LARGE = "larger than 1 MiB, the limit for policy files"
HOSTILE = [
    ("extends:" + " " * 60000 + "x", "x"),
    ("extends: a" + " " * 60000 + "b #", "a" + " " * 60000 + "b"),
    ("extends: a" + " \t" * 100000 + "#", "a"),
    ('extends: "' + "\\\\" * 200000, None),
    ('extends: "' + "\\x" * 200000, None),
    ("extends: '" + "''" * 200000, None),
    ("extends: " + "#" * 1000000, None),
    ("extends: x\n" * 90000, None),  # 90,000 duplicate keys
    ("extends: x\n" * 200000, TOO_LARGE),
    ("lists:\n  - " + "extends" * 140000 + "\n", None),
]


def test_hostile_extends_lines_end_in_located_errors_in_bounded_time_and_memory(tmp_path):
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (200 << 20, 200 << 20))
        resource.setrlimit(resource.RLIMIT_CPU, (10, 15))

    for number, (text, expected) in enumerate(HOSTILE):
        policy = tmp_path / f"hostile{number}.yaml"
        policy.write_text(text)
        done = subprocess.run([CLI, "check", "--policy", str(policy), "--files"], capture_output=True, timeout=120,
                              preexec_fn=limit)
        stderr = done.stderr.decode("utf-8", "backslashreplace")
        assert done.returncode == 1 and done.stdout == b"", (number, stderr[-2000:])
        if expected == TOO_LARGE:
            assert stderr.startswith(f"autocastgen: error: cannot read policy '{policy}': {TOO_LARGE}\n"), stderr[:300]
            continue
        assert re.match(rf"{re.escape(str(policy))}:\d+:\d+: error: ", stderr), (number, stderr[:300])
        if expected is not None:
            assert f"cannot read extended policy '{tmp_path / expected}'" in stderr, (number, stderr[:300])


def test_load_policy_text_with_a_relative_extends(tmp_path, monkeypatch):
    import autocastgen

    folder = tmp_path / "it's \"odd\" \\ here"
    folder.mkdir()
    (folder / "base.yaml").write_text("autocast: {device: cpu}\nlists:\n  fp32: [mm]\n")
    (folder / "bad base.yaml").write_text("autocast: {device: cpu}\nlists:\n  fp32: [no_such_op]\n")
    monkeypatch.chdir(folder)
    text = "extends:    'base.yaml'   # relative to the current folder\nlists:\n  lower_precision_fp: [addmm]\n"
    try:
        assert autocastgen.load_policy(text) == 2
    finally:
        autocastgen.clear_runtime_policies()
    # An error in the base is located in the base, by its path; one in the text, in the text by its name.
    with pytest.raises(autocastgen.PolicyError) as error:
        autocastgen.load_policy("extends: bad base.yaml\nlists:\n  fp32: [exp]\n", name="mine.yaml")
    assert str(error.value).startswith(f"{folder}/bad base.yaml:3:10: error: unknown op 'no_such_op'"), str(error.value)
    assert error.value.source == "mine.yaml"
    with pytest.raises(autocastgen.PolicyError) as error:
        autocastgen.load_policy("extends: base.yaml\nlists:\n  fp32: [no_such_op]\n", name="mine.yaml")
    assert str(error.value).startswith("mine.yaml:3:10: error: unknown op 'no_such_op'"), str(error.value)
    # A 60,000-space extends: line is the runtime's located error, at once.
    with pytest.raises(autocastgen.PolicyError) as error:
        autocastgen.load_policy("extends:" + " " * 60000 + "\n", name="spaces.yaml")
    assert str(error.value).startswith("spaces.yaml:1:"), str(error.value)[:300]
    # A NUL byte (a YAML escape) would cut the path the system opens: an error, never another file.
    with pytest.raises(autocastgen.PolicyError) as error:
        autocastgen.load_policy('extends: "base.yaml\\0junk"\n')
    assert str(error.value).startswith("<string>:1:10: error: 'extends:' names a path holding a NUL byte"), str(error.value)


def test_load_policy_text_in_a_folder_whose_name_is_not_utf8(tmp_path, monkeypatch):
    # The runtime's op takes text: a relative extends: is read through a link to the folder, and
    # diagnostics name the folder as a terminal shows it. (The Python side's reader refused it.)
    import autocastgen

    folder = os.fsencode(tmp_path) + b"/odd \xff 'here'"
    os.makedirs(folder)
    with open(folder + b"/base.yaml", "w") as f:
        f.write("autocast: {device: cpu}\nlists:\n  fp32: [mm]\n")
    with open(folder + b"/bad.yaml", "w") as f:
        f.write("autocast: {device: cpu}\nlists:\n  fp32: [no_such_op]\n")
    monkeypatch.chdir(folder)
    try:
        assert autocastgen.load_policy("extends: base.yaml\nlists:\n  lower_precision_fp: [addmm]\n") == 2
    finally:
        autocastgen.clear_runtime_policies()
    with pytest.raises(autocastgen.PolicyError) as error:
        autocastgen.load_policy("extends: bad.yaml\n")
    assert str(error.value).startswith(f"{tmp_path}/odd \\xff 'here'/bad.yaml:3:10: error: unknown op 'no_such_op'"), \
        str(error.value)


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
    from autocastgen._core.terminal import shown

    assert shown(name) == want
