"""compile_policy: a policy's typed autocast wrappers, generated and compiled just in time, cached on disk."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import importlib.util
import json
import math
import os
import re
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Union

import torch

from .._core import runtime as _runtime
from .._core.atomic import WriteError, write_file
from .._core.paths import BIN, INCLUDE, PACKAGE, SHARE, build_tree
from .._core.terminal import shown
from ._load import PolicyError

PathLike = Union[str, "os.PathLike[str]"]

CACHE_VARIABLE = "AUTOCASTGEN_CACHE"

# Bumped whenever the entry layout, the metadata or the key recipe changes: older entries then
# simply stop matching.
_FORMAT = 1

# Note [compile_policy builds with cpp_extension]
# The generated file is compiled by torch.utils.cpp_extension.load, PyTorch's own extension
# machinery, rather than by a CMake project calling add_autocast_ops(). Both would run the same
# generator with the same command line (_generate_command mirrors cmake/AutocastgenOps.cmake);
# cpp_extension is the simpler correct choice here because (1) it takes the include paths,
# libraries, C++ string ABI and compiler from the very torch the library is loaded into, so the
# library cannot be built against another torch than the one running; (2) it has no configure
# step (CMake's compiler checks and torch discovery would add ~10 s to every first use); (3) at
# run time it needs a C++ compiler and ninja, not CMake. It runs in a child process
# (_build_library.py): the compiler's whole output goes to a log file, and the child loads the
# new library once, so one that cannot be loaded never enters the cache. Our flags add -O2 (the
# CMake build's Release level; cpp_extension adds no -O) and -std=c++20 (the runtime's headers).
_CFLAGS = ("-O2", "-std=c++20")
_RUNTIME_LINK_NAME = "autocastgen_runtime_torch"

# A namespace named in a policy (`mylib::op`): the dispatcher's schemas of these are handed to
# the generator when no schema files are given.
_NAMESPACE = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)::")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# A library name longer than this would, with the key and the cache's suffixes, pass the file
# system's limit of 255 bytes on one name; a default name (the policy file's stem) is cut to it.
_MAX_NAME = 100
# The compiler's, the linker's, ccache's and ninja's error lines (not Python's tracebacks).
_ERROR_LINE = re.compile(r"\berror:|^FAILED:|undefined reference|undefined symbol", re.I)
_ERROR_COUNT_LINE = re.compile(r"[^\n]*: \d+ errors? generated\.")  # fullmatch on the last line only
# Characters a path may hold to be handed to cpp_extension as it is (Note [building at a plain path]).
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./+,@%-]+\Z")

_lock = threading.Lock()  # one compile_policy at a time per process (the file lock orders processes)
_loaded: dict[str, CompiledPolicy] = {}  # key -> the handle of the library this process loaded
_digests: dict[tuple[str, int, int, int], str] = {}
_compilers: dict[str, dict[str, str]] = {}


class CacheError(OSError):
    """The cache folder could not be written (read-only, full, not a folder): nothing entered the
    cache, and an entry that was there is as it was. ``errno``, ``strerror`` and ``filename`` are
    the system's; ``str(error)`` names the policy, the folder and what to do."""

    def __init__(self, error: OSError, root: Path, name: str) -> None:
        super().__init__(error.errno, error.strerror or str(error), error.filename or os.fspath(root))
        self.root = root
        self.name = name

    def __str__(self) -> str:
        where = os.fsdecode(self.filename)
        inside = "" if where == os.fspath(self.root) else f" ({shown(where)})"
        return (f"autocastgen.compile_policy: cannot build policy '{self.name}' in the cache folder "
                f"'{shown(os.fspath(self.root))}': {self.strerror}{inside}; the cache is as it was. Free space, or "
                f"set {CACHE_VARIABLE} to a writable folder")


class CompileError(RuntimeError):
    """The generated wrappers did not compile, link or load; nothing was cached.

    ``str(error)`` names the policy, the compiler's exit status, its first error lines and the log
    with its whole output (``build.log``), kept in ``<cache>/<name>-<key>.failed/`` with the
    generated source until the next attempt.
    """

    def __init__(self, message: str, log: Path | None) -> None:
        super().__init__(message)
        self.log = log  # None where nothing was compiled (a tool is missing)


@dataclasses.dataclass(frozen=True, eq=False)
class CompiledPolicy:
    """A policy's compiled wrappers, loaded into this process by :func:`compile_policy`.

    Attributes:
        name: the library's name (``--name`` of the generator; the C++ namespace
            ``autocastgen::generated::<name>``).
        library: the shared library in the cache, as passed to ``torch.ops.load_library``.
        source: the generated C++ file it was built from (kept beside it).
        ops: every overload that got a wrapper -> its policy, named as in the generator's
            manifest: ``name[.overload]`` for aten, ``ns::name[.overload]`` for the others.
        device: the policy's device type (``cpu``, ``cuda``, ...).
        dispatch_key: the autocast key the wrappers are registered on (``AutocastCPU``, ...).
        key: the cache key, a sha256 over every input (Note [the compile cache]).
        entry: the cache entry's folder (the library, the source, the manifest, ``metadata.json``,
            ``build.log``).
        compiled: whether this call compiled it (False: it came from the cache, or was loaded
            already by this process).
        build_seconds: how long its compilation took, when it was compiled.

    There is no ``unload()``: PyTorch cannot unload an operator library (a library loaded with
    ``torch.ops.load_library`` stays for the life of the process, and its registrations with it).
    A runtime policy (``load_policy``, ``register_runtime_policy``) for the same op and device
    replaces a wrapper; ``clear_runtime_policies`` brings the wrapper back.
    """

    name: str
    library: Path
    source: Path
    ops: Mapping[str, str]
    device: str
    dispatch_key: str
    key: str
    entry: Path
    compiled: bool
    build_seconds: float


def cache_dir() -> Path:
    """Where compiled policies are kept: ``$AUTOCASTGEN_CACHE``, else ``~/.cache/autocastgen/compiled``."""
    override = os.environ.get(CACHE_VARIABLE)
    if override:
        return Path(override).expanduser().resolve()
    return Path.home() / ".cache" / "autocastgen" / "compiled"


def compile_policy(
    path: PathLike,
    schemas: PathLike | Sequence[PathLike] | None = None,
    name: str | None = None,
    verbose: bool = False,
) -> CompiledPolicy:
    """Generates a policy's typed autocast wrappers, compiles them once, and loads them.

    The generator is the CLI's ``generate --target torch`` with the command line of CMake's
    ``add_autocast_ops()`` (the same templates, the running torch's release), and the library is
    built with ``torch.utils.cpp_extension`` against the running torch and autocastgen's runtime.
    Each wrapper then takes over its op's autocast key for the policy's device, following
    ``torch.autocast`` (PyTorch's autocast state and cast cache), as the wrappers of the CMake
    route do. Custom ops (``torch.library``) work: define them before the call when their schemas
    come from the dispatcher (``schemas=None``); a wrapper looks its op up at its first call.

    The library is cached on disk (:func:`cache_dir`) under a key hashing every input: the policy
    and each file its ``extends:`` chain names, the schemas, the templates, the generator and
    runtime binaries, the runtime's headers, the torch and Python versions, the compiler and the
    flags. A later call with the same inputs, in this process or another, loads the cached library
    (milliseconds); an entry whose library, metadata or recorded inputs do not match is compiled
    again. Processes compiling the same policy at once wait for one another through a file lock;
    a library enters the cache only complete (built in a private folder, then renamed).

    Compiling prints one line on stderr (``autocastgen: compiling policy ...``); ``verbose=True``
    also shows the generator's and the compiler's output.

    Args:
        path: the policy file (docs/policy-language.md); ``extends:`` is relative to it.
            Diagnostics name it as given.
        schemas: op-schema files in ``native_functions.yaml`` format, replacing the default, as
            the CLI's ``--schemas`` and ``add_autocast_ops(SCHEMAS)`` do. Default: the running
            torch's ``native_functions.yaml`` (torchgen's; ``$AUTOCASTGEN_NATIVE_FUNCTIONS``
            overrides it) plus the dispatcher's schemas of the other namespaces the policy
            names (ops defined with ``torch.library`` or loaded from a library before the call).
        name: the library's name, a C identifier; default: the policy file's stem with other
            characters turned into ``_``.
        verbose: print the generator's and the compiler's output on stderr.

    Returns:
        a :class:`CompiledPolicy` describing the loaded library.

    Raises:
        PolicyError: the policy (or a schema file) has errors; its text is the CLI's
            ``file:line:col: error: ...`` diagnostics, as ``autocastgen check`` prints them
            (without the ``N errors generated.`` line). Nothing was compiled or cached.
        CompileError: the compiler or the linker failed, or the library did not load; the text
            names the log with the compiler's output.
        CacheError: the cache folder cannot be written (read-only, full): an ``OSError`` naming
            the folder, the file and the reason; the cache is as it was.
        ValueError: ``name`` is not an identifier of at most 100 characters.
        FileNotFoundError: a schema file does not exist.

    Any path works (spaces, quotes, bytes that are not UTF-8, long names; Note [building at a
    plain path]). What a policy can make happen and what this runs: docs/security.md.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"autocastgen.compile_policy: path must be a str or os.PathLike, not {type(path).__name__}")
    given = os.fspath(path)
    policy = Path(given).resolve()
    try:
        policy.read_bytes()
    except OSError as error:
        raise PolicyError(f"autocastgen: error: cannot read policy '{shown(given)}': {error.strerror}", given) from None
    if name is None:
        name = _default_name(policy)
    elif not isinstance(name, str) or not _IDENTIFIER.match(name) or len(name) > _MAX_NAME:
        raise ValueError(f"autocastgen.compile_policy: name must be a C identifier ([A-Za-z_][A-Za-z0-9_]*) of at "
                         f"most {_MAX_NAME} characters, not {name!r}")

    with _lock:
        layout = _Layout.find()
        request = _Request.make(given, policy, schemas, name, layout)
        known = _loaded.get(request.key)
        if known is not None:
            return dataclasses.replace(known, compiled=False)
        root = cache_dir()
        entry = root / request.stem
        metadata, _ = _check_entry(entry, request)
        if metadata is not None:  # a read-only cache still serves the entries it has
            with contextlib.suppress(OSError):  # removed since the check: rebuilt under the lock
                return _load(entry, metadata, compiled=False)
        try:
            root.mkdir(parents=True, exist_ok=True)
            with _file_lock(root / f"{request.stem}.lock", name):
                metadata, problem = _check_entry(entry, request)
                if metadata is None:
                    metadata = _build(root, entry, request, problem, verbose)
                    return _load(entry, metadata, compiled=True)
                return _load(entry, metadata, compiled=False)
        except OSError as error:
            if isinstance(error, CacheError) or not _in_cache(error, root):
                raise  # not the cache's: a library that does not load, a tool that does not start
            raise CacheError(error, root, name) from None


# ---------------------------------------------------------------------------------------------
# What is compiled, and its key.


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Where the CLI, the runtime library, its headers and the templates are."""

    cli: Path
    runtime: Path
    include_dirs: tuple[Path, ...]
    templates: Path

    @staticmethod
    def find() -> _Layout:
        runtime = _runtime_library()
        if (BIN / "autocastgen").is_file():  # the pip package (Note [the pip package's layout])
            return _Layout(BIN / "autocastgen", runtime, (INCLUDE,), SHARE / "templates")
        tree = build_tree()  # written by python/CMakeLists.txt into <build>/python/autocastgen
        if tree is None:
            raise RuntimeError(
                f"autocastgen.compile_policy: no generator next to this package ({BIN / 'autocastgen'}) "
                "and no build tree: use the pip-installed package or <build>/python"
            )
        layout = _Layout(Path(tree.CLI), runtime, tuple(Path(p) for p in tree.INCLUDE_DIRS), Path(tree.TEMPLATES_DIR))
        if not layout.cli.is_file():
            raise RuntimeError(f"autocastgen.compile_policy: the generator {layout.cli} is not built "
                               "(cmake --build <build> --target autocastgen)")
        return layout


def _runtime_library() -> Path:
    """The runtime library the compiled wrappers link: the one this process loaded.

    When a backend library brought the runtime in, the package's own copy is linked instead; it
    has the same SONAME, so the dynamic loader reuses the copy already loaded.
    """
    loaded = _runtime.load_runtime()
    if loaded != "already loaded":
        return Path(loaded).resolve()  # the link line runs elsewhere: a relative path would not hold
    for candidate in _runtime._candidates():
        if candidate.is_file():
            return candidate.resolve()
    raise RuntimeError(f"autocastgen.compile_policy: no {_runtime.LIBRARY_NAME} to link the wrappers with")


@dataclasses.dataclass(frozen=True)
class _Request:
    """One compile_policy call, resolved: the generator's arguments, the flags and the key."""

    given: str
    name: str
    schema_args: tuple[str, ...]
    dispatcher_schemas: str
    torch_release: str
    layout: _Layout
    inputs: dict[str, Any]
    key: str

    @property
    def stem(self) -> str:
        return f"{self.name}-{self.key[:16]}"

    @staticmethod
    def make(given: str, policy: Path, schemas: PathLike | Sequence[PathLike] | None, name: str,
             layout: _Layout) -> _Request:
        schema_args: list[str] = []
        if schemas is not None:  # checked first: a missing schema file is its error, whatever the policy
            schema_args = [os.fspath(s) for s in ([schemas] if isinstance(schemas, (str, os.PathLike)) else schemas)]
            for arg in schema_args:
                if not Path(arg).resolve().is_file():
                    raise FileNotFoundError(f"autocastgen.compile_policy: schema file '{shown(arg)}' not found")
        chain = _policy_chain(layout, given)
        release = _torch_release()
        dispatcher = ""
        if schemas is None:
            namespaces = {ns for file in chain for ns in _NAMESPACE.findall(file.read_text(encoding="utf-8",
                                                                                           errors="replace"))}
            dispatcher = _dispatcher_schemas(namespaces - {"aten"})
            native = _native_functions()
            schema_files, schema_args = [native], [str(native)]
        else:
            schema_files = [Path(arg).resolve() for arg in schema_args]
        inputs = {
            "format": _FORMAT,
            "name": name,
            "policy": str(policy),
            "policy_files": [[str(p), _sha256(p)] for p in chain],
            "schemas": [[str(p), _sha256(p)] for p in schema_files],
            "dispatcher_schemas": hashlib.sha256(dispatcher.encode()).hexdigest(),
            "templates": _tree_digest([layout.templates], "*.mustache"),
            "generator": [str(layout.cli), _sha256(layout.cli)],
            "runtime": [str(layout.runtime), _sha256(layout.runtime)],
            "headers": _tree_digest(layout.include_dirs, "*.h"),
            "torch": {"version": torch.__version__, "git": getattr(torch.version, "git_version", ""),
                      "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI), "path": str(Path(torch.__file__).parent),
                      "release": release},
            "python": sys.version,
            "compiler": _compiler(),
            "flags": {"cflags": list(_CFLAGS), "ldflags": _ldflags(layout),
                      "include_dirs": [str(p) for p in layout.include_dirs]},
        }
        key = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
        return _Request(given, name, tuple(schema_args), dispatcher, release, layout, inputs, key)


def _in_cache(error: OSError, root: Path) -> bool:
    """Whether ``error`` is about the cache folder, a folder above it or a file in it."""
    if error.filename is None:
        return False
    where = os.path.abspath(os.fsdecode(error.filename))
    top = os.fspath(root)
    return where == top or top.startswith(where.rstrip("/") + "/") or where.startswith(top + "/")


def _default_name(policy: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", policy.stem)[:_MAX_NAME] or "policy"
    return f"_{name[:_MAX_NAME - 1]}" if name[0].isdigit() else name


def _policy_chain(layout: _Layout, given: str) -> list[Path]:
    """The policy and every file its ``extends:`` chain names, resolved, as the generator reads them.

    The CLI's own reader says which (``check --policy GIVEN --files``, run where the generator
    runs: Note [the files a chain read] in core/policy/resolver.cpp). A chain it cannot read (a
    missing base, a cycle, more than 64 files, a file with errors of shape) is the policy's
    PolicyError, with the diagnostics the generator would stop with. The generator's input list,
    recorded in the entry and checked at every load, stays the authority on what a library was
    built from.
    """
    command = [str(layout.cli), "check", "--policy", given, "--files"]
    done = subprocess.run(command, capture_output=True)
    if done.returncode == 1:
        raise PolicyError(_without_error_count(done.stderr.decode("utf-8", "backslashreplace")), given)
    if done.returncode != 0:
        raise RuntimeError(f"autocastgen.compile_policy: {shown(shlex.join(command))} exited {done.returncode}:\n"
                           f"{done.stderr.decode('utf-8', 'backslashreplace')}")
    return [Path(os.fsdecode(file)).resolve() for file in done.stdout.split(b"\0")[:-1]]


def _torch_release() -> str:
    match = re.match(r"\d+\.\d+(\.\d+)?", torch.__version__)
    if match is None:
        raise RuntimeError("autocastgen.compile_policy: cannot read a release from torch.__version__ "
                           f"{torch.__version__!r}")
    return match.group(0)


def _native_functions() -> Path:
    """The running torch's native_functions.yaml (torchgen's), or ``$AUTOCASTGEN_NATIVE_FUNCTIONS``."""
    override = os.environ.get("AUTOCASTGEN_NATIVE_FUNCTIONS")
    if override:
        return Path(override).resolve()
    import importlib.util

    spec = importlib.util.find_spec("torchgen")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        found = Path(location) / "packaged" / "ATen" / "native" / "native_functions.yaml"
        if found.is_file():
            return found
    raise RuntimeError("autocastgen.compile_policy: the running torch has no torchgen/packaged/ATen/native/"
                       "native_functions.yaml; pass schemas= or set AUTOCASTGEN_NATIVE_FUNCTIONS")


def _dispatcher_schemas(namespaces: set[str]) -> str:
    """The dispatcher's schemas of ops in ``namespaces``, as a native_functions.yaml file, sorted."""
    if not namespaces:
        return ""
    lines = []
    for qualified in sorted(torch._C._dispatch_get_all_op_names()):
        ns, _, rest = qualified.partition("::")
        if ns not in namespaces:
            continue
        op, _, overload = rest.partition(".")
        try:
            schema = torch._C._get_schema(f"{ns}::{op}", overload)
        except RuntimeError:  # kernels registered for an op nobody defined
            continue
        lines.append(f"- func: {_yaml_quoted(str(schema))}\n")
    return "".join(lines)


def _yaml_quoted(text: str) -> str:
    """``text`` as a YAML double-quoted scalar holding only printable ASCII: a schema's string default
    may hold ``": "``, ``#``, quotes or line breaks, none of which may end or change the scalar."""
    out = []
    for char in text:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif 0x20 <= code < 0x7F:
            out.append(char)
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def _compiler() -> dict[str, str]:
    """The compiler cpp_extension uses (``$CXX``, else ``c++``; a ccache it puts in front
    changes no output), resolved, with its version line."""
    command = os.environ.get("CXX", "c++")
    known = _compilers.get(command)
    if known is not None:
        return known
    argv = shlex.split(command) or ["c++"]
    found = shutil.which(argv[0])
    version = "not found"
    if found is not None:
        try:
            done = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=60)
            version = (done.stdout.splitlines() or ["unknown"])[0]
        except (OSError, subprocess.SubprocessError) as error:
            version = f"unknown ({error})"
    result = {"command": command, "path": os.path.realpath(found) if found else argv[0], "version": version}
    _compilers[command] = result
    return result


def _missing_tools() -> str:
    """What compiling needs and this machine lacks, in words; "" when nothing is missing: a C++
    compiler (``$CXX``, else ``c++``), ninja, which cpp_extension drives, and setuptools, which it
    imports."""
    missing = []
    compiler = _compiler()
    if compiler["version"] == "not found":
        missing.append(f"a C++ compiler ({compiler['command']} is not on PATH; set CXX or install g++)")
    if shutil.which("ninja") is None:
        missing.append("ninja (pip install ninja, or the ninja-build package)")
    if importlib.util.find_spec("setuptools") is None:  # torch.utils.cpp_extension imports it
        missing.append("setuptools (pip install setuptools)")
    return " and ".join(missing)


def _ldflags(layout: _Layout) -> list[str]:
    directory = str(layout.runtime.parent)
    return [f"-L{directory}", f"-l{_RUNTIME_LINK_NAME}", f"-Wl,-rpath,{directory}"]


def _sha256(path: Path) -> str:
    """The file's sha256, remembered per (path, inode, size, mtime) for this process."""
    stat = path.stat()
    memo = (str(path), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    digest = _digests.get(memo)
    if digest is None:
        with open(path, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest() if hasattr(hashlib, "file_digest") \
                else hashlib.sha256(f.read()).hexdigest()
        _digests[memo] = digest
    return digest


def _tree_digest(roots: Sequence[Path], pattern: str) -> str:
    """One sha256 over the names and contents of every ``pattern`` file under ``roots``."""
    total = hashlib.sha256()
    for root in roots:
        for file in sorted(root.rglob(pattern)):
            total.update(f"{file.relative_to(root)}\0{_sha256(file)}\n".encode())
    return total.hexdigest()


# ---------------------------------------------------------------------------------------------
# The cache.
#
# Note [the compile cache]
# <cache>/<name>-<key[:16]>/ is one entry: <name>.so, autocast_<name>.cpp and .manifest.json (the
# generator's outputs), build.log, and metadata.json, written last. The key is a sha256 over
# _Request.inputs: the policy's path and bytes and those of each file its `extends:` chain names,
# the schema files (or the dispatcher's schemas of the policy's namespaces), the templates, the
# CLI and runtime binaries, the runtime's headers, torch (version, git hash, C++ ABI, folder),
# Python, the compiler (path and version) and the flags. The policy's path is part of it because
# a relative `extends:` depends on where the file is.
#
# An entry is used only if metadata.json parses, records this key and format, the library has
# the size and sha256 it records, and every input the generator's input list named (the whole
# extends chain, the schemas) still has the sha256 recorded: a truncated or replaced library, a
# missing file, or an input changed in a way the key did not see is a "problem", and the entry is
# built again.
#
# Concurrency: builders of one entry take an exclusive flock on <cache>/<stem>.lock, and the one
# that waited checks again and reuses what the first built. Under the lock the entry is built in
# <cache>/.<stem>.build (a fixed name, so that the compile command, and a ccache key, is the same
# each time the entry is rebuilt), and appears only by rename(2) of that complete folder, so a
# reader sees all of it or nothing. A bad entry is renamed away before the new one takes its name;
# a library is never overwritten in place, so a process that has the old one mapped is unaffected.
# A builder killed half-way leaves .<stem>.build, removed by the next builder of that entry.


def _check_entry(entry: Path, request: _Request) -> tuple[dict[str, Any] | None, str | None]:
    """(metadata, None) for a usable entry, else (None, what is wrong with it): Note [the compile cache]."""
    meta_path = entry / "metadata.json"
    if not entry.is_dir():
        return None, "not compiled yet"
    try:
        metadata = json.loads(meta_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, "metadata.json is missing"
    except (OSError, ValueError, RecursionError) as error:
        return None, f"metadata.json is unreadable ({shown(str(error)[:200])})"
    problem = _metadata_problem(metadata, request)
    if problem is not None:
        return None, f"metadata.json: {problem}"
    library = entry / metadata["library"]
    try:
        if not library.is_file():
            return None, f"{library.name} is missing"
        if library.stat().st_size != metadata["library_size"] or _sha256(library) != metadata["library_sha256"]:
            return None, f"{library.name} does not match the size and sha256 in metadata.json (truncated or replaced)"
        for dependency, digest in metadata["dependencies"].items():
            file = Path(dependency)
            if not file.is_file():
                return None, f"{shown(dependency)} (an input) is missing"
            if _sha256(file) != digest:
                return None, f"{shown(dependency)} (an input) changed since it was compiled"
    except OSError as error:
        return None, f"cannot read it ({shown(str(error))})"
    return metadata, None


# Note [checking the metadata]: metadata.json is read back from a folder anyone with the user's
# rights may have edited, so every field is checked by type before it is used (a wrong type is a
# reason to build the entry again, never an exception at every call), and the files it names must
# be the ones this request builds: a `library` of "../../elsewhere.so" is refused, not loaded.
_METADATA_TYPES: dict[str, tuple[type, ...]] = {
    "format": (int,), "key": (str,), "name": (str,), "library": (str,), "library_size": (int,),
    "library_sha256": (str,), "source": (str,), "dependencies": (dict,), "device": (str,),
    "dispatch_key": (str,), "ops": (dict,), "build_seconds": (int, float),
}
_TYPE_NAMES = {int: "an integer", str: "a string", dict: "an object", float: "a number", list: "an array",
               bool: "a boolean", type(None): "null"}
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")


def _metadata_problem(metadata: Any, request: _Request) -> str | None:
    """What is wrong with an entry's metadata for ``request`` (Note [checking the metadata]), or None."""
    if not isinstance(metadata, dict):
        return f"not an object but {_TYPE_NAMES.get(type(metadata), type(metadata).__name__)}"
    for field, types in _METADATA_TYPES.items():
        if field not in metadata:
            return f"'{field}' is missing"
        value = metadata[field]
        if isinstance(value, bool) or not isinstance(value, types):
            found = _TYPE_NAMES.get(type(value), type(value).__name__)
            return f"'{field}' must be {_TYPE_NAMES[types[0]] if len(types) == 1 else 'a number'}, found {found}"
    if metadata["format"] != _FORMAT or metadata["key"] != request.key:
        return "it records another key"
    expected = {"name": request.name, "library": f"{request.name}.so", "source": f"autocast_{request.name}.cpp"}
    for field, value in expected.items():
        if metadata[field] != value:
            return f"'{field}' must be '{value}', found '{shown(metadata[field][:200])}'"
    if metadata["library_size"] < 0 or not _SHA256.match(metadata["library_sha256"]):
        return "'library_size' or 'library_sha256' is not a size and a sha256"
    if not math.isfinite(metadata["build_seconds"]) or metadata["build_seconds"] < 0:
        return "'build_seconds' must be a number of seconds"
    for what in ("dependencies", "ops"):
        for value in metadata[what].values():
            if not isinstance(value, str):
                return f"'{what}' must map strings to strings, found {_TYPE_NAMES.get(type(value), 'a value')}"
    if not all(os.path.isabs(path) for path in metadata["dependencies"]):
        return "'dependencies' must name files by absolute paths"
    return None


@contextlib.contextmanager
def _file_lock(path: Path, name: str) -> Iterator[None]:
    """An exclusive flock on ``path`` (created if missing, never deleted: deleting races)."""
    with open(path, "a+b") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"autocastgen: waiting for another process compiling policy '{name}' ({shown(str(path))})",
                  file=sys.stderr, flush=True)
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _build(root: Path, entry: Path, request: _Request, problem: str | None, verbose: bool) -> dict[str, Any]:
    """Generates and compiles ``request`` into a private folder, then renames it to ``entry``.
    Called under the entry's lock."""
    missing = _missing_tools()
    if missing:  # the one part of the package that needs build tools (docs/python.md)
        raise CompileError(f"autocastgen.compile_policy: compiling policy '{request.name}' needs {missing}; "
                           "everything else in autocastgen runs without them", None)
    work = root / f".{request.stem}.build"
    shutil.rmtree(work, ignore_errors=True)  # a builder killed half-way
    work.mkdir()
    try:
        log_path = work / "build.log"
        with open(log_path, "wb", buffering=0) as log:
            manifest = _generate(work, request, log, verbose)
            estimate = _estimate(root)
            why = "first use" if problem == "not compiled yet" else f"cache entry {shown(entry.name)}: {problem}"
            print(f"autocastgen: compiling policy '{request.name}' ({shown(request.given)}; {why}), {estimate}...",
                  file=sys.stderr, flush=True)
            with _plain_path(root, work, request.stem) as place:
                seconds = _compile(place, entry, request, log, verbose)
        if seconds is None:
            failed = root / f"{request.stem}.failed"
            shutil.rmtree(failed, ignore_errors=True)
            os.rename(work, failed)
            raise CompileError(_compile_failure(request, failed / "build.log"), failed / "build.log")
        library = work / f"{request.name}.so"
        os.rename(work / "build" / library.name, library)
        shutil.rmtree(work / "build")
        metadata = {
            "format": _FORMAT,
            "key": request.key,
            "name": request.name,
            "library": library.name,
            "library_size": library.stat().st_size,
            "library_sha256": _sha256(library),
            "source": f"autocast_{request.name}.cpp",
            "dependencies": {str(p): _sha256(p) for p in _input_list(work / f"autocast_{request.name}.inputs", work)},
            "device": manifest["device"],
            "dispatch_key": manifest["dispatch_key"],
            "ops": dict(sorted((op["op"], op["policy"]) for op in manifest["ops"])),
            "build_seconds": round(seconds, 3),
            "built_by": {"pid": os.getpid(), "host": socket.gethostname(), "time": time.time()},
            "inputs": request.inputs,
        }
        write_file(work / "metadata.json", json.dumps(metadata, indent=1, sort_keys=True) + "\n", durable=True)
        with contextlib.suppress(WriteError):  # only the next first compile's estimate
            write_file(root / ".last-build-seconds", f"{seconds:.1f}\n")
        if entry.exists():  # a bad entry: out of the way first (rename cannot replace a folder)
            trash = Path(tempfile.mkdtemp(prefix=f".{request.stem}.old-", dir=root))
            os.rename(entry, trash / "entry")
            shutil.rmtree(trash, ignore_errors=True)
        os.rename(work, entry)
        shutil.rmtree(root / f"{request.stem}.failed", ignore_errors=True)  # an earlier attempt's, now stale
        print(f"autocastgen: compiled policy '{request.name}' in {seconds:.0f} s ({shown(str(entry))})",
              file=sys.stderr, flush=True)
        return metadata
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)


def _generate_command(work: Path, request: _Request) -> list[str]:
    """cmake/AutocastgenOps.cmake's generate command line for the same inputs."""
    command = [str(request.layout.cli), "generate", "--target", "torch", "--policy", request.given,
               "--out", str(work), "--name", request.name,
               "--input-list", str(work / f"autocast_{request.name}.inputs"),
               "--torch-version", request.torch_release]
    for schema in request.schema_args:
        command += ["--schemas", schema]
    if request.dispatcher_schemas:
        dispatcher = write_file(work / "dispatcher_schemas.yaml", request.dispatcher_schemas)
        command += ["--schemas", str(dispatcher)]
    return command


def _generate(work: Path, request: _Request, log: IO[bytes], verbose: bool) -> dict[str, Any]:
    """Runs the generator (in the caller's directory, so diagnostics name files as given)."""
    command = _generate_command(work, request)
    done = subprocess.run(command, capture_output=True)
    # Its output names files as given, in bytes: one that is not UTF-8 is shown as \xNN.
    stdout, stderr = (out.decode("utf-8", "backslashreplace") for out in (done.stdout, done.stderr))
    _write(log, f"$ {shlex.join(command)}\n{stdout}{stderr}", verbose)
    if done.returncode == 1:
        raise PolicyError(_without_error_count(stderr), request.given)
    if done.returncode != 0:
        raise RuntimeError(f"autocastgen.compile_policy: {shown(shlex.join(command))} exited "
                           f"{done.returncode}:\n{stderr}")
    manifest: dict[str, Any] = json.loads((work / f"autocast_{request.name}.manifest.json").read_text(encoding="utf-8"))
    return manifest


def _without_error_count(stderr: str) -> str:
    """The generator's diagnostics without their last line, ``N errors generated.``"""
    text = stderr.rstrip("\n")
    head, _, last = text.rpartition("\n")
    return head if _ERROR_COUNT_LINE.fullmatch(last) else text


# Note [building at a plain path]
# cpp_extension writes the paths it is given into a ninja file and ninja hands them to the shell
# unquoted (it escapes spaces in build lines only, and writes the file as UTF-8), so a cache folder
# holding a quote, a backslash, a '$', a ':', a '=' or a byte that is not UTF-8 would break the build or
# change its command. So when the build folder's path holds anything but [A-Za-z0-9_./+,@%-], the
# compile runs through a symbolic link with a plain name, <tmp>/autocastgen-<uid>/<hash of the
# cache folder>-<entry>, made for the build and removed after it: cpp_extension sees only that
# path, and the files land in the cache's own folder. The name is fixed per entry, so a rebuild's
# command, hence ccache's key, is the same. The link's folder is the user's alone (0700, checked).
@contextlib.contextmanager
def _plain_path(root: Path, work: Path, stem: str) -> Iterator[Path]:
    if _PLAIN_PATH.match(os.fspath(work)):
        yield work
        return
    link = _link_folder() / f"{hashlib.sha256(os.fsencode(root)).hexdigest()[:16]}-{stem}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(link)  # left by a builder killed half-way (the entry's lock is held)
    os.symlink(work, link)
    try:
        yield link
    finally:
        with contextlib.suppress(OSError):
            os.unlink(link)


def _link_folder() -> Path:
    """A folder with a plain path that only this user can write (Note [building at a plain path])."""
    for base in dict.fromkeys((tempfile.gettempdir(), "/tmp")):
        if not _PLAIN_PATH.match(base):
            continue
        folder = Path(base) / f"autocastgen-{os.getuid()}"
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
        info = os.lstat(folder)
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077:
            return folder
    raise RuntimeError("autocastgen.compile_policy: the cache folder's path holds characters the compiler's build "
                       "files cannot, and there is no private folder with a plain path to build through "
                       f"(<tmp>/autocastgen-{os.getuid()}, owned by this user, mode 0700): set TMPDIR or "
                       f"{CACHE_VARIABLE} to a plain path")


def _ninja_shell_word(text: str) -> str:
    """``text`` as one shell word inside a ninja variable (cpp_extension writes flags unquoted)."""
    return shlex.quote(text).replace("$", "$$")


def _compile(place: Path, entry: Path, request: _Request, log: IO[bytes], verbose: bool) -> float | None:
    """Builds the generated file in a child process; seconds taken, or None if it failed. ``place``
    is the build folder, or a link to it with a plain path (Note [building at a plain path])."""
    # __FILE__ (the dispatcher's "registered at" of each kernel) names the source where it will be
    # (as a terminal would show it: a name that is not UTF-8 cannot be a C string here).
    cflags = [*_CFLAGS, _ninja_shell_word(f"-ffile-prefix-map={place}={shown(os.fspath(entry))}")]
    spec = {"name": request.name, "source": str(place / f"autocast_{request.name}.cpp"),
            "build_dir": str(place / "build"), "cflags": cflags,
            "ldflags": [_ninja_shell_word(flag) for flag in _ldflags(request.layout)],  # a runtime path with a space
            "include_dirs": [str(p) for p in request.layout.include_dirs]}
    (place / "build").mkdir()
    write_file(place / "build.json", json.dumps(spec, indent=1) + "\n")
    command = [sys.executable, str(PACKAGE / "_build_library.py"), str(place / "build.json")]
    _write(log, f"$ {shlex.join(command)}\n", verbose)
    # No ccache base_dir: it would hand the compiler a relative source path, which the prefix map
    # above does not match. Hits need none: the build folder, so the command, is the same each time.
    env = {**os.environ, "CCACHE_BASEDIR": ""}
    start = time.monotonic()
    with subprocess.Popen(command, cwd=place, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="backslashreplace") as child:
        assert child.stdout is not None
        for line in child.stdout:
            _write(log, line, verbose)
    _write(log, f"(exit {child.returncode})\n", verbose)
    return time.monotonic() - start if child.returncode == 0 else None


def _write(log: IO[bytes], text: str, verbose: bool) -> None:
    """Appends ``text`` to the build log (unbuffered: a full disk is an error naming the log, here
    and not at close), and to stderr when ``verbose``. Paths that are not UTF-8 keep their bytes."""
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        data = text.encode("utf-8", "backslashreplace")
    view = memoryview(data)
    try:
        while view:
            view = view[log.write(view):]
    except OSError as error:
        raise OSError(error.errno, error.strerror, log.name) from None
    if verbose:
        sys.stderr.write(text)
        sys.stderr.flush()


def _compile_failure(request: _Request, log: Path) -> str:
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    errors = [line for line in lines if _ERROR_LINE.search(line)][:12]
    listed = "\n".join(f"  {shown(line)}" for line in errors) or "  (no error lines; see the log)"
    return (f"autocastgen.compile_policy: compiling policy '{request.name}' ({shown(request.given)}) failed:\n"
            f"{listed}\nThe whole output is in {shown(str(log))} (with the generated source beside it).")


def _estimate(root: Path) -> str:
    """The last compile's time on this machine; before the first one there is nothing to go by."""
    try:
        return f"~{float((root / '.last-build-seconds').read_text()):.0f} s (the last compile here)"
    except (OSError, ValueError):
        return "the first compile on this machine (time not known yet)"


def _input_list(path: Path, work: Path) -> list[Path]:
    """The input files the generator read (its ``--input-list``: absolute paths, each ended by a NUL
    byte, so any file name), outside ``work``, in its order. Not its depfile: Make's syntax cannot
    name a file whose name holds a line break."""
    found: list[Path] = []
    inside = work.resolve()
    for name in path.read_bytes().split(b"\0")[:-1]:
        file = Path(os.fsdecode(name)).resolve()
        if inside not in file.parents and file not in found:
            found.append(file)
    return found


def _load(entry: Path, metadata: dict[str, Any], compiled: bool) -> CompiledPolicy:
    library = entry / metadata["library"]
    torch.ops.load_library(str(library))
    handle = CompiledPolicy(
        name=metadata["name"], library=library, source=entry / metadata["source"], ops=dict(metadata["ops"]),
        device=metadata["device"], dispatch_key=metadata["dispatch_key"], key=metadata["key"], entry=entry,
        compiled=compiled, build_seconds=float(metadata["build_seconds"]))
    _loaded[handle.key] = handle
    return handle
