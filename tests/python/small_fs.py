"""A small tmpfs mounted for a test: a disk that really fills up and a folder that is really
read-only (as root a chmod does not stop a write), for the atomic writes and the compile cache.

Needs root and mount(8) (a container often allows tmpfs): `can_mount()` says whether it works here;
tests skip when it does not. The file system is unmounted at the end (lazily if a process still
has a file of it mapped, such as a loaded library).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

_known: bool | None = None


def can_mount() -> bool:
    """Whether a tmpfs can be mounted here (tried once per process)."""
    global _known
    if _known is None:
        _known = False
        if os.geteuid() == 0 and shutil.which("mount"):
            import tempfile

            with tempfile.TemporaryDirectory(prefix="small-fs-") as probe:
                done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", probe], capture_output=True)
                if done.returncode == 0:
                    subprocess.run(["umount", probe], check=True)
                    _known = True
    return _known


@contextlib.contextmanager
def tmpfs(folder: Path | bytes, size: str) -> Iterator[None]:
    """A tmpfs of ``size`` (mount's syntax: "64k", "256m") mounted on ``folder`` (made if missing)."""
    os.makedirs(folder, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", folder], check=True)
    try:
        yield
    finally:
        if subprocess.run(["umount", folder], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", folder], check=True)


def remount(folder: Path | bytes, options: str) -> None:
    """Changes a mounted tmpfs's options: "ro", "rw", "rw,size=256m"."""
    subprocess.run(["mount", "-o", f"remount,{options}", folder], check=True)
