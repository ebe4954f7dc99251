"""Finds and imports the mydevice example (build/examples/privateuse1) for the tests in this folder,
and puts the tests' shared support modules (tests/python: exact.py) on sys.path.

ctest sets AUTOCASTGEN_MYDEVICE_DIR; there a missing build is an error. Run by hand, the default
build folder is used and the tests skip when it has not been built.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MYDEVICE_DIR = Path(os.environ.get("AUTOCASTGEN_MYDEVICE_DIR", ROOT / "build" / "examples" / "privateuse1"))
# The tests' shared support modules (tests/python: exact.py).
if str(ROOT / "tests" / "python") not in sys.path:
    sys.path.append(str(ROOT / "tests" / "python"))


def import_mydevice():
    """The mydevice package, imported from MYDEVICE_DIR; None when it was not built (run by hand)."""
    if not (MYDEVICE_DIR / "mydevice" / "__init__.py").is_file():
        if "AUTOCASTGEN_MYDEVICE_DIR" in os.environ:
            raise RuntimeError(f"the mydevice example was not built into {MYDEVICE_DIR}")
        return None
    if str(MYDEVICE_DIR) not in sys.path:
        sys.path.insert(0, str(MYDEVICE_DIR))
    import mydevice

    return mydevice


@pytest.fixture(scope="session")
def mydevice_module():
    module = import_mydevice()
    if module is None:
        pytest.skip(f"mydevice not built in {MYDEVICE_DIR} (cmake --build --preset default)")
    return module
