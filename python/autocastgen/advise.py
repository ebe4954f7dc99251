"""`python -m autocastgen.advise RECORD.json --policy BASE.yaml --dtype D [--margin-bits N] -o OUT.yaml`:
the advisor's range proposal from a record file, as `autocastgen advise` runs it (docs/advise.md).

The advisor lives in autocastgen/advisor.py (``autocastgen.advise`` is its function); this module
is only the command, so that the package does not import it (runpy would warn).
"""

import sys

from autocastgen.advisor import main

if __name__ == "__main__":
    sys.exit(main())
