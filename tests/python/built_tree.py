"""The build tree a Python test runs against: present, or the test module skipped.

Under ctest (AUTOCASTGEN_BUILD_DIR set) a missing file is an error, since a build that ctest runs
must have built it; run by hand against an unbuilt tree, the module is skipped."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest


def require_built(build: Path, *files: str | Path) -> None:
    """Skips the calling test module (or raises under ctest) unless every one of ``files``
    (relative to ``build``) exists; then puts ``build``/python first on sys.path."""
    missing = [str(f) for f in files if not (build / f).is_file()]
    if missing:
        if "AUTOCASTGEN_BUILD_DIR" in os.environ:
            raise RuntimeError(f"{build} has no {', '.join(missing)}: build the default targets")
        pytest.skip(f"{build} is not built", allow_module_level=True)
    if str(build / "python") not in sys.path:
        sys.path.insert(0, str(build / "python"))
