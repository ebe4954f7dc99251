"""The pip tests' wheel and venvs, shared by every test file of tests/pip (Note [the wheel as users
install it] in pipvenv.py): one wheel per run, one venv per release it holds, each test run in each."""

from __future__ import annotations

from pathlib import Path

import pytest
from pipvenv import build_wheel, make_venv, wheel_releases

RELEASES, OUTSIDE = wheel_releases()


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The wheel of scripts/wheel for RELEASES."""
    return build_wheel(RELEASES, tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="session", params=RELEASES, ids=[f"torch{r}" for r in RELEASES])
def venv(request, wheel, tmp_path_factory) -> dict[str, Path]:
    """A fresh venv with torch alone and the wheel installed, for each release the wheel holds."""
    return make_venv(tmp_path_factory.mktemp(f"pip-{request.param}"), wheel, request.param)


@pytest.fixture(scope="session")
def outside_venv(wheel, tmp_path_factory) -> dict[str, Path]:
    """The same for a release the wheel does not hold."""
    return make_venv(tmp_path_factory.mktemp(f"pip-{OUTSIDE}"), wheel, OUTSIDE, no_deps=True)
