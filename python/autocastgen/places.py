"""Precision by place: ``attach(model)`` tells autocastgen which module is running.

A policy may scope rules to modules (docs/policy-language.md, "Precision by place"): an entry's
``modules: [...]`` and the ``modules:`` section. The runtime decides by the running module's path
(``autocastgen/runtime/modules.h``); ``attach`` gives it that path from forward hooks, named as
``model.named_modules()`` names them (the root is ``""``). Statistics, the watch and the range
record then name the module too (docs/insight.md).

Note [the fp32 section's inputs]
Inside a module whose section is ``fp32`` autocast is off, so an op there runs in the dtype its
inputs come in; a module after a lower-precision one would get float16 activations. The pre-hook
therefore casts the module's floating tensor arguments (not float64) to float32, as users did by
hand around ``torch.autocast(enabled=False)``, but only while autocast is on for their device
(PyTorch's or autocastgen's state): sections change nothing while autocast is off.

Note [modules under torch.compile]
Dynamo inlines the hooks. Inside a compiled function a module's frame is entered and left by
``traced.enter_module`` / ``exit_module`` (allow_in_graph, like the own state's scopes: Note
[scopes under torch.compile] in traced.py), so the frame is in effect while the graph is traced
and the wrappers bake the module's rules into it; the section is read as a guarded constant. The
graph's guard includes the module rules' generation (Note [trace key]), so loading or dropping
rules traces again. A module's call must lie within one graph (compile with fullgraph=True).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from ._core import traced
from ._core.runtime import load_runtime
from ._core.terminal import shown


def _ops() -> Any:
    load_runtime()
    return torch.ops.autocastgen


def current_module() -> str | None:
    """The path of the innermost attached module running on this thread, None outside all."""
    value = _ops().module_current()
    return None if value is None else str(value)


def glob_matches(pattern: str, path: str) -> bool:
    """Whether a ``modules:`` pattern matches a module path (``*``: any characters, dots too)."""
    return bool(_ops().module_glob_matches(pattern, path))


def registered_patterns() -> list[tuple[str, str, str]]:
    """The module patterns of the rules loaded now: ``(pattern, where, "section" | "entry")``."""
    patterns, wheres, kinds = _ops().module_patterns()  # three lists: no separator a name could hold
    return [(str(p), str(w), str(k)) for p, w, k in zip(patterns, wheres, kinds)]


class _HookOps:
    """The two ops a hook calls, bound once: ``torch.ops`` lookups and ``load_runtime``'s lock on
    every module call cost about as much as the ops themselves (bench/README.md, "Precision by
    place")."""

    def __init__(self) -> None:
        ops = _ops()
        self.enter_section = ops.module_enter_section.default
        self.leave = ops.module_leave.default


_hook_ops: _HookOps | None = None


def _bound() -> _HookOps:
    global _hook_ops
    if _hook_ops is None:
        _hook_ops = _HookOps()
    return _hook_ops


def _device_type(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value.device.type
    return ""


def _autocast_on(device_type: str) -> bool:
    if torch.is_autocast_enabled(device_type):
        return True
    return bool(_ops().autocast_is_enabled(device_type))


def _to_fp32(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float64:
        return value.float()
    if isinstance(value, (list, tuple)):
        return type(value)(_to_fp32(v) for v in value)
    return value


class Attachment:
    """What :func:`attach` returns: ``remove()`` ends it; also a context manager."""

    def __init__(self, model: torch.nn.Module, strict: bool) -> None:
        self.model = model
        self.paths = [name for name, _ in model.named_modules()]
        self._handles: list[Any] = []
        self._check_patterns(strict)
        for path, module in model.named_modules():
            self._handles.append(module.register_forward_pre_hook(self._pre_hook(path), with_kwargs=True))
            self._handles.append(module.register_forward_hook(_post_hook, always_call=True))

    def _check_patterns(self, strict: bool) -> None:
        for pattern, where, kind in registered_patterns():
            if any(glob_matches(pattern, path) for path in self.paths):
                continue
            what = "modules: section" if kind == "section" else "entry's modules:"
            message = (f"autocastgen.attach: the {what} pattern {pattern!r} ({shown(where)}) matches no module of the "
                       f"attached {type(self.model).__name__} (paths as named_modules() spells them, e.g. "
                       f"{', '.join(repr(p) for p in self.paths[1:4]) or repr('')})")
            if strict:
                raise ValueError(message)
            warnings.warn(message, stacklevel=3)

    @staticmethod
    def _pre_hook(path: str) -> Any:
        enter_section = _bound().enter_section

        def hook(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            device_type = _device_type(args, kwargs)
            if torch.compiler.is_compiling():
                traced.prepare()
                traced.enter_module(path)
                section = traced.read("module_section", device_type) if device_type else ""
            else:
                section = enter_section(path, device_type)
            if section == "fp32" and _autocast_on(device_type):  # Note [the fp32 section's inputs]
                return _to_fp32(args), {k: _to_fp32(v) for k, v in kwargs.items()}
            return None

        return hook

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def __enter__(self) -> Attachment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def _post_hook(module: torch.nn.Module, args: Any, output: Any) -> None:
    if torch.compiler.is_compiling():
        traced.exit_module()
    else:
        _bound().leave()


def attach(model: torch.nn.Module, *, strict: bool = False) -> Attachment:
    """Names every submodule of ``model`` by its path and tracks the running one while it runs.

    Module-scoped rules (an entry's ``modules:``, the ``modules:`` section) apply by that path;
    statistics, the watch and the range record name it. A loaded pattern that matches no module of
    ``model`` is a warning naming the pattern and where the policy wrote it (``strict=True``: a
    ``ValueError``). ``handle.remove()`` (or leaving ``with attach(model):``) ends it.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"autocastgen.attach: expected a torch.nn.Module, got {type(model).__name__}")
    return Attachment(model, strict)


class ModuleScope:
    """The running module by hand (code outside ``nn.Module`` calls): ``with ModuleScope("layers.0"):``
    enters the same frame a hook would (Python face of C++'s ``autocastgen::ModuleScope``)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> ModuleScope:
        self._depth = int(_ops().module_enter(self.path))
        return self

    def __exit__(self, *exc: object) -> None:
        _ops().module_exit(self._depth)
