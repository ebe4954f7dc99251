"""The policy baked into a torch.export program: ``autocastgen.export`` and ``apply_policy``
(docs/export.md).

Note [baking a policy]
What the policy decides at a call has one home, the runtime's drivers (policy_call.h), which eager
code reaches through generated wrappers and runtime policies. A program is made with them, not
with a copy of their rules. The model is exported as eager runs it (Note [exporting as eager
runs]): torch.export records the ops the model's code called, which is where eager's autocast
decides, and no casts. That graph is then traced again with ``run_decompositions`` inside
``torch.autocast`` and ``autocastgen.autocast`` with the policy in force: each op reaches the
autocast kernels as in eager, and the casts they make are recorded as ``aten._to_copy`` nodes. The
ops autocast decides at themselves stay whole, the others are decomposed as eager's dispatcher
decomposes them (Note [which ops a program keeps] in ops.py); precision by place comes from
each node's module metadata (Note [places in an exported graph] in places.py). The result
holds aten ops and explicit casts; then weights are stored once in the dtype every use casts them
to, the body is put in the guard (Note [the guard] in program.py), and the policy's record
in the metadata. apply_policy runs the second step on a program someone else exported.

Note [the program's record]
``program.graph_module.meta["custom"]["autocastgen"]``, which torch.export.save keeps: the format,
device, dtype, the names of what decided the casts (runtime policies by who loaded them, generated
libraries by identity, or PyTorch's lists), the digest the runtime keys compiled graphs on (Note
[policies in the trace key] in runtime/torch/state/traced.cpp), the torch release, and the
parameters stored in lower precision. apply_policy refuses a program that has one.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch

from .._core import traced
from .._core.runtime import load_runtime
from ..places import attach
from ..policy import load_policy
from ..state import autocast as own_autocast
from .mapping import precision_map as _mapped
from .ops import autocast_key, decompositions
from .places import places_in
from .program import ExportError, drop_insight_ops, guarded, record, recorded, refuse_leftovers, store_weights_once
from .program_file import load_program

__all__ = ["ExportError", "apply_policy", "export", "precision_map"]

_FORMAT = 1


def _ops() -> Any:
    load_runtime()
    return torch.ops.autocastgen


def _target(device: str | torch.device, dtype: torch.dtype | str) -> tuple[str, torch.dtype]:
    device_type = torch.device(device).type if isinstance(device, (str, torch.device)) else None
    if device_type is None:
        raise TypeError(f"autocastgen.export: device must be a str or torch.device, not {type(device).__name__}")
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, None)  # type: ignore[assignment]
    if dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"autocastgen.export: dtype must be torch.float16 or torch.bfloat16, not {dtype!r}")
    return device_type, dtype


@contextmanager
def _policy_for_this_export(policy: str | os.PathLike[str] | None) -> Iterator[None]:
    """Note [a policy for one export] in runtime/torch/policies/runtime_policy.cpp: ``policy`` over
    the runtime policies in force while the block runs, then exactly what was there before."""
    if policy is None:
        yield
        return
    ops = _ops()
    ops.runtime_policies_push()
    try:
        load_policy(policy)
        yield
    finally:
        ops.runtime_policies_pop()


@contextmanager
def _quiet() -> Iterator[None]:
    """Our warning about scopes around torch.export (Note [torch.export under our scopes] in
    _core/traced.py) is not for the traces autocastgen.export makes itself."""
    before = getattr(traced.exporting_quietly, "on", False)
    traced.exporting_quietly.on = True
    try:
        yield
    finally:
        traced.exporting_quietly.on = before


@contextmanager
def _fp8_as_pytorch_ops() -> Iterator[None]:
    """Note [fp8 in an exported program] in runtime/torch/fp8/operand.cpp: fp8 GEMMs traced with
    PyTorch's ops only (aten._scaled_mm, the quantisation as amax, scale and cast)."""
    before = bool(_ops().fp8_exporting_program(True))
    try:
        yield
    finally:
        _ops().fp8_exporting_program(before)


@contextmanager
def _eager_scope(model: torch.nn.Module, device: str, dtype: torch.dtype) -> Iterator[None]:
    """Note [exporting as eager runs]: the scope eager runs the model in under the policy, in place
    of whatever scope the call sits in: ``torch.autocast`` and ``autocastgen.autocast`` with the
    export's device and dtype, the model attached. torch.export records the ops the model's code
    calls and none of autocast's casts, but the model's Python sees what eager sees (tensors'
    dtypes, torch.is_autocast_enabled(), the fp32 sections' input casts), so it takes eager's
    branches."""
    with torch.autocast(device, dtype=dtype), own_autocast(device, dtype=dtype), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="autocastgen.attach: the .* matches no module")
        with attach(model):
            yield


# The first PyTorch release export is tested with (docs/export.md, "What is refused").
VERIFIED_FROM = (2, 15)


def supported() -> str | None:
    """Why this PyTorch cannot bake a program (None: it can): the guard is PyTorch's
    wrap_with_autocast and the pass that makes it, the decomposition table the list of its
    CompositeImplicitAutograd ops."""
    try:
        from torch._export.passes.replace_autocast_with_hop_pass import replace_autocast_with_hop_pass  # noqa: F401
        from torch._export.utils import _collect_all_valid_cia_ops  # noqa: F401
    except ImportError as error:
        return (f"autocastgen.export needs a PyTorch with torch.export's autocast pass ({error}); "
                f"this is {torch.__version__}")
    # 2.7 has the pass, but its traces put the guard's body and the decompositions otherwise
    # (the baking fails in torch.fx); releases between are not verified (docs/export.md).
    if tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2]) < VERIFIED_FROM:
        return (f"autocastgen.export is verified with PyTorch {VERIFIED_FROM[0]}.{VERIFIED_FROM[1]} and later; "
                f"this is {torch.__version__}")
    return None


def _refuse_unsupported() -> None:
    why_not = supported()
    if why_not is not None:
        raise ExportError(why_not)
    if bool(_ops().record_enabled()):
        raise ExportError("autocastgen.export: record-only mode is on (autocastgen.record), which leaves every op "
                          "untouched: the program would have no casts. Export outside the record block")


def _record_entry(device: str, dtype: torch.dtype, stored: dict[str, str]) -> dict[str, Any]:
    digest, owners, generated = _ops().policies_in_force()
    names = [str(o) for o in owners] + [f"generated library {str(i)[:12]}" for i in generated]
    return {
        "format": _FORMAT,
        "device": device,
        "dtype": str(dtype).removeprefix("torch."),
        "policies": names or [f"PyTorch {torch.__version__}'s autocast lists"],
        "digest": str(digest),
        "torch": torch.__version__,
        "stored_in_lower_precision": stored,
    }


def _bake(program: torch.export.ExportedProgram, device: str, dtype: torch.dtype) -> torch.export.ExportedProgram:
    """Note [baking a policy]."""
    with ExitStack() as stack:
        stack.enter_context(_quiet())
        stack.enter_context(_fp8_as_pytorch_ops())
        frames = stack.enter_context(places_in(program, device))
        stack.enter_context(torch.autocast(device, dtype=dtype))
        stack.enter_context(own_autocast(device, dtype=dtype))
        baked = program.run_decompositions(decompositions(frames))
    drop_insight_ops(baked)
    refuse_leftovers(baked)
    baked, stored = store_weights_once(baked)
    baked = guarded(baked, device)
    record(baked, _record_entry(device, dtype, stored))
    return baked


def export(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None = None,
    *,
    device: str | torch.device,
    dtype: torch.dtype | str,
    policy: str | os.PathLike[str] | None = None,
    **export_kwargs: Any,
) -> torch.export.ExportedProgram:
    """``torch.export.export(model, args, kwargs, **export_kwargs)`` with the policy baked in.

    The program holds the policy's casts as ``aten._to_copy`` nodes between aten ops, the same
    bits as eager ``model(*args, **kwargs)`` under ``torch.autocast(device, dtype)`` with the policy
    in force and ``autocastgen.attach(model)``; no autocast node decides anything, and nothing of
    autocastgen is needed to run it (torch.export.save, then torch.export.load in any process).
    Whatever autocast scope the call sits in, the model is exported in float32 first.

    Args:
        device, dtype: autocast's device type and lower-precision dtype (float16 or bfloat16).
        policy: None: what is in force (runtime policies, loaded generated libraries, else
            PyTorch's lists); a path or YAML text: loaded over them for this export only.
        export_kwargs: torch.export.export's (``dynamic_shapes``, ``strict``: False unless given, ...).

    Raises:
        ExportError: the traced program would need autocastgen to run (an fp8 entry outside
            current scaling), or record-only mode is on.
        PolicyError: ``policy`` has errors.
    """
    device, dtype = _target(device, dtype)
    autocast_key(device)
    _refuse_unsupported()
    # Non-strict unless asked: the policy's scope is eager Python around the trace, which Dynamo's
    # strict trace (torch.export's default before PyTorch 2.8) takes in only where it knows the scope.
    export_kwargs.setdefault("strict", False)
    with _policy_for_this_export(policy):
        with _quiet(), _eager_scope(model, device, dtype):
            program = torch.export.export(model, tuple(args), kwargs, **export_kwargs)
        return _bake(program, device, dtype)


def apply_policy(
    exported_program: torch.export.ExportedProgram | str | os.PathLike[str],
    *,
    device: str | torch.device,
    dtype: torch.dtype | str,
    policy: str | os.PathLike[str] | None = None,
    trusted: bool = False,
) -> torch.export.ExportedProgram:
    """A policy onto a float32 program someone exported: the program autocastgen.export would make
    of the same model (the graph-rewrite route). The policy decides at the ops the program holds:
    torch.export.export's result holds the ops the model's code called, as eager's autocast sees
    them; a decomposed one holds their pieces (``addmm`` for ``linear``), decided there. Places
    come from the nodes' module metadata. ``exported_program`` is left as it was; a path is read
    as data (``trusted=True``: with PyTorch's own loader, pickle included; docs/security.md).

    Raises:
        ExportError: the program already carries a policy (a second would cast its casts).
        ProgramFileError: a program file refused as it stands (Note [a program file is data]).
    """
    device, dtype = _target(device, dtype)
    autocast_key(device)
    _refuse_unsupported()
    if not isinstance(exported_program, torch.export.ExportedProgram):
        exported_program = load_program(exported_program, trusted=trusted)
    entry = recorded(exported_program)
    if entry is not None:
        raise ExportError(f"autocastgen.apply_policy: the program already carries a policy "
                          f"({', '.join(entry['policies'])}, {entry['device']} {entry['dtype']}); apply a policy "
                          "to its float32 program instead")
    with _policy_for_this_export(policy):
        return _bake(exported_program, device, dtype)


def precision_map(program: torch.export.ExportedProgram | str | os.PathLike[str], *,
                  trusted: bool = False) -> dict[str, Any]:
    """What each op of a program (or of a file torch.export.save wrote) runs in, and the casts into
    it: ``{"record": the policy's record or None, "rows": [{"module", "op", "calls", "ran_in",
    "casts_in"}, ...], "casts": N}``, one row per module and op (``autocastgen precision-map``).
    A file is read as data and its weights not at all (``trusted=True``: with PyTorch's own loader,
    pickle included; docs/security.md)."""
    if not isinstance(program, torch.export.ExportedProgram):
        program = load_program(program, trusted=trusted, weights=False)
    return _mapped(program)
