"""Finding and loading libautocastgen_runtime_torch.so, whose torch ops this package calls."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import torch

from .paths import BUILD_LIB, LIB, PACKAGE, build_info

LIBRARY_NAME = "libautocastgen_runtime_torch.so"
ENVIRONMENT_VARIABLE = "AUTOCASTGEN_RUNTIME_TORCH_LIB"

_lock = threading.Lock()
_loaded_from: str | None = None


def _candidates() -> list[Path]:
    """Where the library may be, in the order tried."""
    found = []
    override = os.environ.get(ENVIRONMENT_VARIABLE)
    if override:
        found.append(Path(override))
    found.append(LIB / LIBRARY_NAME)  # the pip package (Note [the pip package's layout])
    found.append(PACKAGE / LIBRARY_NAME)  # a package that carries its own copy
    found.append(BUILD_LIB / LIBRARY_NAME)  # the build tree: build/python/autocastgen -> build/lib
    return found


def _check_torch_release() -> None:
    """A pip-installed package runs only with the torch release it was built against."""
    info = build_info()  # written by CMake into the pip package only
    if info is None:
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
                return _loaded_from
        listed = "\n  ".join(str(p) for p in tried)
        raise ImportError(
            f"autocastgen: {LIBRARY_NAME} not found; tried:\n  {listed}\n"
            f"Build it (cmake --build --preset default) or set {ENVIRONMENT_VARIABLE}."
        )
