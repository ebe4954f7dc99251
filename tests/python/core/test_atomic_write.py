"""Every Python write whole or not at all (Note [atomic writes] in python/autocastgen/_core/atomic.py):
`ulimit -f` (EFBIG), a full file system and a read-only one (a real tmpfs: tests/python/small_fs.py),
an interrupt half-way, a check that refuses: each leaves the previous file as it was and no
temporary, with an error naming the file and the system's reason; and what a write keeps (a
symbolic link, the file's mode) and copes with (a 255-byte name). The advisor and the report go
through the same helper (their tests: test_advise.py, tests/report).

Each case runs in a fresh interpreter without torch (child_process.run_bounded), so a limit set
for it touches nothing else.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from built_tree import require_built  # noqa: E402
from child_process import run_bounded  # noqa: E402
from small_fs import can_mount, remount, tmpfs  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
BUILD = Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", ROOT / "build"))
require_built(BUILD, "python/autocastgen/_core/atomic.py")  # an error under ctest where missing

# Writes DATA to TARGET in the child and prints what happened as JSON.
WRITE = """
import json, os
from autocastgen._core.atomic import WriteError, write_file
try:
    write_file(TARGET, DATA, durable=DURABLE)
    print(json.dumps({"ok": True}))
except WriteError as error:
    print(json.dumps({"ok": False, "errno": error.errno, "text": str(error), "kept": error.kept}))
"""


def write_in_child(target: Path, data: str, durable: bool = False, **limits) -> dict:
    """``data``: a Python expression for the bytes (made in the child: a command line is short)."""
    code = WRITE.replace("TARGET", repr(str(target))).replace("DATA", data).replace("DURABLE", repr(durable))
    done = run_bounded(BUILD, code, **limits)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_past_ulimit_f_nothing_is_written_and_the_previous_file_stays(tmp_path):
    page = tmp_path / "page.html"
    page.write_text("older")
    failed = write_in_child(page, 'b"x" * 20000', file_bytes=8192)
    assert failed["ok"] is False and failed["errno"] == errno.EFBIG and failed["kept"] is True
    assert failed["text"] == f"cannot write '{page}': File too large (the previous file is kept)"
    assert page.read_text() == "older" and leftovers(tmp_path) == []
    fresh = tmp_path / "fresh.json"
    failed = write_in_child(fresh, 'b"x" * 20000', durable=True, file_bytes=8192)
    assert failed["text"] == f"cannot write '{fresh}': File too large (nothing was written)"
    assert not fresh.exists() and leftovers(tmp_path) == []
    assert write_in_child(fresh, 'b"x" * 100', file_bytes=8192) == {"ok": True} and fresh.read_bytes() == b"x" * 100


@pytest.mark.skipif(not can_mount(), reason="needs root and a tmpfs mount (tests/python/small_fs.py)")
def test_a_full_and_a_read_only_file_system(tmp_path):
    disk = tmp_path / "small disk"
    with tmpfs(disk, "64k"):
        record = disk / "metadata.json"
        record.write_text('{"older": true}\n')
        for durable in (False, True):
            failed = write_in_child(record, 'b"y" * 200_000', durable=durable)
            assert failed["errno"] == errno.ENOSPC, failed
            assert failed["text"] == f"cannot write '{record}': No space left on device (the previous file is kept)"
            assert record.read_text() == '{"older": true}\n' and leftovers(disk) == []
        remount(disk, "ro")
        failed = write_in_child(record, 'b"{}\\n"')
        assert failed["errno"] == errno.EROFS
        assert failed["text"] == f"cannot write '{record}': Read-only file system (the previous file is kept)"
        remount(disk, "rw")  # space and rights back: the next write simply works
        assert write_in_child(record, 'b"{}\\n"', durable=True) == {"ok": True} and record.read_text() == "{}\n"


def test_an_interrupt_or_a_refusing_check_leaves_the_previous_file(tmp_path):
    target = tmp_path / "advised.yaml"
    target.write_text("older")
    code = f"""
        import json, os
        from pathlib import Path
        from autocastgen._core import atomic as _atomic
        target = Path({str(target)!r})
        real_write = os.write
        def half_then_interrupt(fd, data):
            real_write(fd, bytes(data[:10]))
            raise KeyboardInterrupt
        _atomic.os.write = half_then_interrupt
        try:
            _atomic.write_file(target, "z" * 1000)
        except KeyboardInterrupt:
            interrupted = True
        _atomic.os.write = real_write
        def refuse(temporary):
            assert Path(temporary).read_text() == "new" and Path(temporary).parent == target.parent
            raise ValueError("does not load")
        try:
            _atomic.write_file(target, "new", check=refuse)
        except ValueError as error:
            refused = str(error)
        print(json.dumps([interrupted, refused]))
        """
    done = run_bounded(BUILD, code)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [True, "does not load"]
    assert target.read_text() == "older" and leftovers(tmp_path) == []


def test_links_modes_and_long_names(tmp_path):
    real = tmp_path / "real.yaml"
    real.write_text("older")
    real.chmod(0o640)
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    long_name = tmp_path / ("n" * 250 + ".json")  # 255 bytes: the temporary's name must stay under the limit
    code = f"""
        import os
        os.umask(0o027)
        from autocastgen._core.atomic import write_file
        write_file({str(link)!r}, "through the link")
        write_file({str(long_name)!r}, b"{{}}")
        """
    done = run_bounded(BUILD, code)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and real.read_text() == "through the link"
    assert real.stat().st_mode & 0o777 == 0o640  # the previous file's mode
    assert long_name.read_bytes() == b"{}" and long_name.stat().st_mode & 0o777 == 0o640  # 0666 less the umask
    assert leftovers(tmp_path) == []
