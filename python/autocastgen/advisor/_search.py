"""The advisor's search: ``advise(model, inputs, ...)`` runs the model and keeps float32 only at the
places measured ranges or a validation need (docs/advise.md).

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
  order] below), are added as a prefix found by bisection (the smallest prefix that passes,
  assuming more float32 never hurts; every prefix used was run), then each added place, least
  risky first, is dropped when the run still passes without it (greedy removal).
  Places the ranges proposed are kept: they carry a measured reason and the margin is for inputs
  not seen.
- Runs are cached per set of places, so no set runs twice; at most `max_runs` runs in all (the
  float32 run included). Everything is ordered by value, then by (module, op): the same model,
  inputs and arguments give the same advice.

Note [risk order]: the places the proposal moved come first, least headroom first; then the
others by the bits their outputs lose to cancellation, log2(max |input| / max |output|) (an op
whose output is much smaller than its inputs keeps few significant bits of them in a narrow
format: bfloat16's 8), then by headroom, then by (module, op).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from .. import insight
from .._core.ranges import Measure, Place, measure
from ..policy import clear_runtime_policies, load_policy, shipped_policy
from ._advice import Advice, Run, _advice_for, _policy_text
from ._fp8 import Fp8Advice, advise_fp8
from ._record import AdviseError, _check_base, _dtype_name, read_record
from ._run import _DEFAULT_RTOL, _default_check, _device_of, _GemmCounter, _leaves, _Runner, _split_inputs


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
    sets (Note [the advisor] in autocastgen/advisor/_search.py; docs/advise.md).

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
        fp8: propose fp8 places instead (Note [fp8 places] in autocastgen/advisor/_fp8.py): fp8
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
        ordered = risk_order(measures.values())
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
    try:
        return str(shipped_policy(device))
    except ValueError as error:
        raise AdviseError(f"{error}: pass policy=") from None


def risk_order(measures: Iterable[Measure]) -> list[Measure]:
    """Most risky first (Note [risk order])."""

    def key(m: Measure) -> tuple[Any, ...]:
        proposed = m.range_reason is not None
        loss = m.loss_bits if m.loss_bits is not None else -math.inf
        return (not proposed, m.headroom if proposed else 0.0, -loss, m.headroom, m.place)

    return sorted(measures, key=key)
