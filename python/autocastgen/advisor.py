"""The policy advisor: a policy that keeps float32 only at the places measured ranges or a validation need (docs/advise.md).

    advice = autocastgen.advise(model, inputs, policy="cpu.yaml", dtype=torch.float16)
    advice.moved        # each (module, op) moved to float32, with its measured reason
    advice.share        # GEMM calls and FLOPs in the lower-precision dtype, before and after
    advice.write("advised.yaml")

and, from a record file taken in record-only mode with the model attached (ranges only, no model
to run), ``autocastgen advise RECORD.json --policy BASE.yaml --dtype float16 -o OUT.yaml``, which
runs ``python -m autocastgen.advise`` with the same arguments: the proposal, the search and the
policy writer exist once, here and in the advisor's private parts:
- _advice_record.py: what it reads (the record's rows, the base policy, the dtype) and AdviseError;
- _advice_ranges.py: the range proposal (``measure``) and the risk order (Note [risk order]);
- _advice_policy.py: the advice (Advice, Moved, Run) and the policy text it writes (Note [the
  root], Note [module sections]);
- _advice_run.py: running the model and checking a run (Note [default tolerance]);
- _fp8_advice.py: fp8 places (Note [fp8 places]).
This module runs the search (``advise``), the CLI's range proposal (``advise_record``) and the
CLI (``main``, run by advise.py); the parts' public names (``AdviseError``, ``Advice``, ``Moved``,
``Run``, ``Place``, ``measure``, ``read_record``, ``base_autocast``, ``Fp8Advice``, ``Fp8Place``)
are importable from here too.

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
  order] in _advice_ranges.py), are added as a prefix found by bisection (the smallest prefix
  that passes, assuming more float32 never hurts; every prefix used was run), then each added
  place, least risky first, is dropped when the run still passes without it (greedy removal).
  Places the ranges proposed are kept: they carry a measured reason and the margin is for inputs
  not seen.
- Runs are cached per set of places, so no set runs twice; at most `max_runs` runs in all (the
  float32 run included). Everything is ordered by value, then by (module, op): the same model,
  inputs and arguments give the same advice.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ._atomic import WriteError, write_file
from ._advice_policy import Advice, Moved, Run, _advice_for, _policy_text, _relative_base
from ._advice_ranges import Place, _risk_order, measure
from ._advice_record import _FORMATS, AdviseError, _check_base, _dtype_name, read_record
from ._advice_record import base_autocast  # noqa: F401 (importable from here, as before the split)
from ._advice_run import _DEFAULT_RTOL, _default_check, _device_of, _GemmCounter, _leaves, _Runner, _split_inputs
from ._fp8_advice import Fp8Advice, Fp8Place, advise_fp8
from ._terminal import shown

__all__ = ["Advice", "AdviseError", "Fp8Advice", "Fp8Place", "Moved", "Run", "advise", "main"]


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
    from .reporter.reading import ReadError, read_json

    path = os.fspath(record)
    try:
        table = read_json(path)  # the report's reader: bounded, every error located
    except ReadError as error:
        raise AdviseError(f"{path}: cannot read the record:\n{str(error).rstrip()}") from None
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
        try:
            clear_runtime_policies()
            write_file(out, text, check=lambda temporary: load_policy(Path(temporary)))
        finally:
            clear_runtime_policies()
        return advice

    return _reported(from_record, options)


def _reported(make: Callable[[], Advice], options: argparse.Namespace) -> int:
    """Runs one advise verb's work and reports it: the advice and where it was written, or the error
    (exit 1, nothing written)."""
    from .policy import PolicyError

    try:
        advice = make()
    except (AdviseError, WriteError) as error:
        print(f"autocastgen: error: {_shown_lines(str(error))}", file=sys.stderr)
        return 1
    except PolicyError as error:
        print(f"{_shown_lines(str(error))}\nautocastgen: error: the base policy has errors; no advice written",
              file=sys.stderr)
        return 1
    print(_shown_lines(advice.report()))
    print(f"wrote {shown(options.output)}")
    return 0


def _shown_lines(text: str) -> str:
    """``text``'s lines as a terminal shows them (Note [names on a terminal] in _terminal.py)."""
    return "\n".join(shown(line) for line in text.split("\n"))


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
