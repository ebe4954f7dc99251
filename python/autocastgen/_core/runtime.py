"""Finding and loading libautocastgen_runtime_torch.so, whose torch ops this package calls, its CUDA
part where torch has CUDA, and ``autocastgen._C``.

Note [one runtime per release]
The wheel (scripts/wheel) holds a runtime for each supported torch minor release, in
``_runtime/torch-X.Y/`` beside the modules (Note [the wheel's parts] in
cmake/AutocastgenInstall.cmake): the one of the imported torch's release is loaded, and a release
the wheel has none for is an ImportError naming both, raised before any library is loaded (so never
an undefined symbol). A build tree or a package built from source holds the one runtime it was
built for, in ``lib/``.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import json
import os
import sys
import threading
from pathlib import Path
from types import ModuleType

import torch

from .paths import BUILD_LIB, LIB, PACKAGE, RUNTIMES, build_info

LIBRARY_NAME = "libautocastgen_runtime_torch.so"
CUDA_LIBRARY_NAME = "libautocastgen_runtime_torch_cuda.so"
ENVIRONMENT_VARIABLE = "AUTOCASTGEN_RUNTIME_TORCH_LIB"

_lock = threading.Lock()
_loaded_from: str | None = None
_cuda_part: str | None = None  # where the CUDA part came from, or why it is not loaded


def torch_minor(version: str = torch.__version__) -> str:
    """``"2.11"`` for ``"2.11.0+cu130"``."""
    return ".".join(version.split("+")[0].split(".")[:2])


@functools.cache  # the package's files do not change under a running process
def _releases_held() -> tuple[str, ...]:
    """The torch minor releases the wheel has runtimes for, oldest first; () outside a wheel."""
    if not RUNTIMES.is_dir():
        return ()
    held = [p.name[len("torch-"):] for p in RUNTIMES.glob("torch-*") if (p / LIBRARY_NAME).is_file()]
    return tuple(sorted(held, key=lambda minor: tuple(int(part) for part in minor.split("."))))


def release_folder() -> Path | None:
    """The wheel's runtime folder for the imported torch (Note [one runtime per release]); None
    outside a wheel. Raises ImportError where the wheel has none for this torch."""
    held = _releases_held()
    if not held:
        return None
    folder = RUNTIMES / f"torch-{torch_minor()}"
    if not (folder / LIBRARY_NAME).is_file():
        info = build_info()
        version = info.VERSION if info is not None else "?"
        raise ImportError(
            f"autocastgen {version} has runtimes for torch {held[0]} to {held[-1]} ({', '.join(held)}), "
            f"but torch {torch.__version__} is installed: install a torch of that range, or build autocastgen "
            "from source against this torch (docs/python.md, \"From a clone\")"
        )
    return folder


def release_build_info() -> dict[str, object] | None:
    """What the wheel's runtime for this torch was built against (its build_info.json): the torch
    release, its CUDA version, whether the CUDA part is there, the string ABI. None outside a wheel."""
    folder = release_folder()
    if folder is None:
        return None
    loaded: dict[str, object] = json.loads((folder / "build_info.json").read_text(encoding="utf-8"))
    return loaded


def python_extension() -> ModuleType | None:
    """``autocastgen._C`` (Note [unscale from Python] in python/src/autocastgen_C.cpp): the wheel's
    for this torch's release, or the one beside the modules; None where it was not built."""
    folder = release_folder()
    if folder is None:
        try:
            from .. import _C  # type: ignore[attr-defined]
        except ImportError:
            return None
        return _C  # type: ignore[no-any-return]
    name = f"{__package__.rsplit('.', 1)[0]}._C"
    if name in sys.modules:
        return sys.modules[name]
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = folder / f"_C{suffix}"
        if path.is_file():
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                return None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[name] = module
            return module
    return None  # not built, or a free-threaded CPython (no abi3): the op is called through torch.ops instead


def _candidates() -> list[Path]:
    """Where the library may be, in the order tried."""
    found = []
    override = os.environ.get(ENVIRONMENT_VARIABLE)
    if override:
        found.append(Path(override))
    folder = release_folder()
    if folder is not None:  # the wheel (Note [one runtime per release])
        found.append(folder / LIBRARY_NAME)
    found.append(LIB / LIBRARY_NAME)  # the pip package built from source (Note [the pip package's layout])
    found.append(PACKAGE / LIBRARY_NAME)  # a package that carries its own copy
    found.append(BUILD_LIB / LIBRARY_NAME)  # the build tree: build/python/autocastgen -> build/lib
    return found


def _check_torch_release() -> None:
    """A pip package built from source runs only with the torch release it was built against."""
    info = build_info()  # written by CMake into the pip package only
    if info is None or not info.TORCH_VERSION:  # the wheel: one runtime per release
        return
    built = info.TORCH_VERSION.split("+")[0].split(".")[:2]
    running = torch.__version__.split("+")[0].split(".")[:2]
    if built != running:
        raise ImportError(
            f"autocastgen: this package was built against torch {info.TORCH_VERSION} but torch "
            f"{torch.__version__} is imported; reinstall autocastgen with this torch "
            "(pip install --no-build-isolation --force-reinstall <clone>)"
        )


def _ops_registered() -> bool:
    """Whether a copy of the runtime is loaded already (by us, or linked into a backend library)."""
    try:
        torch.ops.autocastgen.autocast_enter  # noqa: B018 - the lookup is the test
    except (AttributeError, RuntimeError):
        return False
    return True


def load_runtime() -> str:
    """Loads the runtime library once per process and returns where its ops came from.

    If the ops are registered already (a backend library linked the runtime and was loaded
    first), nothing is loaded: a second copy of the library would register the `autocastgen`
    namespace twice, which PyTorch refuses. Otherwise the library is taken from
    ``$AUTOCASTGEN_RUNTIME_TORCH_LIB``, from this package's folder, or from ``lib/`` of the build
    tree this package was copied into, in that order.
    """
    global _loaded_from
    with _lock:
        if _loaded_from is not None:
            return _loaded_from
        if _ops_registered():
            _loaded_from = "already loaded"
            brought = _mapped_runtime()  # by a backend library: its CUDA part is beside it
            if brought is not None:
                _load_cuda_part(brought.parent)
            return _loaded_from
        _check_torch_release()
        tried = _candidates()
        for path in tried:
            if path.is_file():
                torch.ops.load_library(str(path))
                if not _ops_registered():
                    raise ImportError(
                        f"autocastgen: {path} loaded but registers no torch.ops.autocastgen.autocast_enter; "
                        "it is older than this Python package"
                    )
                _loaded_from = str(path)
                _load_cuda_part(path.parent)
                return _loaded_from
        listed = "\n  ".join(str(p) for p in tried)
        raise ImportError(
            f"autocastgen: {LIBRARY_NAME} not found; tried:\n  {listed}\n"
            f"Build it (cmake --build --preset default) or set {ENVIRONMENT_VARIABLE}."
        )


def _mapped_runtime() -> Path | None:
    """The runtime library this process has mapped (a backend library's dependency), from
    /proc/self/maps; None where that cannot be read."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                if line.rstrip().endswith("/" + LIBRARY_NAME):
                    return Path(line.split(None, 5)[5].strip())
    except OSError:
        pass
    return None


def _cuda_kernels_registered() -> bool:
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key("autocastgen::update_scale_", "CUDA"))


def _load_cuda_part(folder: Path) -> None:
    """Loads the runtime's CUDA part from beside the runtime where torch has CUDA (Note [the CUDA part
    of the runtime] in runtime/CMakeLists.txt); a CPU-only torch never loads a CUDA library."""
    global _cuda_part
    path = folder / CUDA_LIBRARY_NAME
    if torch.version.cuda is None:
        _cuda_part = "not loaded: this torch has no CUDA"
    elif _cuda_kernels_registered():
        _cuda_part = "already loaded"
    elif not path.is_file():
        built_for = release_build_info()
        _cuda_part = (
            f"not built: no CUDA {built_for['cuda']} toolkit where this wheel was built (docs/python.md)"
            if built_for is not None
            else "not built (no CUDA toolkit at build time)"
        )
    else:
        torch.ops.load_library(str(path))
        _cuda_part = str(path)


def cuda_part() -> str | None:
    """Where the runtime's CUDA part was loaded from, or why it was not; None before loading."""
    return _cuda_part


# Note [PyTorch's kernels where ours cannot run]
# Our CUDA kernels can be missing for a CUDA tensor: the CUDA part was not built (a torch built
# with a CUDA no toolkit here had) or not loaded (a custom torch build), or it has no code for the
# GPU (the wheel's parts start at sm_70, Note [parameter blocks]: torch 2.4-2.7 run on Maxwell and
# Pascal too). A dispatch error there would break training that torch.amp.GradScaler runs, so the
# GradScaler runs PyTorch's own scaler kernels on such a device instead, which give the same results
# (the ops' contract: torch.amp.GradScaler's bits), and says so once.
@functools.cache
def cuda_kernels_missing(device_index: int) -> str | None:
    """Why autocastgen's CUDA scaler kernels cannot run on the GPU ``device_index``, or None where they can."""
    load_runtime()
    if not _cuda_kernels_registered():
        return f"autocastgen's CUDA part is {cuda_part() or 'not loaded'}"
    built = release_build_info()
    oldest = built.get("oldest_cuda_arch") if built is not None else None
    major, minor = torch.cuda.get_device_capability(device_index)
    if isinstance(oldest, int) and major * 10 + minor < oldest:
        return f"autocastgen's CUDA part has code for sm_{oldest} and newer, and this GPU is sm_{major}{minor}"
    return None


def describe() -> str:
    """One line on the runtime in use, for ``python -m autocastgen --version``."""
    info = build_info()
    version = info.VERSION if info is not None else "(built in a build tree)"
    loaded = load_runtime()
    extension = python_extension()
    python = f"CPython {sys.version_info.major}.{sys.version_info.minor}"
    entry = f"{extension.__file__} ({python})" if extension is not None else "none (the unscale goes through torch.ops)"
    return (
        f"autocastgen {version}; torch {torch.__version__}; runtime {loaded}; CUDA part: {cuda_part() or 'none'}; "
        f"_C: {entry}"
    )
