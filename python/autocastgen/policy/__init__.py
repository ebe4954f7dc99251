"""Policies from Python: loaded by the runtime (no compiler), compiled into typed wrappers, and fp8's
selection of the GEMMs that run in fp8 (docs/python.md, docs/fp8.md).

- _load.py: ``load_policy``, ``register_runtime_policy``, ``clear_runtime_policies``,
  ``shipped_policy`` and ``PolicyError`` (the runtime reads the policy, ``extends:`` included);
- _compile.py: ``compile_policy``, generated and compiled just in time, cached on disk (Note [the
  compile cache]); it builds each library in a child process that runs autocastgen/_build_library.py;
- _fp8.py: the fp8 recipe's ``select:`` (Note [fp8 selection] in runtime/torch/fp8/select.cpp).

``autocastgen.compile`` keeps the names compile_policy's documentation gives (``autocastgen.compile.CacheError``).
"""

from ._compile import CACHE_VARIABLE, CacheError, CompiledPolicy, CompileError, cache_dir, compile_policy
from ._fp8 import forget_fp8_selections, fp8_auto_rule, fp8_selection_file, fp8_selections
from ._load import PolicyError, clear_runtime_policies, load_policy, register_runtime_policy, shipped_policy

__all__ = [
    "CACHE_VARIABLE",
    "CacheError",
    "CompileError",
    "CompiledPolicy",
    "PolicyError",
    "cache_dir",
    "clear_runtime_policies",
    "compile_policy",
    "forget_fp8_selections",
    "fp8_auto_rule",
    "fp8_selection_file",
    "fp8_selections",
    "load_policy",
    "register_runtime_policy",
    "shipped_policy",
]
