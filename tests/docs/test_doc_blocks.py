r"""Every ```python, ```sh and ```console block of README.md and docs/*.md, run as written.

Note [doc blocks run as written]
One pytest case per block, named `FILE:LINE` (the line of the opening fence). What a block needs
besides its text is said by markers: HTML comments `<!-- doc-test: MARKER -->` on the lines right
before its fence (one marker per comment, several comments allowed). The markers:

  skip (REASON)              not run; REASON is required (a CUDA GPU, a network download, a build
                             or an install, minutes of CPU: with the time).
  file NAME                  the block is a file: written to NAME in the doc's working folder when
                             the folder is made, and run by a later block of the same doc, which
                             must name it.
  continues the block above  a fragment: runs after the doc's previous python block (and what that
                             one continues), in the same process.
  given CODE                 setup the prose describes but the block does not show (a model the
                             text defines, a file "copied beside the script"): python code for a
                             python block, shell for a console/sh block, run first and not
                             compared. May span lines.
  in the repo root           runs in the repository root instead of the doc's working folder (for
                             blocks that read repo-relative paths; such a block must write nothing).

A block without `skip` must run: a python block exits 0; an sh block runs as one `bash -e` script
and exits 0; a console block's lines starting with `$ ` are commands (a line ending in `\`
continues on the next), each run by bash, and the lines up to the next command are its output:
where it shows output, stdout and stderr together must match it (its exit status is not checked:
the output says it), where it shows none it must exit 0.

Where they run: each doc has one working folder, emptied when a session first uses it and shared
by its blocks in document order (so a console block sees the files an earlier one wrote), at a
fixed path per build tree, $TMPDIR/autocastgen-doc-blocks-UID-HASH/DOC, locked by the session (the
key of compile_policy's cache holds the policy file's path: a fixed path lets later runs load what
the first compiled). It holds a link `build` to the build tree, so `build/bin/autocastgen`,
`PYTHONPATH=build/python` and `build/lib/...` work there. Python blocks are forked from one parent
that has imported torch (tests/python/child_process.py), with <build>/python first on sys.path and
AUTOCASTGEN_RUNTIME_TORCH_LIB set to the build's runtime. Commands find `autocastgen` (the built
CLI) and `python3`/`python` (the interpreter running this test) first on PATH, and
`import autocastgen` works as if pip had installed it (PYTHONPATH=<build>/python, which a command
may set again); AUTOCASTGEN_STATS/RECORD/FINITE/POLICY are cleared for them; output is unbuffered.

Output comparison, after these normalisations only: trailing blanks of each line and trailing
empty lines are dropped; `...` in a shown line matches any text in the line, and a shown line that
is only `...` any number of lines (so trimmed rows and machine-specific path prefixes such as
`.../torch/nn/modules/linear.py` read as written); a number followed by ` s` (a time, in seconds)
matches any number; the line number of a C++ warning's source (`(Triggered internally at
../runtime/torch/insight/watch.cpp:180.)`, which moves with every edit of that file) is not
compared; printed lines of compile_policy's progress (`autocastgen: compiling policy '...` and
`autocastgen: compiled policy '...`, only when it compiles: a policy's first use) are dropped.

`compile_policy` caches under the default cache (`autocastgen.cache_dir()`): the first run
compiles the shipped CPU policy once, later runs load it."""
from __future__ import annotations

import difflib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
CLI = Path(os.environ.get("AUTOCASTGEN_CLI", BUILD / "bin" / "autocastgen")).resolve()
RUNTIME_LIB = BUILD / "lib" / "libautocastgen_runtime_torch.so"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LANGUAGES = ("python", "sh", "console")
PROCESS_SWITCHES = ("AUTOCASTGEN_STATS", "AUTOCASTGEN_RECORD", "AUTOCASTGEN_FINITE", "AUTOCASTGEN_POLICY")
TIMEOUT_S = 300

sys.path.insert(0, str(REPO / "tests" / "python"))
from child_process import run_child  # noqa: E402

FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)\s*$")
MARKER_START = "<!-- doc-test:"


@dataclass
class Block:
    doc: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    markers: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"

    def marker(self, kind: str) -> str | None:
        """The marker's argument ('' when it has none), or None when the block lacks it."""
        for m in self.markers:
            if m == kind or m.startswith(kind + " ") or m.startswith(kind + "\n"):
                return m[len(kind):].strip()
        return None


def parse_markers(lines: list[str], fence: int) -> tuple[list[str], int]:
    """The markers in the comments right above line index `fence`, top to bottom, and the index of
    the first line they take."""
    markers: list[str] = []
    end = fence - 1
    while end >= 0 and lines[end].rstrip().endswith("-->"):
        start = end
        while start >= 0 and not lines[start].lstrip().startswith(MARKER_START):
            start -= 1
        if start < 0:
            break
        text = "\n".join(lines[start:end + 1]).strip()
        text = text[text.index(MARKER_START) + len(MARKER_START):]
        text = text[:text.rindex("-->")]
        markers.insert(0, textwrap.dedent(text).strip("\n").strip(" "))
        end = start - 1
    return markers, end + 1


def extract(doc: Path) -> tuple[list[Block], list[str]]:
    """The doc's blocks of LANGUAGES, and the problems found (markers attached to nothing)."""
    lines = doc.read_text().split("\n")
    blocks, problems, used = [], [], set()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group("indent"), m.group("lang")
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        if lang in LANGUAGES:
            body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip() for ln in lines[i + 1:j]]
            markers, first = parse_markers(lines, i)
            used.update(range(first, i))
            blocks.append(Block(doc, i + 1, lang, "\n".join(body) + "\n", markers))
        i = j + 1
    for n, ln in enumerate(lines):
        if ln.lstrip().startswith(MARKER_START) and n not in used:
            problems.append(f"{doc.relative_to(REPO)}:{n + 1}: a doc-test marker not right above a python/sh/console block")
    return blocks, problems


ALL_BLOCKS: list[Block] = []
PROBLEMS: list[str] = []
for _doc in DOCS:
    _blocks, _problems = extract(_doc)
    ALL_BLOCKS += _blocks
    PROBLEMS += _problems


def check_markers(block: Block) -> None:
    known = ("skip", "file", "continues the block above", "given", "in the repo root")
    for m in block.markers:
        assert any(m == k or m.startswith(k + " ") or m.startswith(k + "\n") for k in known), \
            f"{block.name}: unknown doc-test marker {m!r} (Note [doc blocks run as written])"
    skip = block.marker("skip")
    if skip is not None:
        assert re.fullmatch(r"\(.+\)", skip, re.S), f"{block.name}: a skip marker needs a reason: skip (REASON)"
    if block.marker("file") is not None or block.marker("continues the block above") is not None:
        assert block.lang == "python", f"{block.name}: file and continues are for python blocks"


def test_markers_attached():
    assert not PROBLEMS, "\n".join(PROBLEMS)


# --- where blocks run ---

@pytest.fixture(scope="session")
def shims(tmp_path_factory) -> Path:
    """A folder put first on PATH: `autocastgen` is the built CLI, `python3`/`python` this test's
    interpreter."""
    folder = tmp_path_factory.mktemp("bin")
    for name, target in (("autocastgen", CLI), ("python3", Path(sys.executable)), ("python", Path(sys.executable))):
        (folder / name).write_text(f'#!/bin/sh\nexec "{target}" "$@"\n')
        (folder / name).chmod(0o755)
    return folder


_workdirs: dict[Path, Path] = {}


@pytest.fixture(scope="session")
def workroot() -> Path:
    """The folder of the docs' working folders: one fixed path per user and build tree, held
    locked by this session (a second session waits), since compile_policy's cache key holds the
    policy file's path."""
    build_id = hashlib.sha256(str(BUILD).encode()).hexdigest()[:12]
    root = Path(tempfile.gettempdir()) / f"autocastgen-doc-blocks-{os.getuid()}-{build_id}"
    root.mkdir(exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield root


@pytest.fixture
def workdir(workroot, request) -> Path:
    """The working folder of the block's doc (see the Note): emptied on its first use in a session,
    with the doc's `file` blocks written into it."""
    block: Block = request.node.callspec.params["block"]
    folder = _workdirs.get(block.doc)
    if folder is None:
        folder = _workdirs[block.doc] = workroot / block.doc.stem
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        (folder / "build").symlink_to(BUILD)
        for b in ALL_BLOCKS:
            name = b.marker("file") if b.doc == block.doc else None
            if name:
                (folder / name).write_text(b.text)
    return folder


def command_env(shims: Path) -> dict[str, str]:
    env = dict(os.environ)
    for name in PROCESS_SWITCHES:
        env.pop(name, None)
    env["PATH"] = f"{shims}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BUILD / "python"), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env["AUTOCASTGEN_RUNTIME_TORCH_LIB"] = str(RUNTIME_LIB)
    env["REPO"] = str(REPO)
    return env


# --- output ---

def output_pattern(shown: list[str]) -> re.Pattern:
    """The regex a shown output stands for (the Note's normalisations)."""
    pattern = ""
    for line in shown:
        line = without_warning_lines(line.rstrip())
        if line == "...":
            pattern += r"(?:[^\n]*\n)*?"
            continue
        for part in re.split(r"(\.\.\.|\b\d+(?:\.\d+)? s\b)", line):
            if part == "...":
                pattern += r"[^\n]*?"
            elif re.fullmatch(r"\d+(?:\.\d+)? s", part):
                pattern += r"\d+(?:\.\d+)? s"
            else:
                pattern += re.escape(part)
        pattern += r"\n"
    return re.compile(pattern)


# compile_policy's progress lines, printed only when it compiles (the first use of a policy).
COMPILE_PROGRESS = re.compile(r"^autocastgen: compil(ing|ed) policy '")
# The source line a C++ warning names (TORCH_WARN's "Triggered internally at FILE:LINE."), which
# moves with every edit of FILE; FILE is relative to the build directory when ccache rewrote the
# compiler's paths (CCACHE_BASEDIR, as scripts/test sets it), else absolute: shown as `../<path>`.
WARNING_SOURCE_LINE = re.compile(r"\(Triggered internally at (?:[^\s()]*/)?((?:runtime|kernels)/[^\s():]+):\d+\.\)")


def without_warning_lines(text: str) -> str:
    return WARNING_SOURCE_LINE.sub(r"(Triggered internally at ../\1:N.)", text)


def normalised(text: str) -> str:
    lines = [without_warning_lines(ln.rstrip()) for ln in text.split("\n") if not COMPILE_PROGRESS.match(ln)]
    while lines and not lines[-1]:
        lines.pop()
    return "".join(ln + "\n" for ln in lines)


def output_differences(command: str, shown: list[str], actual: str) -> str | None:
    """None when `actual` is what the doc shows, else a diff."""
    while shown and not shown[-1].strip():
        shown = shown[:-1]
    actual = normalised(actual)
    if output_pattern(shown).fullmatch(actual):
        return None
    diff = "\n".join(difflib.unified_diff([s.rstrip() for s in shown], actual.split("\n")[:-1],
                                          "shown in the doc", "printed", lineterm=""))
    return f"the output of `{command}` differs from the doc:\n{diff}"


# --- running ---

def parse_console(text: str) -> list[tuple[str, list[str]]]:
    """(command, shown output lines) for each `$ ` line of a console block."""
    commands: list[tuple[str, list[str]]] = []
    lines = text.rstrip("\n").split("\n")
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            assert commands, f"a console block must start with a `$ ` command: {lines[i]!r}"
            commands[-1][1].append(lines[i])
            i += 1
            continue
        command = lines[i][2:]
        while command.endswith("\\") and i + 1 < len(lines):
            i += 1
            command += "\n" + lines[i]
        commands.append((command, []))
        i += 1
    return commands


def bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT_S)


def chain(block: Block) -> list[Block]:
    """The block and those it continues, first to last."""
    blocks = [block]
    while blocks[0].marker("continues the block above") is not None:
        before = [b for b in ALL_BLOCKS if b.doc == block.doc and b.lang == "python" and b.line < blocks[0].line]
        assert before, f"{blocks[0].name}: continues a block, but no python block is above it"
        blocks.insert(0, before[-1])
    return blocks


def run_python(block: Block, cwd: Path) -> None:
    parts = []
    for b in chain(block):
        given = b.marker("given")
        if given:
            parts.append(given + "\n")
        parts.append(b.text)
    prelude = f"import os; os.chdir({str(cwd)!r})\n"
    result = run_child(BUILD, prelude, "".join(parts), env={"AUTOCASTGEN_RUNTIME_TORCH_LIB": str(RUNTIME_LIB)},
                       check=False)
    assert result.returncode == 0, f"{block.name}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"


def run_console(block: Block, cwd: Path, env: dict[str, str]) -> None:
    given = block.marker("given")
    if given:
        result = bash("set -e\n" + given, cwd, env)
        assert result.returncode == 0, f"{block.name}: its `given` setup failed:\n{result.stdout}"
    failures = []
    for command, shown in parse_console(block.text):
        result = bash(command, cwd, env)
        if any(s.strip() for s in shown):
            failure = output_differences(command, shown, result.stdout)
        else:
            failure = None if result.returncode == 0 else f"`{command}` exit {result.returncode}:\n{result.stdout}"
        if failure:
            failures.append(failure)
    if failures:
        pytest.fail(f"{block.name}: " + "\n".join(failures), pytrace=False)


def run_sh(block: Block, cwd: Path, env: dict[str, str]) -> None:
    script = "set -e\n" + (block.marker("given") or "") + "\n" + block.text
    result = bash(script, cwd, env)
    assert result.returncode == 0, f"{block.name}: exit {result.returncode}:\n{result.stdout}"


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=[b.name for b in ALL_BLOCKS])
def test_block(block: Block, workdir: Path, shims: Path):
    check_markers(block)
    skip = block.marker("skip")
    if skip is not None:
        pytest.skip(skip[1:-1])
    if not CLI.is_file() or not RUNTIME_LIB.is_file():
        pytest.fail(f"the build tree {BUILD} lacks the CLI or the runtime library")
    name = block.marker("file")
    if name is not None:
        stem = Path(name).stem
        later = [b for b in ALL_BLOCKS if b.doc == block.doc and b.line > block.line
                 and b.marker("skip") is None and (name in b.text or f"import {stem}" in b.text
                                                    or f"from {stem} import" in b.text
                                                    or name in (b.marker("given") or ""))]
        assert later, f"{block.name}: `file {name}`, but no later block of {block.doc.name} that runs names it"
        compile(block.text, name, "exec")
        return
    cwd = REPO if block.marker("in the repo root") is not None else workdir
    if block.lang == "python":
        run_python(block, cwd)
    elif block.lang == "console":
        run_console(block, cwd, command_env(shims))
    else:
        run_sh(block, cwd, command_env(shims))
