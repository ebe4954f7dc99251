"""What the advisor reads (Note [the advisor] in _search.py): a record's rows, checked; the base
policy's device and lower-precision dtypes; the dtype asked for. Every refusal is an :class:`AdviseError`."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from .._core.ranges import FORMATS, LOWER_RULE
from .._core.runtime import load_runtime
from .._core.terminal import shown
from ..policy import clear_runtime_policies, load_policy


class AdviseError(ValueError):
    """The advisor cannot advise: a bad record, base policy, dtype or model (the message says which)."""


def read_record(table: Mapping[str, Any], source: str = "the record") -> list[dict[str, Any]]:
    """The record's rows, checked: a statistics table with value ranges and module paths, taken
    in record-only mode (nothing cast) and finite. Raises :class:`AdviseError` naming ``source``."""
    if not isinstance(table, Mapping) or not isinstance(table.get("ops"), list):
        raise AdviseError(f"{source}: not an autocastgen record: expected an object with 'version' and 'ops' "
                          "(as autocastgen.record() and AUTOCASTGEN_RECORD write)")
    if table.get("version") != 1:
        raise AdviseError(f"{source}: record version {table.get('version')!r}; this advisor reads version 1")
    rows = table["ops"]
    if not rows:
        raise AdviseError(f"{source}: the record has no ops: did the model run inside its autocast scope, "
                          "with the base policy (or a generated library) loaded?")
    for row in rows:
        if not isinstance(row, Mapping) or "op" not in row or "policy" not in row:
            raise AdviseError(f"{source}: a malformed entry: {json.dumps(row)[:200]}")
    if not any("module" in row for row in rows):
        raise AdviseError(f"{source}: the record has no module paths: take it with the model attached "
                          "(with autocastgen.attach(model), autocastgen.record(PATH): ...), so each op is "
                          "filed under the module that ran it")
    for row in rows:
        if "module" not in row:
            raise AdviseError(f"{source}: {row['op']} ({row['policy']}) has no module path: it ran outside "
                              "the attached model; record the model alone")
    lower = [row for row in rows if row["policy"] == LOWER_RULE]
    if not any("ranges" in row for row in lower):
        raise AdviseError(f"{source}: the record has no value ranges: take it in record-only mode "
                          "(autocastgen.record() or AUTOCASTGEN_RECORD), not with statistics alone")
    for row in lower:
        cast = sorted(set(row.get("ran_in", {})) - {"float32", "float64"})
        if cast:
            raise AdviseError(f"{source}: {row['op']} in {_module_name(row['module'])} ran in {', '.join(cast)}: "
                              "the record must come from a float32 run in record-only mode (nothing cast)")
    nonfinite = sorted((str(row["module"]), str(row["op"])) for row in rows if row.get("nonfinite", 0) > 0)
    if nonfinite:
        places = ", ".join(f"{op} in {_module_name(module)}" for module, op in nonfinite)
        raise AdviseError(f"{source}: the float32 run is already non-finite: non-finite outputs from {places}; "
                          "lower precision cannot be advised for a model whose float32 run is not finite")
    return list(rows)


def _module_name(path: str) -> str:
    return f"module '{path}'" if path else "the root module"


def base_autocast(path: str | os.PathLike[str]) -> tuple[str, list[str]]:
    """The base policy's device and lower-precision dtypes, through its `extends:` chain (the
    file's own `autocast:` fields override its base's), as the runtime's policy reader resolves
    them (the CLI's; Python reads no YAML); without `lower_precision:` in the chain, the device's
    default dtype alone. The policy must already have loaded."""
    file = os.path.abspath(os.fsdecode(path))
    folder, name = os.path.split(file)
    if not _is_utf8(name):  # as load_policy says
        raise AdviseError(f"the base policy '{shown(file)}': its file name is not UTF-8 (the runtime reads UTF-8)")
    if _is_utf8(folder):
        device, lower, given = _autocast_header(file)
    else:  # the runtime's op takes text: through a link to the folder, as load_policy reads it
        with tempfile.TemporaryDirectory(prefix="autocastgen-policy-") as directory:
            link = os.path.join(directory, "folder")
            os.symlink(folder, link)
            device, lower, given = _autocast_header(os.path.join(link, name))
    return device, lower if given else lower[:1]


def _autocast_header(file: str) -> tuple[str, list[str], bool]:
    """policy_autocast_header in runtime/torch/policies/runtime_policy.cpp: the resolved device, its
    lower-precision dtypes (the device's default first when the chain gives none), whether given."""
    load_runtime()
    try:
        device, lower, given = torch.ops.autocastgen.policy_autocast_header(file)
    except RuntimeError as error:
        if not str(error).startswith("autocastgen: the policy "):
            raise
        raise AdviseError(str(error).rstrip("\n")) from None
    return str(device), [str(d) for d in lower], bool(given)


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # bytes that were not UTF-8 in a file name (surrogateescape)
        return False
    return True


def _check_base(policy: str, dtype: str, device: str | None) -> None:
    """Loads the base (its diagnostics are the CLI's) and checks its device and dtypes."""
    if not Path(policy).is_file():
        raise AdviseError(f"the base policy '{policy}' is not a file")
    clear_runtime_policies()
    load_policy(policy)  # PolicyError with the CLI's diagnostics
    base_device, lower = base_autocast(policy)
    if device is not None and base_device != device:
        raise AdviseError(f"the base policy '{policy}' is for device '{base_device}', but the model runs on "
                          f"'{device}': give a {device} policy")
    if dtype not in lower:
        raise AdviseError(f"{dtype} is not a lower-precision dtype of the base policy '{policy}' "
                          f"(lower_precision: [{', '.join(lower)}])")


def _dtype_name(dtype: Any) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in FORMATS:
        raise AdviseError(f"dtype {name}: the advisor advises float16 or bfloat16 autocast")
    return name
