"""The policy advisor: a policy that keeps float32 only at the places measured ranges or a
validation need (docs/advise.md).

    advice = autocastgen.advise(model, inputs, policy="cpu.yaml", dtype=torch.float16)
    advice.moved        # each (module, op) moved to float32, with its measured reason
    advice.share        # GEMM calls and FLOPs in the lower-precision dtype, before and after
    advice.write("advised.yaml")

and, from a record file taken in record-only mode with the model attached (ranges only, no model
to run), ``autocastgen advise RECORD.json --policy BASE.yaml --dtype float16 -o OUT.yaml``, which
runs ``python -m autocastgen.advisor`` with the same arguments: the proposal, the search and the
policy writer exist once, in this package's modules:
- _search.py: the search (``advise``; Note [the advisor], Note [risk order]);
- _record.py: what it reads (the record's rows, the base policy, the dtype) and AdviseError;
- _advice.py: the advice (Advice, Moved, Run) and the policy text it writes (Note [the root],
  Note [module sections]);
- _run.py: running the model and checking a run (Note [default tolerance]);
- _fp8.py: fp8 places (Note [fp8 places]);
- _cli.py: the command line (``main``) and its range proposal (``advise_record``);
and the range proposal itself (``measure``, ``Place``), which the report shows too, in
autocastgen/_core/ranges.py.
"""

from .._core.ranges import Place, measure
from ._advice import Advice, Moved, Run
from ._cli import advise_record, main
from ._fp8 import Fp8Advice, Fp8Place
from ._record import AdviseError, base_autocast, read_record
from ._search import advise

__all__ = [
    "Advice",
    "AdviseError",
    "Fp8Advice",
    "Fp8Place",
    "Moved",
    "Place",
    "Run",
    "advise",
    "advise_record",
    "base_autocast",
    "main",
    "measure",
    "read_record",
]
