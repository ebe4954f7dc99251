"""The pip tests' one venv, shared by every test file of tests/pip (one pip install per run)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pipvenv import make_venv


@pytest.fixture(scope="session")
def venv(tmp_path_factory) -> dict[str, Path]:
    """A venv that sees the machine's torch, with autocastgen pip-installed from the clone."""
    return make_venv(tmp_path_factory.mktemp("pip"))
