"""The advice and the policy it writes: the places moved and why, each as an op entry scoped to its
module or under a `modules:` section, the runs' log and the GEMM shares; the text the runs verify
and the file :meth:`Advice.write` writes.

Note [the root]: an op called in the root module's own forward has the path "", which no
pattern names alone (a pattern is not empty, and `*` matches every path): such a place is
written `modules: ["*"]`, the op in float32 everywhere in the model, and its reason says so.

Note [module sections]: a place is an op inside a module, written `{op: bmm, modules: [attn]}`.
When every place recorded inside a module (it and the modules inside it) moves, and there are
at least two, the policy says so once, as a `modules:` section `attn: fp32`; the outermost such
module (never the root) is written. What the runs verify is always the written text.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .._core.atomic import write_file
from .._core.ranges import Measure, Place, percent
from .._core.terminal import shown


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
        return write_file(out, _policy_text(self, _relative_base(self.base, out)))

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
        return "\n".join(shown(line) for line in lines)  # Note [names on a terminal]

    def __str__(self) -> str:
        return self.report()


def _count_by(moved: Sequence[Moved]) -> str:
    ranges = sum(1 for m in moved if m.by == "ranges")
    return f"{ranges} by ranges, {len(moved) - ranges} by validation"


def _share_line(share: Mapping[str, Mapping[str, float]]) -> str:
    before, after = share["before"], share["after"]
    return (f"calls {percent(before['calls'])} -> {percent(after['calls'])} "
            f"({after['lower_calls']:g} of {after['gemm_calls']:g}), "
            f"FLOPs {percent(before['flops'])} -> {percent(after['flops'])}")


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


def _magnitudes(measured: Measure) -> str:
    """What the float32 run measured at a place the validation needed (Note [risk order] in _search.py)."""
    if measured.input_max_abs is None or measured.output_max_abs is None:
        return ""
    return f" (max |in| {measured.input_max_abs:.6g}, max |out| {measured.output_max_abs:.6g})"


def _advice_for(places: Iterable[Place], measures: Mapping[Place, Measure], every: Iterable[Place],
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
