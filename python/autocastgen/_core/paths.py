"""Where the package's files are: its folder, what the pip package keeps beside its modules (Note
[the pip package's layout] in cmake/AutocastgenInstall.cmake), and the build tree a copy of it
lives in (python/CMakeLists.txt). Every module that looks for a file of the package asks here, not
beside its own file, so a module can move between the package's folders and still find them.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

__all__ = [
    "BIN", "BUILD_LIB", "IMPORTED_FROM", "INCLUDE", "LIB", "PACKAGE", "RUNTIMES", "SHARE", "build_info", "build_tree",
]

# The package's folder as Python imported it (the file names of its frames start with it) ...
IMPORTED_FROM = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# ... and as a real path, for the files beside it.
PACKAGE = Path(IMPORTED_FROM).resolve()
# The pip package's (Note [the pip package's layout]): the CLI, the libraries and the CMake package,
# the runtime's headers, the templates and the shipped policies.
BIN = PACKAGE / "bin"
LIB = PACKAGE / "lib"
INCLUDE = PACKAGE / "include"
SHARE = PACKAGE / "share" / "autocastgen"
# The wheel's: one runtime per torch release, _runtime/torch-X.Y/ (Note [the wheel's parts] in
# cmake/AutocastgenInstall.cmake).
RUNTIMES = PACKAGE / "_runtime"
# A build tree's libraries: <build>/python/autocastgen beside <build>/lib.
BUILD_LIB = PACKAGE.parent.parent / "lib"


def build_tree() -> ModuleType | None:
    """``autocastgen._build_tree``, which python/CMakeLists.txt writes into a build tree's copy of the
    package only: where the generator, the runtime's headers, the templates and the shipped policies
    of that tree are. None elsewhere (the pip package)."""
    return _generated("_build_tree")


def build_info() -> ModuleType | None:
    """``autocastgen._build_info``, which CMake writes into the pip package only
    (cmake/AutocastgenInstall.cmake): the package's version and, built from source, the torch release
    it was built against (empty in the wheel, which has one runtime per release). None elsewhere."""
    return _generated("_build_info")


def _generated(name: str) -> ModuleType | None:
    """The package's module ``name`` that a build writes, or None where none was written."""
    try:
        return importlib.import_module(f"{__package__.rsplit('.', 1)[0]}.{name}")
    except ModuleNotFoundError:
        return None
