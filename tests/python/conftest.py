"""pytest hooks of the Python tests: the end of a run's output says which long cases its rotation
left out (rotation.py, Note [tests by rotation])."""
from __future__ import annotations

import sys


def pytest_terminal_summary(terminalreporter) -> None:
    rotation = sys.modules.get("rotation")  # imported by the test modules that rotate
    for line in getattr(rotation, "REPORT", ()):
        terminalreporter.write_line(line)
