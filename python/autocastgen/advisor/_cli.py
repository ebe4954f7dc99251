"""The advisor's command line, ``autocastgen advise`` (codegen/cli/verb_advise.cpp runs ``python -m
autocastgen.advisor``): the range proposal from a record file (``advise_record``), or fp8 places of a
script's model (``--fp8 SCRIPT.py``), written as a policy that loads (docs/advise.md)."""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from .._core.atomic import WriteError, write_file
from .._core.ranges import FORMATS, measure
from .._core.terminal import shown
from ..policy import PolicyError, clear_runtime_policies, load_policy
from ..reporter.reading import ReadError, read_json
from ._advice import Advice, _advice_for, _policy_text, _relative_base
from ._fp8 import Fp8Advice
from ._record import AdviseError, _check_base, _dtype_name, read_record
from ._run import _device_of, _split_inputs
from ._search import advise


def advise_record(record: str | os.PathLike[str], policy: str | os.PathLike[str], dtype: str,
                  margin_bits: float = 1.0, device: str | None = None) -> Advice:
    """The range proposal from a record file (no model to run): what ``autocastgen advise`` writes.
    A record does not say which device it ran on: ``device`` (``--device``) checks the base's."""
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
    """``python -m autocastgen.advisor RECORD.json --policy BASE.yaml --dtype D [--margin-bits N] -o OUT.yaml``."""
    parser = argparse.ArgumentParser(prog="autocastgen advise",
                                     description="Writes a policy that extends BASE and moves to float32 the places "
                                                 "whose recorded ranges leave DTYPE's range (docs/advise.md).")
    parser.add_argument("record", nargs="?", help="a record taken in record-only mode with the model attached")
    parser.add_argument("--fp8", metavar="SCRIPT.py",
                        help="propose fp8 places instead, running the model of SCRIPT.py (its globals `model` and "
                             "`inputs`): Note [fp8 places]")
    parser.add_argument("--policy", required=True, help="the base policy the record was taken with")
    parser.add_argument("--dtype", choices=sorted(FORMATS), help="the lower-precision dtype (required without --fp8; "
                        "default bfloat16 with it)")
    parser.add_argument("--margin-bits", type=float, default=1.0, help="margin below the dtype's largest value")
    parser.add_argument("--device", help="the device the record was taken on (checked against the base's)")
    parser.add_argument("-o", "--output", required=True, help="the policy to write")
    options = parser.parse_args(argv)
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


def _reported(make: Callable[[], Advice | Fp8Advice], options: argparse.Namespace) -> int:
    """Runs one advise verb's work and reports it: the advice and where it was written, or the error
    (exit 1, nothing written)."""
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
    """``text``'s lines as a terminal shows them (Note [names on a terminal] in _core/terminal.py)."""
    return "\n".join(shown(line) for line in text.split("\n"))


def _main_fp8(options: argparse.Namespace, out: Path) -> int:
    def from_script() -> Advice | Fp8Advice:
        script = runpy.run_path(options.fp8, run_name="__autocastgen_advise__")
        if "model" not in script or "inputs" not in script:
            raise AdviseError(f"{options.fp8}: define the globals `model` and `inputs` (what model(inputs) runs)")
        advice = advise(script["model"], script["inputs"], policy=options.policy, dtype=options.dtype or "bfloat16",
                        fp8=True)
        model_device = _device_of(script["model"], *_split_inputs(script["inputs"]))
        if options.device is not None and options.device != model_device:
            raise AdviseError(f"--device {options.device}: the model runs on another device")
        advice.write(out)
        return advice

    return _reported(from_script, options)
