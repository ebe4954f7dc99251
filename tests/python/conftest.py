"""pytest hooks of the Python tests: the end of a run's output says which long cases its rotation
left out (rotation.py, Note [tests by rotation]).

The test files lie in folders named as the package's parts they test (export/, policy/, ...); the
support modules they share (requires, child_process, export_checks, ...) lie here, and this folder
goes first on sys.path so that `import requires` works from every folder, whatever pytest's rootdir
and import mode."""
from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


def pytest_terminal_summary(terminalreporter) -> None:
    rotation = sys.modules.get("rotation")  # imported by the test modules that rotate
    for line in getattr(rotation, "REPORT", ()):
        terminalreporter.write_line(line)
