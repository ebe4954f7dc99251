"""What the advisor reads (Note [the advisor] in _search.py): a record's rows, checked; the base
policy's device and lower-precision dtypes; the dtype asked for. Every refusal is an :class:`AdviseError`."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from .._core.ranges import FORMATS, LOWER_RULE
from ..policy import clear_runtime_policies, load_policy

# The default lower-precision dtype per device (docs/policy-language.md, Devices): a policy
# without `lower_precision:` has only that one.
_DEFAULT_LOWER = {
    "cpu": "bfloat16", "cuda": "float16", "xpu": "float16", "ipu": "float16", "hpu": "bfloat16",
    "xla": "bfloat16", "mps": "float16", "mtia": "float16", "maia": "bfloat16", "privateuseone": "float16",
}


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
    file's own `autocast:` fields override its base's). The policy must already have loaded."""
    def fields(file: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
        data = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
        merged: dict[str, Any] = {}
        extends = data.get("extends")
        if isinstance(extends, str) and file.resolve() not in seen:
            merged = fields(file.parent / extends, (*seen, file.resolve()))
        merged.update(data.get("autocast") or {})
        return merged

    merged = fields(Path(path), ())
    device = str(merged.get("device", ""))
    lower = merged.get("lower_precision") or [_DEFAULT_LOWER.get(device, "float16")]
    return device, [str(d) for d in lower]


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
