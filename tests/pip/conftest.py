"""The pip tests' wheel and venvs, shared by every test file of tests/pip (Note [the wheel as users
install it] in pipvenv.py): one wheel per run, one venv per release it holds, each test run in each."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from pipvenv import TIMES, build_wheel, make_venv, other_python, torch_alone_venv, wheel_releases

RELEASES, OUTSIDE = wheel_releases()
OTHER_PYTHON = other_python(RELEASES[1])


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The wheel of scripts/wheel for RELEASES."""
    return build_wheel(RELEASES, tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="session", params=RELEASES, ids=[f"torch{r}" for r in RELEASES])
def venv(request, wheel, tmp_path_factory) -> dict[str, Path]:
    """A fresh venv with torch alone and the wheel installed, for each release the wheel holds."""
    return make_venv(tmp_path_factory.mktemp(f"pip-{request.param}"), wheel, request.param)


@pytest.fixture(scope="session")
def other_python_venv(wheel, tmp_path_factory) -> dict[str, Path]:
    """The same for the wheel's second release under a second CPython (pipvenv.OTHER_PYTHONS)."""
    return make_venv(tmp_path_factory.mktemp(f"pip-py{OTHER_PYTHON}"), wheel, RELEASES[1], python=OTHER_PYTHON)


@pytest.fixture(scope="session")
def outside_venv(wheel, tmp_path_factory) -> dict[str, Path]:
    """The same for a release the wheel does not hold."""
    return make_venv(tmp_path_factory.mktemp(f"pip-{OUTSIDE}"), wheel, OUTSIDE, no_deps=True)


@pytest.fixture(scope="session")
def outside_torch_alone(tmp_path_factory) -> dict[str, object]:
    """A venv of that release with torch alone and no wheel yet: where pip judges the wheel's
    Requires-Dist (an installed wheel of the same version would make pip judge nothing)."""
    root = tmp_path_factory.mktemp(f"bare-{OUTSIDE}")
    made = torch_alone_venv(root, OUTSIDE)
    (root / "outside").mkdir()
    return {**made, "work": root / "outside"}


_STARTED = time.monotonic()


def pytest_terminal_summary(terminalreporter) -> None:
    """Where the pip test's time went, printed and written to $AUTOCASTGEN_PIP_TIMES (scripts/test prints it)."""
    lines = [f"{seconds:7.0f} s  {what}" for what, seconds in TIMES]
    lines.append(f"{time.monotonic() - _STARTED:7.0f} s  the pip test in all")
    for line in lines:
        terminalreporter.write_line(f"pip test: {line}")
    if os.environ.get("AUTOCASTGEN_PIP_TIMES"):
        Path(os.environ["AUTOCASTGEN_PIP_TIMES"]).write_text("".join(f"{line}\n" for line in lines))
