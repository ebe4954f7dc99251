"""``python -m autocastgen.reporter FILE.json [FILE2.json] -o report.html``: the report as
``autocastgen report`` runs it (codegen/cli/verb_report.cpp; docs/report.md)."""

from __future__ import annotations

import argparse
import sys

from .._core.terminal import shown
from . import ReportError, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="autocastgen report",
                                     description="One self-contained HTML page from a statistics file, or what "
                                                 "changed between two (docs/report.md).")
    parser.add_argument("files", nargs="+", metavar="FILE.json", help="one or two statistics files")
    parser.add_argument("-o", "--output", required=True, help="the HTML file to write")
    parser.add_argument("--title", help="the page's title (default: the files' names)")
    options = parser.parse_args(argv)
    if len(options.files) > 2:
        parser.error(f"one or two statistics files, got {len(options.files)}")
    try:
        out = report(*options.files, output=options.output, title=options.title)
    except ReportError as error:
        sys.stderr.write(str(error))
        sys.stderr.write(f"autocastgen: {error.count} error{'s' if error.count != 1 else ''}; no report written\n")
        return 1
    except OSError as error:  # the page (WriteError: the file and the reason, the older page kept)
        sys.stderr.write(f"autocastgen: error: {error}\n")
        return 1
    print(f"wrote {shown(str(out))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
