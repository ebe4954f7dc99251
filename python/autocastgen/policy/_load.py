"""Runtime policies from Python: load_policy, register_runtime_policy, clear_runtime_policies.

Thin, checked wrappers over the runtime's torch ops (runtime/torch/policies/runtime_policy.cpp): one boxed
kernel per (op, autocast key) runs any of the six policies, for aten ops and for ops defined at
run time with torch.library. Nothing is compiled; a policy applies as soon as the call returns.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from .._core.paths import SHARE, build_tree
from .._core.runtime import load_runtime
from .._core.terminal import shown

# The first line of the runtime's error for a policy file; the rest is the CLI's diagnostics.
_FILE_ERROR_HEADER = re.compile(r"\Aautocastgen: the runtime policy (?P<path>[^\n]*?) has errors:\n")



def shipped_policy(device: str) -> Path:
    """The policy autocastgen ships for ``device`` (``cpu``, ``cuda``, ``generic``): the one PyTorch
    registers on that device's autocast key, as a file to pass to ``compile_policy``, ``load_policy``,
    ``advise`` or the CLI. From the pip package's ``share/autocastgen/policies/``, or the build tree's
    source. ``compile_policy(shipped_policy("cpu"))`` gives a pip user what a CMake build's
    ``build/lib/libautocastgen_torch_cpu.so`` is."""
    folders = [SHARE / "policies"]
    tree = build_tree()
    if tree is not None and hasattr(tree, "POLICIES_DIR"):
        folders.append(Path(tree.POLICIES_DIR))
    for folder in folders:
        if (folder / f"{device}.yaml").is_file():
            return folder / f"{device}.yaml"
    have = sorted({p.stem for folder in folders if folder.is_dir() for p in folder.glob("*.yaml")})
    raise ValueError(f"autocastgen ships no policy for device '{device}' (it ships: {', '.join(have) or 'none found'})")


class PolicyError(RuntimeError):
    """A policy autocastgen refused; nothing was registered.

    ``str(error)`` (and ``error.diagnostics``) is what ``autocastgen check --policy`` prints for
    the same policy, without its ``N errors generated.`` line: ``file:line:col: error: ...``
    lines with the source line and a caret for a file or YAML text, ``error: ...`` lines for a
    ``register_runtime_policy`` call (which has no file). ``error.source`` names the policy: its
    path, the ``name`` given to ``load_policy`` for text, or the call.
    """

    def __init__(self, diagnostics: str, source: str) -> None:
        super().__init__(diagnostics)
        self.diagnostics = diagnostics
        self.source = source


def _ops() -> Any:  # torch.ops.autocastgen: ops the runtime registers, which no stub declares
    load_runtime()
    return torch.ops.autocastgen


def _is_text(source: str | os.PathLike[str]) -> bool:
    """YAML text is a ``str`` with a line break; any other ``str``, and any path object, is a path."""
    if isinstance(source, os.PathLike):
        return False
    if isinstance(source, str):
        return "\n" in source
    raise TypeError(
        f"autocastgen.load_policy: needs a path (str or os.PathLike) or YAML text (str), not {type(source).__name__}"
    )


def load_policy(
    path_or_yaml_text: str | os.PathLike[str],
    schemas: str | os.PathLike[str] | None = None,
    *,
    name: str = "<string>",
) -> int:
    """Applies a policy file at run time through the runtime-policy kernels; returns the entries registered.

    ``path_or_yaml_text`` is a policy in the language of docs/policy-language.md, either a path
    (a ``pathlib.Path`` or other ``os.PathLike``, or a ``str`` without a line break) or YAML text
    (a ``str`` with at least one line break; end a one-line policy with ``"\\n"``). The policy
    is resolved, as ``autocastgen check`` resolves it, against the ops registered with PyTorch's
    dispatcher now, so define custom ops (``torch.library``) first. Every entry then takes over
    its op's autocast key for the policy's device (replacing a generated wrapper, PyTorch's
    kernel or an earlier runtime policy, with a warning once per op and key). All or nothing:
    on any error nothing is registered.

    ``extends:`` in a file is relative to that file; in YAML text, a relative ``extends:`` is
    relative to the current working directory. Diagnostics for text name the file ``name``. The
    text and every file of its ``extends:`` chain are read by the runtime with the CLI's reader.

    Args:
        path_or_yaml_text: the policy file's path, or its text.
        schemas: not supported: runtime policies apply to ops the dispatcher has, with the schemas
            it has. Passing one raises ``NotImplementedError`` (``compile_policy`` takes schemas).
        name: the file name diagnostics give YAML text (default ``<string>``).

    Raises:
        PolicyError: the policy has errors (text: the CLI's ``file:line:col: error:``
            diagnostics), or the file cannot be read.
        NotImplementedError: ``schemas`` was given.
        TypeError: ``path_or_yaml_text`` is neither a path nor text.
    """
    if schemas is not None:
        raise NotImplementedError(
            "autocastgen.load_policy: schemas= is not supported: a runtime policy resolves against the ops "
            "registered with PyTorch's dispatcher when it is loaded (define custom ops with torch.library "
            "first), and its kernels can only be registered for those ops"
        )
    if not isinstance(name, str) or not name or "\n" in name:
        raise ValueError(f"autocastgen.load_policy: name must be a one-line, non-empty str, not {name!r}")
    ops = _ops()
    if not _is_text(path_or_yaml_text):
        path = os.fsdecode(path_or_yaml_text)
        if _is_utf8(path):
            return _load_file(ops, path, path, {})
        return _load_through_link(ops, path)
    text = path_or_yaml_text
    assert isinstance(text, str)  # _is_text
    text.encode("utf-8")  # UnicodeEncodeError for a str that is not text (surrogates), as a file write gives
    try:
        folder = os.getcwd()
    except OSError:  # the working directory was removed: a relative extends: is then a located error
        folder = ""
    if _is_utf8(folder):
        return _load_text(ops, text, name, folder, {})
    # The runtime's op takes text: a relative extends: is read through a link to the folder.
    with tempfile.TemporaryDirectory(prefix="autocastgen-policy-") as directory:
        link = os.path.join(directory, "folder")
        os.symlink(folder, link)
        return _load_text(ops, text, name, link, {link: shown(folder)})


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # bytes that were not UTF-8 in a file name (surrogateescape)
        return False
    return True


def _load_through_link(ops: Any, path: str) -> int:
    """Loads a policy whose folder's path is not UTF-8 (the runtime's op takes text): through a
    symbolic link to the folder in a private one, so that a relative ``extends:`` still resolves
    there; diagnostics name the folder as a terminal shows it (``\\xff``)."""
    folder, file_name = os.path.split(os.path.abspath(path))
    if not _is_utf8(file_name):
        raise PolicyError(f"autocastgen: error: cannot load policy '{shown(path)}': its file name is not UTF-8 (the "
                          "runtime takes UTF-8 paths; the folder may be anything): rename it, or use compile_policy",
                          path)
    with tempfile.TemporaryDirectory(prefix="autocastgen-policy-") as directory:
        link = os.path.join(directory, "folder")
        os.symlink(folder, link)
        return _load_file(ops, os.path.join(link, file_name), shown(path), {link: shown(folder)})


def _load_file(ops: Any, path: str, source: str, renames: dict[str, str]) -> int:
    # A file reached through a link: the places it registers keep `source` as its name.
    return _policy_errors(lambda: ops.load_runtime_policy_file(path, source if renames else ""), source, renames)


def _load_text(ops: Any, text: str, name: str, folder: str, renames: dict[str, str]) -> int:
    """Loads YAML text through the runtime's reader: diagnostics call it ``name``, and its own relative
    ``extends:`` is read from ``folder`` (load_runtime_policy_text in runtime/torch/policies/runtime_policy.cpp)."""
    return _policy_errors(lambda: ops.load_runtime_policy_text(text, name, folder), name, renames)


def _policy_errors(load: Callable[[], int], source: str, renames: dict[str, str]) -> int:
    """``load()``'s count; the runtime's error for a policy as a PolicyError naming ``source``, with
    the paths in ``renames`` (a link the runtime read through) named as the user knows them."""
    try:
        return int(load())
    except RuntimeError as error:
        message = str(error)
        header = _FILE_ERROR_HEADER.match(message)
        if header is None:
            raise
        diagnostics = message[header.end() :]
        for old, new in renames.items():
            diagnostics = diagnostics.replace(old, new)
        raise PolicyError(diagnostics.rstrip("\n"), source) from None


def _rule_value(value: object) -> object:
    """A condition value as the policy language writes it (JSON has no infinities)."""
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if isinstance(value, (list, tuple)):
        return [_rule_value(v) for v in value]
    return value


def _rule_text(dtypes: Sequence[str | torch.dtype] | str | torch.dtype | None, when: Mapping[str, object] | None,
               unless: Mapping[str, object] | None, args: Mapping[str, str] | None,
               modules: Sequence[str] | str | None = None) -> str:
    """The rule keyword arguments as the YAML flow mapping the runtime reads ('' when none)."""
    rule: dict[str, object] = {}
    if dtypes is not None:
        rule["dtypes"] = [_rule_value(d) for d in ([dtypes] if isinstance(dtypes, (str, torch.dtype)) else dtypes)]
    if modules is not None:
        rule["modules"] = [modules] if isinstance(modules, str) else list(modules)
    for key, mapping in (("when", when), ("unless", unless), ("args", args)):
        if mapping is None:
            continue
        if not isinstance(mapping, dict):
            raise TypeError(f"autocastgen.register_runtime_policy: {key} must be a dict, not {type(mapping).__name__}")
        rule[key] = {str(name): _rule_value(value) for name, value in mapping.items()}
    return json.dumps(rule) if rule else ""


def register_runtime_policy(
    op: str,
    policy: str,
    device: str = "cpu",
    message: str | None = None,
    *,
    dtypes: Sequence[str | torch.dtype] | str | torch.dtype | None = None,
    when: Mapping[str, object] | None = None,
    unless: Mapping[str, object] | None = None,
    args: Mapping[str, str] | None = None,
    modules: Sequence[str] | str | None = None,
) -> None:
    """Gives one op a policy on one device's autocast key, at once.

    Args:
        op: ``ns::name``, ``ns::name.overload`` or ``ns::name.*`` (a bare name means aten), as in
            a policy file's lists.
        policy: ``lower_precision_fp``, ``fp32``, ``promote``, ``fp32_set_opt_dtype``,
            ``fp32_append_dtype`` or ``banned``.
        device: the autocast device type (``cpu``, ``cuda``, ...).
        message: the error text of ``banned`` (required for it, refused for the others).
        dtypes, when, unless, args: the entry's precision rule, as a policy file's entry writes
            them (docs/policy-language.md, "Precision rules"): e.g. ``dtypes=["float16"]``,
            ``unless={"reduction": "none"}``, ``when={"exponent": [1, 2]}``,
            ``args={"weight": "fp32", "running_mean": "keep"}``. Floats may be ``math.inf``.
            An op given several rules needs a policy file (``load_policy``): one call replaces
            the op's policy with this one entry.
        modules: module path patterns (precision by place, docs/policy-language.md): the entry
            applies only inside matching modules of a model given to ``autocastgen.attach``;
            elsewhere the op runs untouched, as a call no rule matches.

    The kernel follows ``torch.autocast`` (PyTorch's state) unless an ``autocastgen.autocast``
    scope is open for the device. Replaces what the key had (warning once per op and key).

    Raises:
        PolicyError: the CLI's ``error:`` lines for the same entry in a policy file; nothing was
            registered.
    """
    for label, value in (("op", op), ("policy", policy), ("device", device)):
        if not isinstance(value, str):
            raise TypeError(f"autocastgen.register_runtime_policy: {label} must be a str, not {type(value).__name__}")
    if message is not None and not isinstance(message, str):
        raise TypeError(f"autocastgen.register_runtime_policy: message must be a str, not {type(message).__name__}")
    rule = _rule_text(dtypes, when, unless, args, modules)
    ops = _ops()
    try:
        ops.register_runtime_policy(op, policy, device, message or "", rule)
    except RuntimeError as error:
        text = str(error)
        if not text.startswith("autocastgen: register_runtime_policy("):
            raise
        call, _, diagnostics = text.partition("\n")
        raise PolicyError(diagnostics, call.removeprefix("autocastgen: ").removesuffix(" failed:")) from None


def clear_runtime_policies() -> None:
    """Drops every runtime policy of this process (from ``load_policy``, ``register_runtime_policy``,
    or ``AUTOCASTGEN_POLICY``); the kernels they replaced come back."""
    _ops().clear_runtime_policies()
