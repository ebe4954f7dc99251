"""The Python tests are laid out like the package (docs/python.md, "House rules"): every test file
lies in a folder of tests/python named in docs/python.md's table of the tests' folders, every folder
of the table holds tests, and a test file's name is unique across the folders (ctest names it
python/test_x by the file alone; pytest imports it by that name)."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
DOC = TESTS.parents[1] / "docs" / "python.md"


def documented_folders() -> set[str]:
    """The folders of the table under `| folder | tests |` in docs/python.md."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "| folder | tests |")
    folders: set[str] = set()
    for line in lines[start + 2:]:
        if not line.strip().startswith("|"):
            break
        first_cell = line.strip().split("|")[1]
        folders |= set(re.findall(r"`([a-z_0-9]+)/`", first_cell))
    return folders


def _test_files() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def test_every_test_file_lies_in_a_documented_folder() -> None:
    folders = documented_folders()
    assert folders, "docs/python.md: no table of the tests' folders"
    loose = [p.name for p in _test_files() if p.parent == TESTS]
    assert not loose, f"tests/python: {loose} lie outside the folders; move each into the folder of what it tests"
    for path in _test_files():
        folder = path.relative_to(TESTS).parts[0]
        assert folder in folders, (f"tests/python/{folder}/ is not in docs/python.md's table of the tests' "
                                   f"folders (House rules): add it, saying what it tests")
    held = {p.relative_to(TESTS).parts[0] for p in _test_files()}
    assert folders <= held, f"docs/python.md names test folders that hold no test: {sorted(folders - held)}"


def test_a_test_files_name_is_unique() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in _test_files():
        where[path.name].append(str(path.relative_to(TESTS)))
    assert not {name: paths for name, paths in where.items() if len(paths) > 1}
