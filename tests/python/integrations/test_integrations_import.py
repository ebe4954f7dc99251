"""The integrations' packaging (docs/training.md, "Installing"): ``import autocastgen`` imports no
training framework; each integration module imports its own when imported, and a missing one is an
ImportError naming the extra to install; pyproject.toml's extras name the releases the tests pin
(scripts/requirements-models.txt) as their lower bounds.

Fresh interpreters: what a process has imported cannot be unimported.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import tomllib

import pytest

import requires
from built_tree import require_built

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
require_built(BUILD, "python/autocastgen/__init__.py")

FRAMEWORKS = ("transformers", "accelerate", "lightning", "pytorch_lightning", "lightning_fabric")


def run(code: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    environment["PYTHONPATH"] = str(BUILD / "python")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment,
                          timeout=300, cwd=REPO)


def test_import_autocastgen_imports_no_framework() -> None:
    done = run(f"""
import json, sys
import autocastgen, autocastgen.integrations
print(json.dumps([name for name in {FRAMEWORKS!r} if name in sys.modules]))
""")
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads(done.stdout.splitlines()[-1]) == []


@pytest.mark.parametrize(("module", "hides", "extra"), [
    ("autocastgen.integrations.lightning", "lightning", "lightning"),
    ("autocastgen.integrations.transformers", "transformers", "transformers"),
])
def test_a_missing_framework_names_the_extra_to_install(module: str, hides: str, extra: str) -> None:
    done = run(f"""
import sys
sys.modules[{hides!r}] = None  # as if not installed: `import {hides}` raises ImportError
import autocastgen
try:
    import {module}
except ImportError as error:
    print(error)
""")
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"pip install autocastgen[{extra}]" in done.stdout, done.stdout


def test_the_extras_lower_bounds_are_the_tested_releases() -> None:
    requires.module("transformers"), requires.module("accelerate"), requires.module("lightning")
    with open(REPO / "pyproject.toml", "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    pins = requires._pins(requires.MODELS_REQUIREMENTS)
    assert sorted(extras) == ["accelerate", "lightning", "transformers"]
    for extra, requirements in extras.items():
        for requirement in requirements:
            name, lower, upper = re.fullmatch(r"([a-z]+)>=([\d.]+),<(\d+)", requirement).groups()
            assert pins[name].startswith(lower), (extra, requirement, pins[name])  # 5.24 of 5.24.0
            assert int(pins[name].split(".")[0]) < int(upper), (extra, requirement, pins[name])
