"""Whole or not at all: the one way the Python side writes a file (a temporary beside it, renamed over it).

Note [atomic writes]: every file the package writes (report pages, advised policies, compile_policy's
metadata and build files) goes through :func:`write_file`; the one stream, compile_policy's build
log, is written in the entry's private build folder, which enters the cache whole by one rename
(Note [the compile cache] in policy/_compile.py), and a failed write to it names the log. The bytes
go to a new temporary in the target's own folder (``.NAME.XXXXXXXX.tmp``, so the rename stays on one file system), every
``write`` is checked, and the descriptor's ``close`` too (NFS and full disks report late); a record
(``durable=True``: the compile cache's metadata) is also ``fsync``-ed before, and its folder after,
the rename. Only then does ``os.replace`` put it in place, so a reader sees the previous file or
the new one, never a part. On any failure, ``KeyboardInterrupt`` included, the temporary is
removed and the previous file stays as it was; an ``OSError`` becomes a :class:`WriteError` naming
the file and the system's reason (``No space left on device``, ``Read-only file system``, ``File
too large`` under ``ulimit -f``). A symbolic link is written through (its target is replaced, the
link kept). The new file gets the previous file's permissions, else those ``open()`` would give.
The C++ side has its own helper with the same contract (codegen's output writer and the runtime's
writers).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from .terminal import shown

__all__ = ["WriteError", "write_file"]

# Bytes of the target's name kept in the temporary's: a 255-byte name plus the prefix and suffix
# would pass the file system's limit on one name.
_NAME_BYTES_IN_TEMPORARY = 80


class WriteError(OSError):
    """A file that could not be written whole. ``errno``, ``strerror`` and ``filename`` are the
    system's; ``kept`` says whether a previous file is there, unchanged. No temporary remains."""

    kept: bool = False

    def __str__(self) -> str:
        after = "the previous file is kept" if self.kept else "nothing was written"
        return f"cannot write '{shown(os.fsdecode(self.filename))}': {self.strerror} ({after})"


def write_file(path: str | os.PathLike[str], data: str | bytes, *, durable: bool = False,
               check: Callable[[str], object] | None = None) -> Path:
    """Writes ``data`` (``str`` as UTF-8) to ``path`` whole or not at all (Note [atomic writes]).

    ``durable``: fsync the file and its folder (for records that must survive a crash).
    ``check``: called with the temporary's path once it is complete; an exception from it leaves
    the previous file and removes the temporary (the advisor loads a policy before it replaces one).
    Returns ``path`` as a ``Path``. Raises :class:`WriteError`.
    """
    given = Path(path)
    blob = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    target = Path(os.path.realpath(given)) if given.is_symlink() else given.absolute()
    folder = target.parent
    prefix = "." + os.fsdecode(os.fsencode(target.name)[:_NAME_BYTES_IN_TEMPORARY]) + "."
    try:
        previous = os.stat(target)
    except OSError:
        previous = None
    kept = previous is not None and stat.S_ISREG(previous.st_mode)
    try:
        descriptor, temporary = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=".tmp")
    except OSError as error:
        raise _failure(error, given, kept) from None
    try:
        try:
            view = memoryview(blob)
            while view:
                view = view[os.write(descriptor, view):]
            mode = stat.S_IMODE(previous.st_mode) if previous is not None and kept else 0o666 & ~_umask()
            os.fchmod(descriptor, mode)
            if durable:
                os.fsync(descriptor)
        finally:
            os.close(descriptor)  # raises for an error the file system reports only now
        if check is not None:
            check(temporary)
        os.replace(temporary, target)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(error, OSError) and not isinstance(error, WriteError):
            raise _failure(error, given, kept) from None
        raise
    if durable:
        _sync_folder(folder)
    return given


def _failure(error: OSError, path: Path, kept: bool) -> WriteError:
    failure = WriteError(error.errno, error.strerror or str(error), os.fspath(path))
    failure.kept = kept
    return failure


def _sync_folder(folder: Path) -> None:
    """Makes the rename itself durable. The file is in place already: a folder that cannot be
    opened or synced (some file systems refuse fsync on folders) changes nothing a reader sees."""
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def _umask() -> int:
    """The process's umask, read without changing it (os.umask sets it: a race with other threads)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
