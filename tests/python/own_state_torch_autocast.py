"""pytest plugin: runs PyTorch's own autocast tests with libautocastgen_torch_cpu_own_state.so.

That library's AutocastCPU kernels read autocastgen's state, not PyTorch's, so torch.autocast
alone turns nothing on. This plugin loads the library and makes every torch.autocast block
(torch.amp.autocast, torch.autocast, torch.cpu.amp.autocast: one class) also open an
autocastgen.autocast scope with the same device, dtype, enabled and cache flags, closed when the
block closes. PyTorch's own state is still set, so the tests' torch.is_autocast_enabled() checks
hold, but it moves no op: the casts come from autocastgen's scope.

    PYTHONPATH=build/python:tests/python python3 -m pytest -p own_state_torch_autocast test_autocast.py

Environment: AUTOCASTGEN_OWN_STATE_LIB (default build/lib/libautocastgen_torch_cpu_own_state.so);
the autocastgen package finds the runtime library itself (docs/runtime.md).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.amp.autocast_mode

import autocastgen

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = Path(os.environ.get("AUTOCASTGEN_OWN_STATE_LIB", ROOT / "build" / "lib" / "libautocastgen_torch_cpu_own_state.so"))

torch.ops.load_library(str(LIBRARY))

_torch_enter = torch.amp.autocast_mode.autocast.__enter__
_torch_exit = torch.amp.autocast_mode.autocast.__exit__


def _enter(self: torch.amp.autocast_mode.autocast):  # noqa: ANN202 - returns what PyTorch's returns
    result = _torch_enter(self)
    if self.device == "cpu":
        # The arguments as PyTorch resolved them (an unsupported dtype has already disabled it).
        scope = autocastgen.autocast("cpu", dtype=self.fast_dtype, enabled=self._enabled,
                                     cache_enabled=self._cache_enabled)
        scope.__enter__()
        self._autocastgen_scopes = [*getattr(self, "_autocastgen_scopes", []), scope]
    return result


def _exit(self: torch.amp.autocast_mode.autocast, exc_type, exc, traceback):  # noqa: ANN001, ANN202
    scopes = getattr(self, "_autocastgen_scopes", [])
    if self.device == "cpu" and scopes:
        scopes.pop().__exit__(exc_type, exc, traceback)
    return _torch_exit(self, exc_type, exc, traceback)


torch.amp.autocast_mode.autocast.__enter__ = _enter
torch.amp.autocast_mode.autocast.__exit__ = _exit
