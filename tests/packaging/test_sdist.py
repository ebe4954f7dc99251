"""The sdist and the metadata PyPI would show (docs/python.md, "From source (sdist)"): what the sdist
holds, that CMake configures from it as scikit-build-core would with every file the build reads in it,
that `twine check` passes on it and on a wheel's METADATA from scripts/wheel, and that the two agree.

A full `pip install` of the sdist compiles everything (minutes): it is not run here; docs/python.md
has its time, measured by hand."""

from __future__ import annotations

import email.parser
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from trove_classifiers import classifiers as KNOWN_CLASSIFIERS

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]
NAME = f"{PROJECT['name']}-{PROJECT['version']}"

# The top of the sdist: what the lean build (pyproject.toml's [tool.scikit-build]) reads, and nothing else.
TOP = {"PKG-INFO", "pyproject.toml", "README.md", "CMakeLists.txt", "cmake", "core", "codegen", "runtime", "kernels",
       "python", "templates", "schemas", "scripts"}
# Files and folders the build cannot do without (a folder: it holds files).
NEEDED = ["CMakeLists.txt", "README.md", "pyproject.toml", "cmake/AutocastgenInstall.cmake",
          "cmake/autocastgenConfig.cmake.in", "core/CMakeLists.txt", "codegen/CMakeLists.txt", "runtime/include/",
          "kernels/CMakeLists.txt", "python/CMakeLists.txt", "python/autocastgen/__init__.py", "python/src/",
          "templates/torch/", "schemas/policies/cpu.yaml", "schemas/torch_op_history.txt", "scripts/torch-releases"]


def run(args: list[str | Path], **kwargs) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in args], text=True, capture_output=True, **kwargs)
    if done.returncode != 0:
        pytest.fail(f"{args} exited {done.returncode}\nstdout:\n{done.stdout[-6000:]}\nstderr:\n{done.stderr[-6000:]}")
    return done


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> Path:
    """`python3 -m build --sdist` of the clone (the backend of the machine's Python, which
    scripts/requirements.txt pins as pyproject.toml does: no download)."""
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", out, REPO])
    (found,) = out.glob("*.tar.gz")
    assert found.name == f"{NAME}.tar.gz"
    return found


@pytest.fixture(scope="module")
def unpacked(sdist, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(sdist) as tar:
        tar.extractall(folder, filter="data")
    return folder / NAME


def members(sdist: Path) -> list[str]:
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    assert all(n == NAME or n.startswith(f"{NAME}/") for n in names), names
    return [n[len(NAME) + 1:] for n in names if n != NAME]


def test_sdist_holds_what_the_build_needs_and_nothing_else(sdist):
    files = members(sdist)
    tops = {f.split("/", 1)[0] for f in files}
    assert tops == TOP, f"the sdist's top differs: extra {sorted(tops - TOP)}, missing {sorted(TOP - tops)}"
    for needed in NEEDED:
        assert any(f == needed or (needed.endswith("/") and f.startswith(needed)) for f in files), needed
    assert [f for f in files if f.startswith("scripts/")] == ["scripts/torch-releases"]
    junk = [f for f in files if "__pycache__" in f or f.endswith(".pyc") or "/." in f or f.startswith(".")]
    assert not junk, junk
    # A license file, once the project has one, must travel with it (pyproject.toml's sdist.exclude).
    for license_file in sorted(REPO.glob("LICEN[CS]E*")) + sorted(REPO.glob("COPYING*")):
        assert license_file.name in files, f"{license_file.name} is in the clone but not in the sdist"
    # Every file of the package's Python the clone tracks is in it.
    tracked = run(["git", "ls-files", "python", "schemas", "templates"], cwd=REPO).stdout.split()
    missing = sorted(set(tracked) - set(files))
    assert not missing, f"tracked files left out of the sdist: {missing}"


def test_twine_check_sdist(sdist):
    done = run([sys.executable, "-m", "twine", "check", "--strict", sdist])
    assert "PASSED" in done.stdout, done.stdout


def test_sdist_configures_with_every_input_present(unpacked, tmp_path):
    """CMake configures from the unpacked sdist with pyproject.toml's settings, as scikit-build-core
    would (a file CMake's lists name but the sdist lacks fails here); then every file of the source
    tree that a build step reads (ninja's inputs: templates, the op history, the package's Python) is
    in it, which configuring alone does not check."""
    cmake = PYPROJECT["tool"]["scikit-build"]["cmake"]
    defines = {**cmake["define"], "CMAKE_BUILD_TYPE": cmake["build-type"], "SKBUILD": "2",
               "Python3_EXECUTABLE": sys.executable, "CMAKE_INSTALL_PREFIX": tmp_path / "prefix"}
    build = tmp_path / "build"
    env = {k: v for k, v in os.environ.items() if k not in ("AUTOCASTGEN_PYTHON", "CMAKE_PREFIX_PATH")}
    run(["cmake", "-S", unpacked, "-B", build, "-G", "Ninja", *(f"-D{k}={v}" for k, v in defines.items())], env=env)
    inputs = run(["ninja", "-C", build, "-t", "inputs", "all"]).stdout.split()
    source = [Path(i) if os.path.isabs(i) else (build / i).resolve() for i in inputs]
    source = [p for p in source if p.is_relative_to(unpacked)]
    assert any(p.name == "torch_op_history.txt" for p in source), "ninja's inputs no longer name the op history"
    absent = [str(p.relative_to(unpacked)) for p in source if not p.exists()]
    assert not absent, f"the build reads files the sdist lacks: {absent}"


def wheel_metadata(tmp_path: Path) -> Path:
    """A wheel of scripts/wheel's dist-info alone (write_dist_info, `wheel pack`), for two releases."""
    loader = importlib.machinery.SourceFileLoader("wheel_script", str(REPO / "scripts" / "wheel"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("wheel_script", loader))
    loader.exec_module(module)
    stage, out = tmp_path / "stage", tmp_path / "out"
    stage.mkdir()
    out.mkdir()
    assert module.write_dist_info(stage, ["2.4.1", "2.15.0"]) == NAME
    run([sys.executable, "-m", "wheel", "pack", stage, "-d", out])
    (wheel,) = out.glob("*.whl")
    return wheel


def test_twine_check_wheel_metadata(tmp_path):
    done = run([sys.executable, "-m", "twine", "check", "--strict", wheel_metadata(tmp_path)])
    assert "PASSED" in done.stdout, done.stdout


def headers(text: str) -> tuple[dict[str, list[str]], str]:
    message = email.parser.Parser().parsestr(text)
    fields: dict[str, list[str]] = {}
    for key, value in message.items():
        fields.setdefault(key, []).append(value)
    return fields, message.get_payload()


def test_wheel_metadata_is_the_sdists(unpacked, tmp_path):
    """scripts/wheel writes its METADATA itself; scikit-build-core writes the sdist's PKG-INFO. Both read
    pyproject.toml and must say the same, but torch's range, which the wheel's runtimes decide."""
    with zipfile.ZipFile(wheel_metadata(tmp_path)) as wheel:
        wheel_fields, wheel_text = headers(wheel.read(f"{NAME}.dist-info/METADATA").decode())
    sdist_fields, sdist_text = headers((unpacked / "PKG-INFO").read_text(encoding="utf-8"))
    assert wheel_text.strip() == sdist_text.strip() == (REPO / "README.md").read_text(encoding="utf-8").strip()
    wheel_requires = [Requirement(r) for r in wheel_fields.pop("Requires-Dist")]
    sdist_requires = [Requirement(r) for r in sdist_fields.pop("Requires-Dist")]
    assert [str(r) for r in wheel_requires if r.name == "torch"] == ["torch<2.16,>=2.4"]
    assert [str(r) for r in sdist_requires if r.name == "torch"] == ["torch"]
    assert sorted(map(str, (r for r in wheel_requires if r.name != "torch"))) == \
        sorted(map(str, (r for r in sdist_requires if r.name != "torch")))
    for fields in (wheel_fields, sdist_fields):
        fields.pop("Metadata-Version")
        fields.pop("Dynamic", None)
    assert wheel_fields == sdist_fields


def test_metadata_fields():
    """What PyPI shows besides the README: classifiers it knows, the Python versions requires-python
    allows, and the build backend's one pin, which scripts/requirements.txt repeats for --no-isolation."""
    unknown = [c for c in PROJECT["classifiers"] if c not in KNOWN_CLASSIFIERS]
    assert not unknown, f"classifiers PyPI does not know: {unknown}"
    floor = PROJECT["requires-python"].removeprefix(">=")
    versions = [c.rsplit(" :: ", 1)[1] for c in PROJECT["classifiers"] if c.startswith("Programming Language :: Python :: 3.")]
    assert versions[0] == floor and versions == [f"3.{n}" for n in range(10, 10 + len(versions))], versions
    backend = [r for r in PYPROJECT["build-system"]["requires"] if r.startswith("scikit-build-core")]
    pins = [line.split("#", 1)[0].strip() for line in (REPO / "scripts" / "requirements.txt").read_text().splitlines()]
    assert backend and backend[0] in pins, f"{backend} is not pinned alike in scripts/requirements.txt"
