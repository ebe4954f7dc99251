"""`python -m autocastgen._export apply|precision-map ...`: the CLI's export verbs, as `autocastgen
apply` and `autocastgen precision-map` run them (codegen/cli/verb_export.cpp; docs/export.md)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
