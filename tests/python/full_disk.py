"""A full file system for write-fault tests (issue 47): a 64 KiB tmpfs mounted in a temporary
folder, holding the files a test puts there first, then filled to the last byte.

Mounting needs root and CAP_SYS_ADMIN (a container run as root has them); elsewhere
`full_file_system` raises Unavailable, which callers turn into a skip that says why."""
from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


class Unavailable(RuntimeError):
    """No tmpfs could be mounted here."""


def fill(folder: Path) -> None:
    """Writes to `folder/filler` until the file system refuses a byte."""
    with open(folder / "filler", "wb", buffering=0) as f:
        for size in (4096, 1):
            while True:
                try:
                    f.write(b"\0" * size)
                except OSError as error:
                    if error.errno != errno.ENOSPC:
                        raise
                    break


@contextlib.contextmanager
def full_file_system(files: dict[str, bytes]) -> Iterator[Path]:
    """A mounted tmpfs holding `files` (relative paths) and a filler that leaves no room."""
    with tempfile.TemporaryDirectory(prefix="autocastgen-full-") as tmp:
        mount = Path(tmp) / "fs"
        mount.mkdir()
        made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(mount)],
                              capture_output=True, text=True)
        if made.returncode != 0:
            raise Unavailable(f"cannot mount a tmpfs ({made.stderr.strip() or 'mount failed'}): needs root in a "
                              "privileged container")
        try:
            for name, data in files.items():
                (mount / name).parent.mkdir(parents=True, exist_ok=True)
                (mount / name).write_bytes(data)
            fill(mount)
            yield mount
        finally:
            subprocess.run(["umount", "-l", str(mount)], check=False)


def temporaries(folder: Path) -> list[str]:
    """Files the atomic-write helper would have left: `<name>.tmp<pid>`."""
    return sorted(str(p) for p in folder.rglob("*") if ".tmp" in p.name)


if __name__ == "__main__":  # a quick look: python3 full_disk.py
    try:
        with full_file_system({"a": b"x"}) as where:
            print(where, os.statvfs(where).f_bavail)
    except Unavailable as why:
        print(why)
