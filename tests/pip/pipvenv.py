"""Helpers of the pip tests: the clone, a clean environment, running commands in the venv."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
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


def backend_requirement() -> str:
    """The pinned build backend, read from pyproject.toml (its one place)."""
    with open(REPO / "pyproject.toml", "rb") as f:
        (requirement,) = tomllib.load(f)["build-system"]["requires"]
    return requirement


def make_venv(root: Path) -> dict[str, Path]:
    """A venv in ``root`` that sees the machine's torch, with autocastgen pip-installed from the clone."""
    env_dir = root / "venv"
    run([sys.executable, "-m", "venv", "--system-site-packages", env_dir], cwd=root)
    python = env_dir / "bin" / "python"
    # The build backend from PyPI (or pip's cache), as pinned; torch is the machine's (no isolation).
    run([python, "-m", "pip", "install", "-q", backend_requirement()], cwd=root)
    # The compilers and warning flags of the build that runs the test (tests/pip/CMakeLists.txt), so
    # that ccache shares objects with it.
    build_env = clean_env(CMAKE_ARGS=os.environ.get("AUTOCASTGEN_PIP_CMAKE_ARGS", ""))
    install = run([python, "-m", "pip", "install", "-v", "--no-build-isolation", REPO], cwd=root, timeout=3600,
                  env=build_env)
    (root / "pip-install.log").write_text(install.stdout + install.stderr)
    site = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"], cwd=root).stdout.strip()
    work = root / "outside"  # every command of the tests runs here, outside the clone
    work.mkdir()
    return {"python": python, "script": env_dir / "bin" / "autocastgen", "package": Path(site) / "autocastgen",
            "work": work}
