"""`python -m autocastgen.advisor RECORD.json --policy BASE.yaml --dtype D [--margin-bits N] -o OUT.yaml`
(or `--fp8 SCRIPT.py`): the advisor's command line, as `autocastgen advise` runs it (docs/advise.md).
"""

import sys

from ._cli import main

if __name__ == "__main__":
    sys.exit(main())
