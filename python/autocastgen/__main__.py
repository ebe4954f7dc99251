"""`python -m autocastgen` and the `autocastgen` console script: run the installed CLI."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ._core.paths import BIN, LIB
from ._core.runtime import describe


def cli_path() -> Path:
    """The CLI binary installed with the pip package (autocastgen/bin/autocastgen)."""
    return BIN / "autocastgen"


def cmake_dir() -> Path:
    """The folder with autocastgenConfig.cmake, for CMAKE_PREFIX_PATH or autocastgen_DIR."""
    return LIB / "cmake" / "autocastgen"


def main(argv: list[str] | None = None) -> int:
    """Runs the CLI with ``argv`` (default: this process's arguments); its exit code is ours.

    ``--cmake-dir`` (alone) prints :func:`cmake_dir` instead; ``--version`` prints the package's
    version, the torch and the runtime it loaded, and then the CLI's version. The CLI runs in place of this
    process (exec), so its output, exit code and signals are exactly its own.
    """
    args = sys.argv[1:] if argv is None else list(argv)
    if args == ["--version"]:  # the package and the runtime in use, then the CLI's own line
        print(describe())
    elif args == ["--cmake-dir"]:
        found = cmake_dir()
        if not (found / "autocastgenConfig.cmake").is_file():
            print(f"autocastgen: no autocastgenConfig.cmake in {found} (not a pip-installed package?)",
                  file=sys.stderr)
            return 1
        print(found)
        return 0
    cli = cli_path()
    if not cli.is_file():
        print(f"autocastgen: the CLI is not installed at {cli} (build it with CMake, or pip install the package)",
              file=sys.stderr)
        return 1
    env = dict(os.environ)
    # The CLI asks this interpreter's torchgen for the op schemas (it was built with the build's one).
    env.setdefault("AUTOCASTGEN_PYTHON", sys.executable)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(cli, ["autocastgen", *args], env)  # replaces the process, or raises


if __name__ == "__main__":
    sys.exit(main())
