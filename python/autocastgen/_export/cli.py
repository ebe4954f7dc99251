"""The CLI's export verbs, run with the installed Python (codegen/cli/verb_export.cpp):

  autocastgen apply IN.pt2 [--policy P.yaml] --dtype float16|bfloat16 [--device cpu] -o OUT.pt2 [--trust-program]
  autocastgen precision-map PROGRAM.pt2 [--by module|op] [--format text|json] [--trust-program]
  (either: [--import MODULE ...], the libraries that register the program's custom ops, imported first)

``apply`` is ``autocastgen.apply_policy`` on a saved float32 program; ``precision-map`` prints
``precision_map`` of a saved program (docs/export.md). Both read the program as data (Note [a
program file is data] in program_file.py) unless ``--trust-program`` says the file is trusted.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
from pathlib import Path

from .._core.terminal import shown
from ..policy import PolicyError
from .bake import apply_policy
from .mapping import by_op, format_text, precision_map
from .program_file import load_program


def _apply(args: argparse.Namespace) -> int:
    import torch

    program = load_program(args.program, trusted=args.trust_program)
    baked = apply_policy(program, device=args.device, dtype=args.dtype, policy=args.policy)
    output = Path(args.output)
    # Written beside the output and renamed over it: nothing half-written on any failure.
    handle, partial = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".pt2", dir=output.parent)
    os.close(handle)
    try:
        torch.export.save(baked, partial)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(partial, 0o666 & ~umask)  # as a file written in place would be (mkstemp's is 0600)
        os.replace(partial, output)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    print(f"{shown(str(output))}: {shown(args.program)} with the policy baked in ({shown(args.device)} {args.dtype})")
    return 0


def _map(args: argparse.Namespace) -> int:
    mapped = precision_map(load_program(args.program, trusted=args.trust_program, weights=False))
    if args.format == "json":
        rows = mapped["rows"] if args.by == "module" else by_op(mapped["rows"])
        print(json.dumps({**mapped, "rows": rows}, indent=1))
    else:
        print(format_text(Path(args.program).name, mapped, per_module=args.by == "module"))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="autocastgen")
    verbs = parser.add_subparsers(dest="verb", required=True)
    apply = verbs.add_parser("apply")
    apply.add_argument("program")
    apply.add_argument("--policy")
    apply.add_argument("--dtype", required=True, choices=["float16", "bfloat16"])
    apply.add_argument("--device", default="cpu")
    apply.add_argument("-o", "--output", required=True)
    apply.add_argument("--trust-program", action="store_true")
    apply.add_argument("--import", dest="imports", action="append", default=[])
    mapping = verbs.add_parser("precision-map")
    mapping.add_argument("program")
    mapping.add_argument("--by", default="module", choices=["module", "op"])
    mapping.add_argument("--format", default="text", choices=["text", "json"])
    mapping.add_argument("--trust-program", action="store_true")
    mapping.add_argument("--import", dest="imports", action="append", default=[])
    args = parser.parse_args(argv)
    try:
        for module in args.imports:  # a custom op's library: the program's graph resolves its op by name
            importlib.import_module(module)
        return _apply(args) if args.verb == "apply" else _map(args)
    except Exception as error:  # noqa: BLE001 - the CLI's contract: a message and a non-zero exit
        # A policy's diagnostics are already shown escaped, over several lines (source, caret).
        text = str(error) if isinstance(error, PolicyError) else f"autocastgen: error: {shown(str(error))}"
        print(text, file=sys.stderr)
        return 1

