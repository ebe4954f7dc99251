"""The policy advisor: a policy that keeps float32 only at the places measured ranges or a validation need (docs/advise.md).

    advice = autocastgen.advise(model, inputs, policy="cpu.yaml", dtype=torch.float16)
    advice.moved        # each (module, op) moved to float32, with its measured reason
    advice.share        # GEMM calls and FLOPs in the lower-precision dtype, before and after
    advice.write("advised.yaml")

and, from a record file taken in record-only mode with the model attached (ranges only, no model
to run), ``autocastgen advise RECORD.json --policy BASE.yaml --dtype float16 -o OUT.yaml``, which
runs ``python -m autocastgen.advise`` with the same arguments: the proposal, the search and the
policy writer exist once, here.

Note [the advisor]: how a place is chosen.
- A *place* is one op overload inside one module: the record's rows are per (module, op, rule),
  `module` the innermost attached module's path. The places are the rows under
  `lower_precision_fp` (the only rule that casts down); rows of one place are merged.
- *Proposal* (ranges; the CLI stops here): a place moves to float32 when, in the float32 run, its
  inputs' or its outputs' largest |value| comes within `margin_bits` of the dtype's largest finite
  value (or passes it), or when at least 1 % of its non-zero output elements are below the
  dtype's smallest subnormal. A GEMM or convolution is a reduction: its output is the accumulated
  value, so its output range is the accumulation's (the partial sums are not observed).
  Inputs include weights, so a weight above 65504 moves its op (ModelOpt's initializer rule).
- *Verification*: the model runs under the base policy (the "before") and under the proposal;
  a run passes when every floating output is finite and within `atol + rtol * |reference|` of
  the float32 run, or when `validate(reference, output)` says so.
- *Search*, when the proposal fails: the other places, ordered by measured risk (Note [risk
  order]), are added as a prefix found by bisection (the smallest prefix that passes, assuming
  more float32 never hurts; every prefix used was run), then each added place, least risky
  first, is dropped when the run still passes without it (greedy removal). Places the ranges
  proposed are kept: they carry a measured reason and the margin is for inputs not seen.
- Runs are cached per set of places, so no set runs twice; at most `max_runs` runs in all (the
  float32 run included). Everything is ordered by value, then by (module, op): the same model,
  inputs and arguments give the same advice.

Note [risk order]: the places the proposal moved come first, least headroom first; then the
others by the bits their outputs lose to cancellation, log2(max |input| / max |output|) (an op
whose output is much smaller than its inputs keeps few significant bits of them in a narrow
format: bfloat16's 8), then by headroom, then by (module, op).

Note [the root]: an op called in the root module's own forward has the path "", which no
pattern names alone (a pattern is not empty, and `*` matches every path): such a place is
written `modules: ["*"]`, the op in float32 everywhere in the model, and its reason says so.

Note [module sections]: a place is an op inside a module, written `{op: bmm, modules: [attn]}`.
When every place recorded inside a module (it and the modules inside it) moves, and there are
at least two, the policy says so once, as a `modules:` section `attn: fp32`; the outermost such
module (never the root) is written. What the runs verify is always the written text.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._fp8_advice import Fp8Advice, Fp8Place, advise_fp8

__all__ = ["Advice", "AdviseError", "Fp8Advice", "Fp8Place", "Moved", "Run", "advise", "main"]

# The formats' largest finite value and smallest positive subnormal (docs/insight.md, the range record).
_FORMATS = {"float16": (65504.0, 2.0**-24), "bfloat16": (3.3895313892515355e38, 2.0**-133)}
_UNDERFLOW_SHARE = 0.01  # Note [the advisor]
_LOWER_RULE = "lower_precision_fp"
# The default lower-precision dtype per device (docs/policy-language.md, Devices): a policy
# without `lower_precision:` has only that one.
_DEFAULT_LOWER = {
    "cpu": "bfloat16", "cuda": "float16", "xpu": "float16", "ipu": "float16", "hpu": "bfloat16",
    "xla": "bfloat16", "mps": "float16", "mtia": "float16", "maia": "bfloat16", "privateuseone": "float16",
}
# Default tolerances (Note [default tolerance]): rtol, and atol as a share of max |reference|.
_DEFAULT_RTOL = {"float16": 1e-2, "bfloat16": 4e-2}


class AdviseError(ValueError):
    """The advisor cannot advise: a bad record, base policy, dtype or model (the message says which)."""


@dataclass(frozen=True, order=True)
class Place:
    """One op overload (as the record names it, ``aten::linear``) inside one module (its path)."""

    module: str
    op: str

    @property
    def policy_name(self) -> str:
        """The op as a policy names it: aten ops bare."""
        return self.op[len("aten::"):] if self.op.startswith("aten::") else self.op


@dataclass(frozen=True)
class _Measure:
    """A place's merged ranges from the float32 run, and what they say for one dtype."""

    place: Place
    calls: int
    input_max_abs: float | None
    output_max_abs: float | None
    output_elements: int
    overflow: int
    underflow: int
    input_headroom: float | None  # bits: log2(format max / max |x|)
    output_headroom: float | None
    loss_bits: float | None       # log2(max |input| / max |output|)
    range_reason: str | None      # why the ranges move it; None when they do not

    @property
    def headroom(self) -> float:
        known = [h for h in (self.input_headroom, self.output_headroom) if h is not None]
        return min(known) if known else math.inf


@dataclass(frozen=True)
class Moved:
    """One place the advice moves to float32: ``module``, ``op``, ``reason`` (the measured one, or
    ``needed to pass validation``), ``by`` (``"ranges"`` or ``"validation"``) and ``section`` (the
    module whose ``modules:`` section covers it, Note [module sections]; None for an op entry)."""

    module: str
    op: str
    reason: str
    by: str
    section: str | None = None


@dataclass(frozen=True)
class Run:
    """One model run: what ran (``"float32"``, ``"base"``, ``"proposal"``, ``"all"``, ``"bisect"``,
    ``"remove"``), how many places were in float32, whether it passed, and what was measured."""

    what: str
    places: int
    passed: bool
    detail: str


@dataclass
class Advice:
    """What :func:`advise` (or the CLI's range proposal) found.

    ``moved``: each place moved, with its reason. ``share``: ``{"before": {...}, "after": {...}}``,
    each with ``calls`` and ``flops`` (the shares of GEMM calls and FLOPs that ran in the
    lower-precision dtype) and the counts they come from; empty for the CLI. ``runs``: model runs
    taken (the float32 run included); ``log``: each run. ``minimal``: whether the greedy removal
    finished (False when ``max_runs`` stopped it). ``seconds``: wall time. ``text``: the policy,
    ``extends:`` naming the base as given; ``write(path)`` writes it with ``extends:`` relative to
    the written file.
    """

    base: str
    dtype: str
    moved: tuple[Moved, ...]
    runs: int = 0
    max_runs: int = 0
    share: dict[str, dict[str, float]] = field(default_factory=dict)
    log: tuple[Run, ...] = ()
    minimal: bool = True
    seconds: float = 0.0
    verified: bool = True
    source: str = ""  # what the advice was made from, for the file's header

    @property
    def text(self) -> str:
        return _policy_text(self, self.base)

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Writes the policy to ``path`` (``extends:`` relative to its folder); returns the path."""
        out = Path(path)
        out.write_text(_policy_text(self, _relative_base(self.base, out)), encoding="utf-8")
        return out

    def report(self) -> str:
        """The advice in a few lines: the places moved and why, runs, shares."""
        lines = [f"autocastgen advise: {self.dtype}: {len(self.moved)} place{'s' if len(self.moved) != 1 else ''} "
                 f"moved to float32" + (f" ({_count_by(self.moved)})" if self.moved else "")]
        for moved in self.moved:
            where = f" (section {moved.section or '<root>'})" if moved.section is not None else ""
            lines.append(f"  {moved.op} in {moved.module or '<root>'}{where}: {moved.reason}")
        if self.verified:
            lines.append(f"model runs: {self.runs} of at most {self.max_runs}"
                         + ("" if self.minimal else " (stopped before the set was minimal)"))
        if self.share:
            lines.append(f"GEMMs in {self.dtype}: {_share_line(self.share)}")
        if self.verified:
            lines.append(f"time: {self.seconds:.2f} s")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.report()


def _count_by(moved: Sequence[Moved]) -> str:
    ranges = sum(1 for m in moved if m.by == "ranges")
    return f"{ranges} by ranges, {len(moved) - ranges} by validation"


def _percent(share: float) -> str:
    return f"{100 * share:.3g}%"


def _share_line(share: Mapping[str, Mapping[str, float]]) -> str:
    before, after = share["before"], share["after"]
    return (f"calls {_percent(before['calls'])} -> {_percent(after['calls'])} "
            f"({after['lower_calls']:g} of {after['gemm_calls']:g}), "
            f"FLOPs {_percent(before['flops'])} -> {_percent(after['flops'])}")


# --- reading the record and the base policy ---------------------------------------------------

def _number(value: Any) -> float | None:
    return None if value is None else float(value)


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
    lower = [row for row in rows if row["policy"] == _LOWER_RULE]
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
    import yaml

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
    from .policy import clear_runtime_policies, load_policy

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


# --- the proposal ---------------------------------------------------------------------------

def _bits(limit: float, value: float | None) -> float | None:
    if value is None:
        return None
    return math.inf if value == 0 else math.log2(limit / value)


def measure(rows: Iterable[Mapping[str, Any]], dtype: str, margin_bits: float) -> list[_Measure]:
    """Every place of the record (rows under `lower_precision_fp`, merged per (module, op)) with
    what its ranges say for ``dtype`` (Note [the advisor]); in (module, op) order."""
    largest, smallest = _FORMATS[dtype]
    merged: dict[Place, dict[str, Any]] = {}
    for row in rows:
        if row["policy"] != _LOWER_RULE:
            continue
        place = Place(str(row["module"]), str(row["op"]))
        ranges = row.get("ranges") or {}
        into = merged.setdefault(place, {"calls": 0, "in": None, "out": None, "elements": 0, "over": 0, "under": 0})
        into["calls"] += int(row.get("calls", 0))
        for key, name in (("in", "input_max_abs"), ("out", "output_max_abs")):
            value = _number(ranges.get(name))
            if value is not None:
                into[key] = value if into[key] is None else max(into[key], value)
        into["elements"] += int(ranges.get("output_elements", 0))
        into["over"] += int(ranges.get(f"{dtype}_overflow", 0))
        into["under"] += int(ranges.get(f"{dtype}_underflow", 0))
    found = []
    for place in sorted(merged):
        m = merged[place]
        in_room, out_room = _bits(largest, m["in"]), _bits(largest, m["out"])
        loss = None
        if m["in"] and m["out"]:
            loss = math.log2(m["in"] / m["out"])
        reasons = []
        if m["out"] is not None and (out_room < margin_bits or m["over"]):
            text = f"max |out| {m['out']:.6g}, {dtype} headroom {out_room:+.1f} bits"
            if m["over"]:
                text += f", {_percent(m['over'] / max(m['elements'], 1))} of elements out of range"
            reasons.append(text)
        elif m["over"]:
            reasons.append(f"{_percent(m['over'] / max(m['elements'], 1))} of elements out of range")
        if m["in"] is not None and in_room < margin_bits:
            reasons.append(f"max |in| {m['in']:.6g}, {dtype} headroom {in_room:+.1f} bits")
        if m["elements"] and m["under"] / m["elements"] >= _UNDERFLOW_SHARE:
            reasons.append(f"{_percent(m['under'] / m['elements'])} of output elements below {dtype}'s "
                           f"smallest subnormal ({smallest:.3g})")
        found.append(_Measure(place, m["calls"], m["in"], m["out"], m["elements"], m["over"], m["under"],
                              in_room, out_room, loss, "; ".join(reasons) or None))
    return found


def _risk_order(measures: Iterable[_Measure]) -> list[_Measure]:
    """Most risky first (Note [risk order])."""

    def key(m: _Measure) -> tuple[Any, ...]:
        proposed = m.range_reason is not None
        loss = m.loss_bits if m.loss_bits is not None else -math.inf
        return (not proposed, m.headroom if proposed else 0.0, -loss, m.headroom, m.place)

    return sorted(measures, key=key)


# --- the policy writer ------------------------------------------------------------------------

def _inside(module: str, path: str) -> bool:
    """Whether `path` is `module` or inside it."""
    return module == "" or path == module or path.startswith(module + ".")


def _ancestors(path: str) -> list[str]:
    """`a.b.c` -> [`a`, `a.b`, `a.b.c`]: the non-root modules enclosing a path, outermost first."""
    if not path:
        return []
    parts = path.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _sections(moved: Iterable[Place], every: Iterable[Place]) -> dict[Place, str]:
    """Each moved place that a `modules:` section covers -> the section's module (Note [module sections])."""
    moved, every = set(moved), sorted(set(every))
    covered: dict[Place, str] = {}
    for place in sorted(moved):
        for module in _ancestors(place.module):
            inside = [p for p in every if _inside(module, p.module)]
            if len(inside) >= 2 and all(p in moved for p in inside):
                covered[place] = module
                break
    return covered


def _quote(text: str) -> str:
    return json.dumps(text)  # a JSON string is a YAML double-quoted scalar


def _pattern(module: str) -> str:
    """A place's module as a pattern. The root module's own calls (an op in the model's forward,
    outside every submodule) can only be named by `*`, which matches every module: Note [the root]."""
    return module if module else "*"


def _op_name(name: str) -> str:
    return _quote(name) if ":" in name else name


def _policy_text(advice: Advice, extends: str) -> str:
    lines = [f"# Written by autocastgen advise for {advice.dtype} autocast{advice.source}: "
             f"{len(advice.moved)} place{'s' if len(advice.moved) != 1 else ''} moved to float32"
             + (f" ({_count_by(advice.moved)})." if advice.moved else ".")]
    if advice.verified:
        lines.append(f"# Verified against the float32 run: {advice.runs} model runs"
                     + ("." if advice.minimal else " (max_runs reached before the set was minimal)."))
    else:
        lines.append("# From measured ranges alone (not verified by running the model).")
    if advice.share:
        lines.append(f"# GEMMs in {advice.dtype}: {_share_line(advice.share)}.")
    lines.append(f"extends: {_quote(extends)}")
    entries: dict[str, list[Moved]] = {}
    sections: dict[str, list[Moved]] = {}
    for moved in advice.moved:
        if moved.section is None:
            entries.setdefault(Place(moved.module, moved.op).policy_name, []).append(moved)
        else:
            sections.setdefault(moved.section, []).append(moved)
    if entries:
        lines += ["lists:", "  fp32:"]
        for name in sorted(entries):
            places = sorted(entries[name], key=lambda m: m.module)
            for moved in places:
                lines.append(f"    # {moved.module or '<root>'}: {moved.reason}")
            modules = ", ".join(_quote(_pattern(m.module)) for m in places)
            lines.append(f"    - {{op: {_op_name(name)}, modules: [{modules}]}}")
    if sections:
        lines.append("modules:")
        for module in sorted(sections):
            for moved in sorted(sections[module], key=lambda m: (m.module, m.op)):
                lines.append(f"  # {Place(moved.module, moved.op).policy_name} in {moved.module}: {moved.reason}")
            lines.append(f"  {_quote(module)}: fp32")
    return "\n".join(lines) + "\n"


def _relative_base(base: str, out: Path) -> str:
    """The base as an `extends:` of a file at `out` (relative to its folder, forward slashes)."""
    return Path(os.path.relpath(Path(base).resolve(), out.resolve().parent)).as_posix()


def _magnitudes(measured: _Measure) -> str:
    """What the float32 run measured at a place the validation needed (Note [risk order])."""
    if measured.input_max_abs is None or measured.output_max_abs is None:
        return ""
    return f" (max |in| {measured.input_max_abs:.6g}, max |out| {measured.output_max_abs:.6g})"


def _advice_for(places: Iterable[Place], measures: Mapping[Place, _Measure], every: Iterable[Place],
                base: str, dtype: str) -> Advice:
    """The advice that moves exactly `places` (the text the runs verify)."""
    places = sorted(set(places))
    covered = _sections(places, every)
    moved = []
    for place in places:
        measured = measures[place]
        reason = measured.range_reason
        text = reason or "needed to pass validation" + _magnitudes(measured)
        if not place.module:  # Note [the root]
            text += " (called in the root module's own forward: moved everywhere, modules: [\"*\"])"
        moved.append(Moved(place.module, place.op, text, "ranges" if reason else "validation", covered.get(place)))
    return Advice(base=base, dtype=dtype, moved=tuple(moved))


# --- running the model --------------------------------------------------------------------------

def _leaves(output: Any) -> list[Any]:
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(output) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def _default_check(rtol: float, atol: float | None) -> Callable[[Any, Any], tuple[bool, str]]:
    """Note [default tolerance]: every floating output finite and within atol + rtol * |ref| of the
    float32 output, elementwise; atol defaults to rtol * max |ref| of each output (so the check is
    relative to the output's scale and near-zero elements do not decide alone)."""
    import torch

    def check(reference: Any, output: Any) -> tuple[bool, str]:
        refs, outs = _leaves(reference), _leaves(output)
        if len(refs) != len(outs):
            return False, f"{len(outs)} floating outputs, the float32 run has {len(refs)}"
        worst = 0.0
        for ref, out in zip(refs, outs):
            if ref.shape != out.shape:
                return False, f"an output of shape {list(out.shape)}, the float32 run's is {list(ref.shape)}"
            out = out.detach().float()
            ref = ref.detach().float()
            if not bool(torch.isfinite(out).all()):
                return False, "non-finite output"
            scale = float(ref.abs().max()) if ref.numel() else 0.0
            allowed = (atol if atol is not None else rtol * scale) + rtol * ref.abs()
            excess = float(((out - ref).abs() / allowed.clamp_min(1e-30)).max()) if ref.numel() else 0.0
            worst = max(worst, excess)
        return worst <= 1.0, f"error {worst:.3g} of the tolerance"

    return check


class _GemmCounter:
    """Counts GEMM calls and FLOPs by dtype below autocast (a TorchDispatchMode over PyTorch's FLOP
    formulas, torch.utils.flop_counter): what actually ran, whichever op autocast saw."""

    def __init__(self, lower: Any) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils.flop_counter import flop_registry

        counts = {"gemm_calls": 0.0, "lower_calls": 0.0, "gemm_flops": 0.0, "lower_flops": 0.0}
        self.counts = counts

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN202
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                formula = flop_registry.get(func._overloadpacket)
                if formula is not None and "backward" not in func._overloadpacket.__name__:
                    flops = float(formula(*args, **kwargs, out_val=out))
                    dtype = next((a.dtype for a in args if hasattr(a, "dtype") and a.is_floating_point()), None)
                    counts["gemm_calls"] += 1
                    counts["gemm_flops"] += flops
                    if dtype == lower:
                        counts["lower_calls"] += 1
                        counts["lower_flops"] += flops
                return out

        self.mode = Mode()

    def share(self) -> dict[str, float]:
        c = self.counts
        return {"calls": c["lower_calls"] / c["gemm_calls"] if c["gemm_calls"] else 0.0,
                "flops": c["lower_flops"] / c["gemm_flops"] if c["gemm_flops"] else 0.0, **c}


@dataclass
class _Runner:
    model: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    device: str
    dtype: Any

    def __call__(self, counter: _GemmCounter | None = None) -> Any:
        import torch

        from . import attach

        devices = [] if self.device == "cpu" else None
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.no_grad())
            stack.enter_context(torch.random.fork_rng(devices=devices, device_type=self.device))
            stack.enter_context(attach(self.model))
            stack.enter_context(torch.autocast(self.device, dtype=self.dtype))
            if counter is not None:
                stack.enter_context(counter.mode)
            torch.manual_seed(0)  # dropout and other randomness: the same in every run
            return self.model(*self.args, **self.kwargs)


def _split_inputs(inputs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(inputs, Mapping):
        return (), dict(inputs)
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    return (inputs,), {}


def _device_of(model: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    import torch
    from torch.utils._pytree import tree_leaves

    for leaf in tree_leaves((list(args), dict(kwargs))):
        if isinstance(leaf, torch.Tensor):
            return leaf.device.type
    for parameter in model.parameters():
        return parameter.device.type
    return "cpu"


def _dtype_name(dtype: Any) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in _FORMATS:
        raise AdviseError(f"dtype {name}: the advisor advises float16 or bfloat16 autocast")
    return name


def advise(
    model: Any,
    inputs: Any,
    policy: str | os.PathLike[str] | None = None,
    dtype: Any = None,
    rtol: float | None = None,
    atol: float | None = None,
    validate: Callable[[Any, Any], bool] | None = None,
    max_runs: int = 32,
    margin_bits: float = 1.0,
    fp8: bool = False,
    fp8_repeats: int = 5,
) -> Advice | Fp8Advice:
    """Advises a policy that extends ``policy`` and keeps float32 only where needed.

    Runs ``model(*inputs)`` (or ``model(**inputs)`` for a dict, ``model(inputs)`` for a tensor)
    under ``torch.autocast(device, dtype)`` with ``torch.no_grad()``, the model attached and the
    random generators seeded alike in every run: once in record-only mode (the float32 reference
    and the ranges), then under the base, the range proposal and, when that fails, the search's
    sets (Note [the advisor] in autocastgen/advisor.py; docs/advise.md).

    Args:
        model: an ``nn.Module`` in float32 (call ``eval()`` first if it should run in eval mode).
        inputs: one tensor, a tuple/list of positional arguments, or a dict of keyword arguments.
        policy: the base policy file (default: the shipped policy of the inputs' device).
        dtype: ``torch.float16`` or ``torch.bfloat16`` (or their names); one of the base's
            ``lower_precision:``.
        rtol, atol: a run passes when every floating output is finite and within
            ``atol + rtol * |reference|`` elementwise (defaults: rtol 0.01 for float16 and 0.04
            for bfloat16, atol ``rtol * max |reference|`` per output).
        validate: ``validate(reference, output) -> bool`` instead of the tolerances.
        max_runs: the most model runs, the float32 run included.
        margin_bits: the proposal's margin below the dtype's largest value, in bits.
        fp8: propose fp8 places instead (Note [fp8 places] in autocastgen/_fp8_advice.py): fp8
            kept only at the modules whose measured time improves over ``dtype`` and whose
            validation against the float32 run still holds; returns an :class:`Fp8Advice`.
        fp8_repeats: timed runs each way (fp8 and ``dtype``) with ``fp8=True``.

    ``dtype`` defaults to float16, or bfloat16 with ``fp8=True``.

    Raises:
        AdviseError: a base policy for another device, a dtype outside its ``lower_precision:``,
            a non-finite float32 run, a record without module paths, or no set of places
            passing within ``max_runs``.
        PolicyError: the base policy has errors.

    The process's runtime policies are replaced while it runs and cleared at the end
    (``clear_runtime_policies()``), and the statistics table is reset before the float32 run.
    """
    import torch

    from . import insight
    from .policy import clear_runtime_policies, load_policy

    started = time.perf_counter()
    name = _dtype_name(dtype if dtype is not None else ("bfloat16" if fp8 else "float16"))
    lower = getattr(torch, name)
    args, kwargs = _split_inputs(inputs)
    device = _device_of(model, args, kwargs)
    if policy is None:
        policy = _shipped_policy(device)
    policy = os.fspath(policy)
    if max_runs < 2:
        raise AdviseError(f"max_runs={max_runs}: the advisor needs at least 2 runs (float32 and the base)")
    if str(torch.ops.autocastgen.record_path()):
        raise AdviseError("record-only mode is on for the whole process (AUTOCASTGEN_RECORD): the advisor's "
                          "verification runs must cast; run it without AUTOCASTGEN_RECORD")
    _check_base(policy, name, device)
    run = _Runner(model, args, kwargs, device, lower)
    check = _default_check(rtol if rtol is not None else _DEFAULT_RTOL[name], atol)
    base_text = Path(policy).resolve().as_posix()
    log: list[Run] = []
    results: dict[frozenset[Place], tuple[bool, dict[str, float]]] = {}

    try:
        # 1. The float32 run, record-only: the reference and the ranges.
        insight.reset()
        with insight.record():
            reference = run()
        table = insight.snapshot()
        log.append(Run("float32", 0, True, "record-only"))
        rows = read_record(table, "autocastgen.advise")
        leaves = _leaves(reference)
        if not leaves:
            raise AdviseError("the model's output holds no floating tensor to compare: pass validate=")
        for ref in leaves:
            if ref.dtype != torch.float32 and ref.dtype != torch.float64:
                raise AdviseError(f"the record-only run returned {ref.dtype}: advise a float32 model")
            if not bool(torch.isfinite(ref).all()):
                raise AdviseError("the float32 run is already non-finite (in an op outside the policy's lists): "
                                  "lower precision cannot be advised for a model whose float32 output is not finite")
        if fp8:
            def fp8_check(reference: Any, output: Any) -> tuple[bool, str]:
                if validate is not None:
                    return bool(validate(reference, output)), "validate()"
                return check(reference, output)

            return advise_fp8(model, run, reference, rows, base_text, name, fp8_check, fp8_repeats, started)
        measures = {m.place: m for m in measure(rows, name, margin_bits)}
        every = sorted(measures)
        ordered = _risk_order(measures.values())
        proposed = [m.place for m in ordered if m.range_reason is not None]
        rest = [m.place for m in ordered if m.range_reason is None]

        def passes(places: Iterable[Place], what: str) -> bool:
            key = frozenset(places)
            if key in results:
                return results[key][0]
            if len(log) >= max_runs:
                raise _OutOfRuns
            clear_runtime_policies()
            load_policy(_policy_text(_advice_for(key, measures, every, base_text, name), base_text))
            counter = _GemmCounter(lower)
            output = run(counter)
            if validate is not None:
                passed, detail = bool(validate(reference, output)), "validate()"
            else:
                passed, detail = check(reference, output)
            results[key] = (passed, counter.share())
            log.append(Run(what, len(key), passed, detail))
            return passed

        minimal = True
        chosen: list[Place]
        try:
            base_passes = passes([], "base")
            if (base_passes and not proposed) or (proposed and passes(proposed, "proposal")):
                chosen = proposed
            else:
                if not rest or not passes(proposed + rest, "all"):
                    raise AdviseError(
                        f"no set of places passes: with every place of the record in float32 ({len(every)}) the "
                        f"output still fails ({log[-1].detail}); the error comes from ops the record did not see "
                        "(ops outside the policy's lists run in their inputs' dtypes), or the tolerance is too tight")
                low, high = 0, len(rest)  # proposed + rest[:low] fails, proposed + rest[:high] passes
                while high - low > 1:
                    middle = (low + high) // 2
                    if passes(proposed + rest[:middle], "bisect"):
                        high = middle
                    else:
                        low = middle
                kept = rest[:high]
                # The last of the prefix is needed (its prefix without it failed); try the others.
                for place in reversed(kept[:-1]):
                    trial = [p for p in kept if p != place]
                    try:
                        if passes(proposed + trial, "remove"):
                            kept = trial
                    except _OutOfRuns:
                        minimal = False
                        break
                chosen = proposed + kept
        except _OutOfRuns:
            raise AdviseError(f"max_runs={max_runs} reached before a set of places passed: "
                              + "; ".join(f"{r.what} ({r.places} places): {'pass' if r.passed else 'fail'}, {r.detail}"
                                          for r in log[1:])) from None
        advice = _advice_for(chosen, measures, every, base_text, name)
        advice.runs, advice.max_runs, advice.log, advice.minimal = len(log), max_runs, tuple(log), minimal
        advice.share = {"before": results[frozenset()][1], "after": results[frozenset(chosen)][1]}
        advice.seconds = time.perf_counter() - started
        return advice
    finally:
        clear_runtime_policies()


class _OutOfRuns(Exception):
    pass


def _shipped_policy(device: str) -> str:
    from .policy import shipped_policy

    try:
        return str(shipped_policy(device))
    except ValueError as error:
        raise AdviseError(f"{error}: pass policy=") from None


# --- the CLI's range proposal ---------------------------------------------------------------------

def advise_record(record: str | os.PathLike[str], policy: str | os.PathLike[str], dtype: str,
                  margin_bits: float = 1.0, device: str | None = None) -> Advice:
    """The range proposal from a record file (no model to run): what ``autocastgen advise`` writes.
    A record does not say which device it ran on: ``device`` (``--device``) checks the base's."""
    path = os.fspath(record)
    try:
        table = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise AdviseError(f"{path}: cannot read the record: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise AdviseError(f"{path}:{error.lineno}:{error.colno}: invalid JSON: {error.msg}") from None
    name = _dtype_name(dtype)
    rows = read_record(table, path)
    _check_base(os.fspath(policy), name, device)
    measures = {m.place: m for m in measure(rows, name, margin_bits)}
    proposed = [m.place for m in measures.values() if m.range_reason is not None]
    advice = _advice_for(proposed, measures, sorted(measures), Path(policy).resolve().as_posix(), name)
    advice.verified = False
    advice.source = f" from {Path(path).name}"
    return advice


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m autocastgen.advise RECORD.json --policy BASE.yaml --dtype D [--margin-bits N] -o OUT.yaml``."""
    parser = argparse.ArgumentParser(prog="autocastgen advise",
                                     description="Writes a policy that extends BASE and moves to float32 the places "
                                                 "whose recorded ranges leave DTYPE's range (docs/advise.md).")
    parser.add_argument("record", nargs="?", help="a record taken in record-only mode with the model attached")
    parser.add_argument("--fp8", metavar="SCRIPT.py",
                        help="propose fp8 places instead, running the model of SCRIPT.py (its globals `model` and "
                             "`inputs`): Note [fp8 places]")
    parser.add_argument("--policy", required=True, help="the base policy the record was taken with")
    parser.add_argument("--dtype", choices=sorted(_FORMATS), help="the lower-precision dtype (required without --fp8; "
                        "default bfloat16 with it)")
    parser.add_argument("--margin-bits", type=float, default=1.0, help="margin below the dtype's largest value")
    parser.add_argument("--device", help="the device the record was taken on (checked against the base's)")
    parser.add_argument("-o", "--output", required=True, help="the policy to write")
    options = parser.parse_args(argv)
    from .policy import clear_runtime_policies, load_policy

    out = Path(options.output)
    if (options.record is None) == (options.fp8 is None):
        parser.error("give a RECORD, or --fp8 SCRIPT.py (not both)")
    if options.fp8 is not None:
        return _main_fp8(options, out)
    if options.dtype is None:
        parser.error("--dtype is required with a RECORD")

    def from_record() -> Advice:
        advice = advise_record(options.record, options.policy, options.dtype, options.margin_bits, options.device)
        text = _policy_text(advice, _relative_base(advice.base, out))
        # Written only when it loads: checked where it will live (its extends: is relative).
        with tempfile.NamedTemporaryFile("w", dir=out.resolve().parent, prefix=f".{out.name}.", suffix=".yaml",
                                         delete=False, encoding="utf-8") as temporary:
            temporary.write(text)
        try:
            clear_runtime_policies()
            load_policy(temporary.name)
            os.replace(temporary.name, out)
        finally:
            clear_runtime_policies()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary.name)
        return advice

    return _reported(from_record, options)


def _reported(make: Callable[[], Advice], options: argparse.Namespace) -> int:
    """Runs one advise verb's work and reports it: the advice and where it was written, or the error
    (exit 1, nothing written)."""
    from .policy import PolicyError

    try:
        advice = make()
    except AdviseError as error:
        print(f"autocastgen: error: {error}", file=sys.stderr)
        return 1
    except PolicyError as error:
        print(f"{error}\nautocastgen: error: the base policy has errors; no advice written", file=sys.stderr)
        return 1
    print(advice.report())
    print(f"wrote {options.output}")
    return 0


def _main_fp8(options: argparse.Namespace, out: Path) -> int:
    import runpy

    def from_script() -> Advice:
        script = runpy.run_path(options.fp8, run_name="__autocastgen_advise__")
        if "model" not in script or "inputs" not in script:
            raise AdviseError(f"{options.fp8}: define the globals `model` and `inputs` (what model(inputs) runs)")
        advice = advise(script["model"], script["inputs"], policy=options.policy, dtype=options.dtype or "bfloat16",
                        fp8=True)
        if options.device is not None and options.device != _device_of(script["model"], *_split_inputs(script["inputs"])):
            raise AdviseError(f"--device {options.device}: the model runs on another device")
        advice.write(out)
        return advice

    return _reported(from_script, options)


if __name__ == "__main__":
    sys.exit(main())
