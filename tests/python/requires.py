"""Python packages a test needs beyond PyTorch: imported, or the test skipped where nothing promised
them; an error where the environment promises them.

What promises a package:
- scripts/setup installs scripts/requirements.txt (onnx, onnxscript, onnxruntime, ...) into the
  machine's Python, beside the pinned PyTorch: promised under ctest (AUTOCASTGEN_BUILD_DIR set, as
  for the build's files in built_tree.py) when the test runs with the pinned PyTorch. The builds
  against other releases (scripts/torch-releases venv: torch, expecttest, pyyaml, pytest) skip.
- scripts/models-venv installs scripts/requirements-models.txt (transformers) into a venv over the
  machine's Python, and scripts/test builds and tests the default preset with that venv's python:
  promised under ctest when the test runs in that venv (its stamp, .requirements-models.txt, is in
  sys.prefix). Other interpreters skip (README: the real-model tests run with that python).

A promised package that is missing is an error naming what installs it; anywhere else, and run by
hand, the test (or its module, at module level) is skipped with the reason. A package that is
present but fails to import is an error everywhere.

The same for what the pinned PyTorch promises (`supported`, and `supported_mark` for one test):
autocastgen.export (autocastgen._export.supported(), VERIFIED_FROM in bake.py), or a feature a test
probes for (float16 CPU autocast), is an error under ctest with the pinned PyTorch when it says no,
and a skip only with another release's, where it is truly unsupported.
"""
from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "scripts" / "requirements.txt"
MODELS_REQUIREMENTS = ROOT / "scripts" / "requirements-models.txt"
# What scripts/models-venv writes into its venv once the install succeeded.
MODELS_STAMP = ".requirements-models.txt"


class MissingPackage(RuntimeError):
    """A package the environment promises is not installed."""


class Unsupported(RuntimeError):
    """What the pinned PyTorch promises says it is not supported."""


def _pins(path: Path) -> dict[str, str]:
    """name -> version of a requirements file's `name==version` lines."""
    pins = {}
    for line in path.read_text().splitlines():
        spec = line.split("#", 1)[0].strip()
        if "==" in spec:
            name, version = (part.strip() for part in spec.split("==", 1))
            pins[name.lower()] = version
    return pins


def why_not_promised(distribution: str) -> str | None:
    """None where the environment promises `distribution` (a name in scripts/requirements.txt or
    scripts/requirements-models.txt), else why it does not."""
    if "AUTOCASTGEN_BUILD_DIR" not in os.environ:
        return "run by hand (under ctest it is an error)"
    name = distribution.lower()
    if name in _pins(REQUIREMENTS):
        other = _other_torch()
        if other is not None:
            return (f"{other}, beside which scripts/setup installs scripts/requirements.txt (the other releases' "
                    "venvs have torch, expecttest, pyyaml and pytest)")
        return None
    if name in _pins(MODELS_REQUIREMENTS):
        if not (Path(sys.prefix) / MODELS_STAMP).is_file():
            return (f"{sys.executable} is not the python of scripts/models-venv, which scripts/test's default build "
                    "tests with (or configure with -DAUTOCASTGEN_PYTHON=$(scripts/models-venv))")
        return None
    raise ValueError(f"{distribution} is in neither {REQUIREMENTS.name} nor {MODELS_REQUIREMENTS.name}: "
                     "pin it in one of them (scripts/setup installs both)")


def _other_torch() -> str | None:
    """None when this is the pinned PyTorch, else a sentence saying it is not."""
    import torch

    pinned = _pins(REQUIREMENTS)["torch"]
    running = torch.__version__.split("+", 1)[0]
    return None if running == pinned else f"PyTorch {running} is not the pinned {pinned}"


def supported(why_not: str | None) -> None:
    """A feature autocastgen promises with the pinned PyTorch, by its own check's answer (`why_not`:
    None where this PyTorch has it; autocastgen._export.supported() for autocastgen.export). A
    refusal is an error under ctest with the pinned PyTorch (a VERIFIED_FROM moved past the pin
    would otherwise skip every suite of the feature green); with another release, or run by hand,
    the test (or its module, at module level) is skipped with it."""
    if why_not is None:
        return
    if "AUTOCASTGEN_BUILD_DIR" in os.environ and _other_torch() is None:
        raise Unsupported(f"the pinned PyTorch {_pins(REQUIREMENTS)['torch']} must support it, but: {why_not}")
    pytest.skip(why_not, allow_module_level=True)


def supported_mark(why_not: str | None) -> pytest.MarkDecorator:
    """`supported` for one test, as its mark: a refusal is an error (raised where the mark is made,
    so the module fails) under ctest with the pinned PyTorch, else the test is skipped with it."""
    if why_not is not None and "AUTOCASTGEN_BUILD_DIR" in os.environ and _other_torch() is None:
        raise Unsupported(f"the pinned PyTorch {_pins(REQUIREMENTS)['torch']} must support it, but: {why_not}")
    return pytest.mark.skipif(why_not is not None, reason=str(why_not))


def _what_installs(distribution: str) -> str:
    name = distribution.lower()
    if name in _pins(REQUIREMENTS):
        return (f"scripts/setup installs it ({name}=={_pins(REQUIREMENTS)[name]}, scripts/requirements.txt) "
                f"into the machine's Python, beside the pinned PyTorch (this is {sys.executable})")
    return (f"run scripts/models-venv, which installs it ({name}=={_pins(MODELS_REQUIREMENTS)[name]}, "
            f"scripts/requirements-models.txt) into the venv of {sys.executable}")


def module(name: str, distribution: str | None = None) -> ModuleType:
    """The module `name` (of the pinned package `distribution`, by default its first dotted part).
    Missing: a MissingPackage error where the environment promises it, else pytest.skip (the
    whole module when called at module level)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        top = name.split(".", 1)[0]
        if error.name is None or error.name.split(".", 1)[0] != top:
            raise  # the package is there and something it imports is not: a broken install
        distribution = distribution or top
        reason = why_not_promised(distribution)
        if reason is None:
            raise MissingPackage(f"{name} is not installed: {_what_installs(distribution)}") from None
        pytest.skip(f"{name} is not installed: {reason}", allow_module_level=True)
