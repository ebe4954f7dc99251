"""fp8 by place for the advisor: ``autocastgen.advise(model, inputs, fp8=True)`` (docs/advise.md, "fp8 places").

Note [fp8 places]: how the advisor proposes where the fp8 list applies.
- A *place* is a module whose own GEMMs (``linear``, ``mm``, ``addmm`` under the base's
  ``lower_precision_fp``) the float32 run recorded; the model's root module is not a place.
- *Can it run in fp8*: the model runs once with fp8 at every place (an entry
  ``{op: linear, modules: [<place>]}`` per op, beside the base); a place whose statistics row has
  no call that ran in ``float8_e4m3fn`` (shapes fp8 cannot take, a device without ``_scaled_mm``)
  is not a candidate.
- *Time*: each place's forward is timed (wall time between its forward pre- and post-hooks,
  summed over its calls in one run) under the base (the lower-precision dtype) and under fp8 at
  every candidate, the two alternating, ``repeats`` times; a place's time is its minimum over the
  repeats. A place improves when its fp8 time is below its lower-precision time.
- *Validation*: a place that improves runs with fp8 there alone and must pass the advisor's
  check against the float32 run (Note [default tolerance] in _run.py, or ``validate=``).
- *Together*: the places kept so far run together; while that fails, the kept place with the
  smallest measured gain (lower-precision time / fp8 time) is dropped, and its reason says so.
- The decision is :func:`decide` (pure: timings and validations in, places out), tested alone
  with injected numbers; wall times are never asserted on.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .. import insight
from .._core.atomic import write_file
from .._core.terminal import shown
from ..policy import clear_runtime_policies, load_policy
from ._advice import _quote, _relative_base

GEMM_OPS = ("aten::linear", "aten::mm", "aten::addmm")
FP8_DTYPE = "float8_e4m3fn"
RECIPE = "{scaling: current, granularity: tensorwise, forward: float8_e4m3fn, backward: float8_e5m2}"


@dataclass(frozen=True)
class Fp8Place:
    """One place's proposal: ``module`` (its path, the pattern written), ``ops`` (the GEMM ops it
    calls, as a policy names them), the measured ``lower_seconds`` and ``fp8_seconds`` (None when
    not measured), ``validation`` (the check's detail; None when not run), ``passed``, ``kept``
    and ``reason`` (what the written policy says of it)."""

    module: str
    ops: tuple[str, ...]
    lower_seconds: float | None = None
    fp8_seconds: float | None = None
    can_fp8: bool = True
    validation: str | None = None
    passed: bool | None = None
    kept: bool = False
    reason: str = ""

    @property
    def improves(self) -> bool:
        return (self.lower_seconds is not None and self.fp8_seconds is not None
                and self.fp8_seconds < self.lower_seconds)

    @property
    def gain(self) -> float:
        if self.lower_seconds is None or self.fp8_seconds is None or not self.improves:
            return 0.0
        return self.lower_seconds / self.fp8_seconds if self.fp8_seconds > 0 else float("inf")


def _milliseconds(seconds: float | None) -> str:
    return "not measured" if seconds is None else f"{seconds * 1e3:.3g} ms"


def _timing(place: Fp8Place, dtype: str) -> str:
    text = f"fp8 {_milliseconds(place.fp8_seconds)} vs {dtype} {_milliseconds(place.lower_seconds)}"
    return f"{text} ({place.gain:.2f}x)" if place.improves else text


def decide(places: Sequence[Fp8Place], dtype: str, validate_alone: Callable[[Fp8Place], tuple[bool, str]],
           validate_together: Callable[[Sequence[Fp8Place]], tuple[bool, str]]) -> list[Fp8Place]:
    """Note [fp8 places]: which places keep fp8, each with its reason. ``places`` carry their
    timings; ``validate_alone(place)`` and ``validate_together(places)`` run the check (or, in a
    unit test, answer from a table). Returns every place, ordered by module."""
    out: dict[str, Fp8Place] = {}
    for place in sorted(places, key=lambda p: p.module):
        if not place.can_fp8:
            out[place.module] = replace(place, kept=False, reason="not kept: its GEMMs do not run in fp8 here "
                                                                  f"(shapes or device; they ran in {dtype})")
        elif not place.improves:
            out[place.module] = replace(place, kept=False,
                                        reason=f"not kept: no faster in fp8 ({_timing(place, dtype)})")
        else:
            passed, detail = validate_alone(place)
            if passed:
                out[place.module] = replace(place, passed=True, validation=detail, kept=True,
                                            reason=f"{_timing(place, dtype)}; validation passes ({detail})")
            else:
                out[place.module] = replace(place, passed=False, validation=detail, kept=False,
                                            reason=f"not kept: validation fails in fp8 ({detail}), though faster "
                                                   f"({_timing(place, dtype)})")
    while True:
        kept = [p for p in out.values() if p.kept]
        if len(kept) < 2:
            break
        passed, detail = validate_together(kept)
        if passed:
            break
        weakest = min(kept, key=lambda p: (p.gain, p.module))
        out[weakest.module] = replace(weakest, kept=False,
                                      reason=f"not kept: the kept places together fail validation ({detail}) and "
                                             f"this one gains least ({_timing(weakest, dtype)})")
    return [out[m] for m in sorted(out)]


@dataclass
class Fp8Advice:
    """What ``advise(..., fp8=True)`` found: ``places`` (every place, kept or not, each with its
    measured times, validation and reason), ``log`` (the runs), ``seconds``, ``text`` (the policy:
    ``extends:`` the base, fp8 entries for the kept places, the reasons as comments) and
    ``write(path)``."""

    base: str
    dtype: str
    places: tuple[Fp8Place, ...]
    repeats: int = 0
    log: tuple[tuple[str, bool, str], ...] = ()
    seconds: float = 0.0

    @property
    def kept(self) -> tuple[Fp8Place, ...]:
        return tuple(p for p in self.places if p.kept)

    @property
    def text(self) -> str:
        return policy_text(self, self.base)

    def write(self, path: str | os.PathLike[str]) -> Path:
        out = Path(path)
        return write_file(out, policy_text(self, _relative_base(self.base, out)))

    def report(self) -> str:
        lines = [f"autocastgen advise --fp8: {len(self.kept)} of {len(self.places)} place"
                 f"{'s' if len(self.places) != 1 else ''} kept in fp8 ({self.dtype} elsewhere)"]
        for place in self.places:
            lines.append(f"  {'+' if place.kept else '-'} {place.module}: {place.reason}")
        lines.append(f"model runs: {len(self.log)}; time: {self.seconds:.2f} s")
        return "\n".join(shown(line) for line in lines)  # Note [names on a terminal]

    def __str__(self) -> str:
        return self.report()


def policy_text(advice: Fp8Advice, extends: str, places: Iterable[Fp8Place] | None = None) -> str:
    """The policy with fp8 at ``places`` (default: the kept ones), the others as comments."""
    chosen = sorted(places if places is not None else advice.kept, key=lambda p: p.module)
    chosen_modules = {p.module for p in chosen}
    lines = [f"# Written by autocastgen advise --fp8 for {advice.dtype} autocast: {len(chosen)} of "
             f"{len(advice.places)} places in fp8 (measured: {advice.repeats} timed runs each way; "
             "validated against the float32 run).",
             f"extends: {_quote(extends)}",
             "autocast:",
             f"  fp8: {RECIPE}"]
    by_op: dict[str, list[Fp8Place]] = {}
    for place in chosen:
        for op in place.ops:
            by_op.setdefault(op, []).append(place)
    if by_op:
        lines += ["lists:", "  fp8:"]
        for op in sorted(by_op):
            for place in by_op[op]:
                if place.reason:
                    lines.append(f"    # {place.module}: {place.reason}")
            modules = ", ".join(_quote(p.module) for p in by_op[op])
            lines.append(f"    - {{op: {op}, modules: [{modules}]}}")
    others = [p for p in advice.places if p.module not in chosen_modules and p.reason]
    if others:
        lines.append("# Places left in " + advice.dtype + ":")
        lines += [f"#   {p.module}: {p.reason}" for p in others]
    return "\n".join(lines) + "\n"


def _candidate_places(rows: Iterable[Mapping[str, Any]]) -> list[Fp8Place]:
    ops: dict[str, set[str]] = {}
    for row in rows:
        module = row.get("module")
        if module and row.get("op") in GEMM_OPS and row.get("policy") == "lower_precision_fp":
            ops.setdefault(str(module), set()).add(str(row["op"]).removeprefix("aten::"))
    return [Fp8Place(module, tuple(sorted(names))) for module, names in sorted(ops.items())]


@contextlib.contextmanager
def _timed(model: Any, modules: Iterable[str], into: dict[str, float]) -> Iterator[None]:
    """Adds each module's forward wall time (pre-hook to hook, summed over its calls) to ``into``."""
    handles = []
    started: dict[str, list[float]] = {}
    for path in modules:
        module = model.get_submodule(path)

        def pre(_m: Any, _args: Any, path: str = path) -> None:
            started.setdefault(path, []).append(time.perf_counter())

        def post(_m: Any, _args: Any, _out: Any, path: str = path) -> None:
            into[path] = into.get(path, 0.0) + time.perf_counter() - started[path].pop()

        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def advise_fp8(model: Any, run: Any, reference: Any, rows: Sequence[Mapping[str, Any]], base: str, dtype: str,
               check: Callable[[Any, Any], tuple[bool, str]], repeats: int, started: float) -> Fp8Advice:
    """Note [fp8 places]; ``run`` is the advisor's _Runner, ``reference`` its float32 output and
    ``rows`` the float32 record's rows."""
    if repeats < 1:
        raise ValueError(f"fp8_repeats={repeats}: time each way at least once")
    advice = Fp8Advice(base, dtype, tuple(_candidate_places(rows)), repeats)
    log: list[tuple[str, bool, str]] = [("float32", True, "record-only")]

    def load(places: Iterable[Fp8Place]) -> None:
        clear_runtime_policies()
        load_policy(policy_text(advice, base, places))

    def validate(places: Sequence[Fp8Place], what: str) -> tuple[bool, str]:
        load(places)
        passed, detail = check(reference, run())
        log.append((what, passed, detail))
        return passed, detail

    everywhere = list(advice.places)
    if not everywhere:
        advice.log, advice.seconds = tuple(log), time.perf_counter() - started
        return advice
    # Which places run in fp8 at all: the statistics of a run with fp8 at every place.
    load(everywhere)
    insight.reset()
    with insight.stats() as stats:
        run()
    log.append(("fp8 everywhere (statistics)", True, ""))
    ran_fp8 = {str(r.get("module")) for r in stats.table["ops"]
               if r.get("policy") == "fp8" and r.get("ran_in", {}).get(FP8_DTYPE, 0) > 0}
    places = [replace(p, can_fp8=p.module in ran_fp8) for p in everywhere]
    candidates = [p for p in places if p.can_fp8]
    # Timings: the base and fp8 at every candidate, alternating; the minimum of each place.
    lower_times: dict[str, float] = {}
    fp8_times: dict[str, float] = {}
    if candidates:
        paths = [p.module for p in candidates]
        for _ in range(repeats + 1):  # the first pair warms up and is not kept
            for which, times in (("lower", lower_times), ("fp8", fp8_times)):
                if which == "lower":
                    clear_runtime_policies()
                    load_policy(base)
                else:
                    load(candidates)
                one: dict[str, float] = {}
                with _timed(model, paths, one):
                    run()
                log.append((f"time {which}", True, ""))
                if _ > 0:
                    for path, seconds in one.items():
                        times[path] = min(times.get(path, seconds), seconds)
    places = [replace(p, lower_seconds=lower_times.get(p.module), fp8_seconds=fp8_times.get(p.module)) for p in places]
    decided = decide(places, dtype, lambda p: validate([p], f"validate {p.module}"),
                     lambda ps: validate(ps, "validate together"))
    advice.places = tuple(decided)
    advice.log, advice.seconds = tuple(log), time.perf_counter() - started
    return advice
