"""compile_policy where paths are unlucky, and its cache when the disk is: one policy compiled once.

The policy, the file it extends and a schema file live in a folder whose name holds a space,
quotes, a backslash, a '$' and a byte that is not UTF-8 (200 bytes long); the policy's own name is
200 bytes with a space, a quote and another such byte; the cache folder's name has the same
characters and ':' and '='. Where a tmpfs can be mounted (root: tests/python/small_fs.py) the
cache is one, which first is full (4 KiB: the build fails with "No space left on device",
nothing is left in the cache), then read-only (CacheError naming the folder and the reason), then
has room: the policy compiles (Note [building at a plain path] in policy/_compile.py), a new process
loads it from the cache, and an entry whose metadata has a field of the wrong type is built again
with the reason in the progress line (the rebuild is a ccache hit). Every field's wrong type is
also checked without compiling (Note [checking the metadata]).

ctest sets AUTOCASTGEN_BUILD_DIR; run by hand, build/ is used.
"""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import pytest

from built_tree import require_built

ROOT = Path(__file__).resolve().parents[3]
BUILD = Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", ROOT / "build"))
require_built(BUILD, "python/autocastgen/_build_tree.py")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from child_process import last_json, run_child  # noqa: E402
from small_fs import can_mount, remount, tmpfs  # noqa: E402

NS = "acg_paths"
ODD = b"it's \"odd\" \\ $x \xff "
PRELUDE = f"""\
import json, os, torch
lib = torch.library.Library("{NS}", "DEF")
lib.define("scale(Tensor a, Tensor b) -> Tensor")
lib.impl("scale", lambda a, b: a * b, "CPU")
import autocastgen
"""
# Compiles (or loads) the policy and runs its two ops under bfloat16 autocast.
COMPILE = """
try:
    handle = autocastgen.compile_policy(os.fsdecode(POLICY), schemas=[NATIVE, os.fsdecode(SCHEMA)])
except Exception as error:
    print(json.dumps({"error": type(error).__name__, "text": str(error)}))
else:
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        dtypes = [str(torch.ops.acg_paths.scale(a, b).dtype), str(torch.mm(a.bfloat16(), b).dtype)]
    print(json.dumps({"compiled": handle.compiled, "name": handle.name, "entry": os.fsencode(handle.entry).hex(),
                      "ops": dict(handle.ops), "dtypes": dtypes}))
"""


def native_functions() -> str:
    import torchgen

    return str(Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml")


def odd_files(tmp_path: Path) -> dict[str, bytes]:
    folder = os.fsencode(tmp_path) + b"/" + ODD + b"d" * (200 - len(ODD))
    os.makedirs(folder)
    with open(folder + b"/" + "base 'þ'.yaml".encode(), "w") as f:
        f.write("autocast: {device: cpu}\nlists:\n  fp32: [mm]\n")
    policy = folder + b"/pol icy'\xfe" + b"p" * 187 + b".yaml"  # 200 bytes
    with open(policy, "w") as f:
        f.write(f'extends: "base \'\\u00fe\'.yaml"   # relative to this folder\n'
                f"lists:\n  lower_precision_fp: [{NS}::scale]\n")
    schema = folder + b"/ops \xfd 's.yaml"
    with open(schema, "w") as f:
        f.write(f"- func: {NS}::scale(Tensor a, Tensor b) -> Tensor\n")
    return {"policy": policy, "schema": schema, "cache": os.fsencode(tmp_path) + b"/ca che ' \\ \xff $x:y=z"}


def compile_in_child(files: dict[str, bytes]) -> tuple[dict, str]:
    body = (COMPILE.replace("POLICY", repr(files["policy"])).replace("SCHEMA", repr(files["schema"]))
            .replace("NATIVE", repr(native_functions())))
    done = run_child(BUILD, PRELUDE, body, env={"AUTOCASTGEN_CACHE": os.fsdecode(files["cache"])})
    return last_json(done), done.stderr


def cache_listing(cache: bytes) -> list[bytes]:
    return sorted(name for name in os.listdir(cache) if name != b"lost+found")


def test_odd_paths_compile_cache_and_reload(tmp_path):
    files = odd_files(tmp_path)
    cache = files["cache"]
    name = "pol_icy__" + "p" * 91  # the stem's characters, cut to 100
    mounted = can_mount()
    with tmpfs(cache, "4k") if mounted else _no_mount(cache):
        if mounted:
            full, _ = compile_in_child(files)
            assert full["error"] in ("CompileError", "CacheError", "RuntimeError"), full
            assert "No space left on device" in full["text"], full["text"][-2000:]
            left = cache_listing(cache)
            assert not [n for n in left if n.endswith((b".build", b".tmp")) or n.startswith(name.encode() + b"-")
                        and not n.endswith((b".lock", b".failed"))], left
            remount(cache, "ro")
            read_only, _ = compile_in_child(files)
            assert read_only["error"] == "CacheError", read_only
            assert read_only["text"].startswith(f"autocastgen.compile_policy: cannot build policy '{name}' in the cache "
                                                "folder '"), read_only["text"]
            assert "\\xff $x:y=z': Read-only file system" in read_only["text"], read_only["text"]
            remount(cache, "rw,size=256m")
        first, log = compile_in_child(files)
        assert first.get("compiled") is True, (first, log[-3000:])
        assert first["name"] == name and first["dtypes"] == ["torch.bfloat16", "torch.float32"]
        assert first["ops"] == {f"{NS}::scale": "lower_precision_fp", "mm": "fp32"}
        entry = bytes.fromhex(first["entry"])
        assert os.path.dirname(entry) == cache and not [n for n in cache_listing(cache) if n.endswith(b".build")]
        again, log = compile_in_child(files)  # a new process: from the cache
        assert again == {**first, "compiled": False}, log[-2000:]
        assert "compiling" not in log
        # A field of the wrong type: the entry is built again, the reason in the progress line.
        metadata = json.loads(Path(os.fsdecode(entry + b"/metadata.json")).read_text())
        metadata["library_size"] = str(metadata["library_size"])
        Path(os.fsdecode(entry + b"/metadata.json")).write_text(json.dumps(metadata))
        rebuilt, log = compile_in_child(files)
        assert rebuilt == {**first, "compiled": True}, log[-2000:]
        assert ("metadata.json: 'library_size' must be an integer, found a string), " in log
                and "autocastgen: compiling policy" in log), log[-2000:]


class _no_mount:
    """Where no tmpfs can be mounted: the cache is a plain folder with the same name."""

    def __init__(self, folder: bytes) -> None:
        os.makedirs(folder)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def metadata_problem(metadata: object) -> str | None:
    from autocastgen.policy._compile import _metadata_problem

    return _metadata_problem(metadata, types.SimpleNamespace(key="k" * 64, name="lib"))


GOOD = {"format": 1, "key": "k" * 64, "name": "lib", "library": "lib.so", "library_size": 10,
        "library_sha256": "a" * 64, "source": "autocast_lib.cpp", "dependencies": {"/abs/p.yaml": "b" * 64},
        "device": "cpu", "dispatch_key": "AutocastCPU", "ops": {"mm": "fp32"}, "build_seconds": 1.5}


@pytest.mark.parametrize("field, value, why", [
    ("format", "1", "'format' must be an integer, found a string"),
    ("key", None, "'key' must be a string, found null"),
    ("library", ["lib.so"], "'library' must be a string, found an array"),
    ("library", "../../elsewhere.so", "'library' must be 'lib.so', found '../../elsewhere.so'"),
    ("source", "/etc/passwd", "'source' must be 'autocast_lib.cpp', found '/etc/passwd'"),
    ("library_size", True, "'library_size' must be an integer, found a boolean"),
    ("library_size", -1, "'library_size' or 'library_sha256' is not a size and a sha256"),
    ("library_sha256", "xyz", "'library_size' or 'library_sha256' is not a size and a sha256"),
    ("dependencies", [], "'dependencies' must be an object, found an array"),
    ("dependencies", {"/abs": 3}, "'dependencies' must map strings to strings, found an integer"),
    ("dependencies", {"relative.yaml": "b" * 64}, "'dependencies' must name files by absolute paths"),
    ("ops", {"mm": {}}, "'ops' must map strings to strings, found an object"),
    ("device", 7, "'device' must be a string, found an integer"),
    ("build_seconds", "2", "'build_seconds' must be a number, found a string"),
    ("build_seconds", float("inf"), "'build_seconds' must be a number of seconds"),
    ("name", None, "'name' must be a string, found null"),
])
def test_every_metadata_field_is_checked_by_type(field, value, why):
    assert metadata_problem(GOOD) is None
    assert metadata_problem({**GOOD, field: value}) == why
    missing = dict(GOOD)
    del missing[field]
    assert metadata_problem(missing) == f"'{field}' is missing"
    assert metadata_problem([GOOD]) == "not an object but an array"
