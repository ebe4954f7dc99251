"""Helpers of the pip tests: the clone, the wheel, fresh venvs with torch alone, running commands in them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Variables the build-tree tests set that would point the installed package back at the build tree.
LEAKY = ("AUTOCASTGEN_RUNTIME_TORCH_LIB", "AUTOCASTGEN_CLI", "AUTOCASTGEN_BUILD_DIR", "AUTOCASTGEN_PYTHON",
         "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without LEAKY, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in LEAKY}
    env.update(extra)
    return env


def run(args, cwd, check=True, env=None, **kwargs) -> subprocess.CompletedProcess:
    """Runs ``args`` in ``cwd`` with a clean environment; fails the test on a non-zero exit if ``check``."""
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env or clean_env(), text=True, capture_output=True,
                          **kwargs)
    if check and done.returncode != 0:
        pytest.fail(f"{args} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}")
    return done


# Note [the wheel as users install it]
# The pip tests install the wheel scripts/wheel builds, as a user does: into a fresh venv whose only
# packages are torch and what torch requires (linked from an environment that has that torch: the
# machine's Python for the pinned release, scripts/torch-releases' venvs for the others), so
# PyYAML, pytest, the build backend and everything else the machine has are absent; with
# `pip install --no-index` (the wheel needs nothing but torch); and run with PATH holding the venv's
# bin/ alone, so no compiler, CMake or ninja is found. What needs a compiler (compile_policy, a C++
# backend's build) is run with the machine's PATH, as its users have one. The wheel holds the
# pinned release and one other release of the wheel's (2.4 on), taken in turn by the rotation index
# (tests/python/rotation.py, test_command_parts), so each release's runtime is loaded by its own
# torch from PyPI within a bounded number of landings; a venv of a third release checks the
# ImportError for a release outside the wheel; and a venv of a second CPython (OTHER_PYTHONS) loads
# the second release's runtime and autocastgen._C under it.

PINNED = next(line.split("==")[1].strip() for line in (REPO / "scripts" / "requirements.txt").read_text().splitlines()
              if line.startswith("torch=="))


def torch_releases(*args: str) -> str:
    return subprocess.run([sys.executable, REPO / "scripts" / "torch-releases", *args], check=True,
                          capture_output=True, text=True).stdout.strip()


def wheel_releases() -> tuple[list[str], str]:
    """The releases the wheel under test holds (the pinned one first) and one it does not hold:
    scripts/test's choice for its rotation index ($AUTOCASTGEN_PIP_RELEASES: the second and the
    outside one), or, run by hand, the choice for $AUTOCASTGEN_ROTATION_INDEX (default 0)."""
    chosen = os.environ.get("AUTOCASTGEN_PIP_RELEASES", "").split()
    if not chosen:
        sys.path.insert(0, str(REPO / "tests" / "python"))
        from rotation import MAX_STEP, test_command_parts

        listed = torch_releases("list").split()
        candidates = [v for v in torch_releases("list", "--headers").split() if v != PINNED]
        candidates.insert(0, listed[listed.index(candidates[0]) - 1])  # the one before, outside any wheel
        index = int(os.environ.get("AUTOCASTGEN_ROTATION_INDEX", "0"))
        # The pip test's turns are the sanitizers' (an even block): the nearest at or before the index.
        at = index - index % (2 * MAX_STEP)
        chosen = test_command_parts(at, [], [], candidates)["pip"]
    second, outside = chosen
    return [PINNED, second], outside


def python_with(release: str, python: str | None = None) -> Path:
    """An interpreter whose environment has torch ``release``: this one for the pinned release, else a
    venv of scripts/torch-releases (torch from PyPI, made once); ``python`` (3.N): a venv of that
    CPython (Note [a venv of another CPython] in scripts/torch-releases)."""
    if python is not None:
        return Path(torch_releases("venv", release, "--python", python))
    if release == PINNED:
        return Path(sys.executable)
    return Path(torch_releases("venv", release))


# The second CPython the pip test installs the wheel under, beside this one (3.11): the wheel's
# second release's runtime and autocastgen._C, one build for every CPython (Note [one _C for every
# CPython] in python/src/torch_variable.h), the CPython taken in turn with that release, so the floor
# of requires-python (3.10) and the CPythons on either side of the builder's are each loaded within
# three pip turns; each release 2.4-2.14 has PyPI wheels for the one it is given (2.4 none for 3.13,
# 2.15 none for 3.10). This machine's pyenv has them.
OTHER_PYTHONS = ("3.10", "3.12", "3.13")


def other_python(second_release: str) -> str:
    return OTHER_PYTHONS[int(second_release.split(".")[1]) % len(OTHER_PYTHONS)]


# Where the pip test's time goes: (what, seconds), in order; conftest.py writes them to
# $AUTOCASTGEN_PIP_TIMES, whose lines scripts/test prints with its phases.
TIMES: list[tuple[str, float]] = []


def build_wheel(releases: list[str], out: Path) -> Path:
    """scripts/wheel for ``releases``, or $AUTOCASTGEN_WHEEL when a run gives one already built."""
    given = os.environ.get("AUTOCASTGEN_WHEEL")
    if given:
        return Path(given)
    started = time.monotonic()
    # Each CUDA part for its oldest and newest GPU alone: every architecture-dependent path compiles,
    # and the part loads as a release wheel's does, in a third of the time.
    done = run([sys.executable, REPO / "scripts" / "wheel", "--torch", ",".join(releases), "--cuda-ends-only",
                "--out", out], cwd=REPO, timeout=3600)
    TIMES.append((f"scripts/wheel --torch {','.join(releases)}", time.monotonic() - started))
    (out / "wheel.log").write_text(done.stderr)
    return Path(done.stdout.strip().splitlines()[-1])


TORCH_CLOSURE = """
import importlib.metadata as md, json
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name
found, done, todo = {}, set(), [("torch", frozenset())]
while todo:  # each distribution with the extras asked of it (torch asks cuda-toolkit for some)
    name, extras = todo.pop()
    name = canonicalize_name(name)
    if (name, extras) in done:
        continue
    done.add((name, extras))
    try:
        dist = found.get(name) or md.distribution(name)
    except md.PackageNotFoundError:
        continue
    found[name] = dist
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in {"", *extras}):
            todo.append((req.name, frozenset(req.extras)))
tops = {str(d.locate_file(f.parts[0])) for d in found.values() for f in (d.files or [])
        if f.parts[0] not in ("..", "__pycache__")}
print(json.dumps({"dists": sorted(found), "paths": sorted(tops)}))
"""


def torch_alone_venv(root: Path, release: str, python: str | None = None) -> dict[str, object]:
    """A fresh venv holding torch ``release`` and what it requires, nothing else (Note [the wheel as
    users install it]); of CPython ``python`` (3.N) where given, else of this one."""
    having_torch = python_with(release, python)
    closure = json.loads(run([having_torch, "-c", TORCH_CLOSURE], cwd=root).stdout)
    assert "pyyaml" not in closure["dists"], closure["dists"]
    packages = root / "torch-alone"
    packages.mkdir()
    for path in map(Path, closure["paths"]):
        if path.exists():
            (packages / path.name).symlink_to(path)
    env_dir = root / "venv"
    run([having_torch, "-m", "venv", env_dir], cwd=root)  # venv makes it of that venv's base interpreter
    python = env_dir / "bin" / "python"
    site = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=root).stdout.strip()
    (Path(site) / "torch-alone.pth").write_text(f"{packages}\n")
    # venv's own setuptools (Python 3.11's venv installs one) would hide the one torch requires where
    # torch requires one (2.15 does; 2.4 does not, and a venv's is what its cpp_extension then uses).
    if "setuptools" in closure["dists"]:
        run([python, "-m", "pip", "uninstall", "-q", "-y", "setuptools"], cwd=root,
            env=clean_env(PATH=str(python.parent)))
    return {"python": python, "site": Path(site), "dists": closure["dists"]}


def user_env(venv: dict[str, Path]) -> dict[str, str]:
    """The environment of a user with the wheel and no build tools: PATH is the venv's bin/ alone."""
    return clean_env(PATH=str(venv["python"].parent))


def make_venv(root: Path, wheel: Path, release: str, no_deps: bool = False,
              python: str | None = None) -> dict[str, Path]:
    """A torch-alone venv of ``release`` with the wheel pip-installed (no index, no build tools);
    ``no_deps``: installed whatever its Requires-Dist says of this torch, as after a user's later
    ``pip install torch==...`` (pip says the requirement is not met, and goes on); ``python``: of
    that CPython (3.N) instead of this one."""
    started = time.monotonic()
    made = torch_alone_venv(root, release, python)
    of_python = f" for CPython {python}" if python else ""
    TIMES.append((f"a venv of torch {release}{of_python} alone (from PyPI, once: scripts/torch-releases venv)",
                  time.monotonic() - started))
    python = made["python"]
    started = time.monotonic()
    install = run([python, "-m", "pip", "install", "--no-index", "--disable-pip-version-check",
                   *(["--no-deps"] if no_deps else []), wheel], cwd=root, env=clean_env(PATH=str(python.parent)))
    seconds = time.monotonic() - started
    (root / "pip-install.log").write_text(f"{seconds:.1f} s\n" + install.stdout + install.stderr)
    print(f"pip install of {wheel.name} into a torch {release}{of_python} venv: {seconds:.1f} s")
    TIMES.append((f"pip install of the wheel beside torch {release}{of_python}", seconds))
    work = root / "outside"  # every command of the tests runs here, outside the clone
    work.mkdir()
    return {"python": python, "script": python.parent / "autocastgen", "package": made["site"] / "autocastgen",
            "work": work, "release": release, "install_seconds": seconds}
