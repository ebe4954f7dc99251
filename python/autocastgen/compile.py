"""``autocastgen.compile``: where the documentation of ``compile_policy`` names its errors
(``autocastgen.compile.CacheError``, docs/python.md). The code is in autocastgen.policy (_compile.py);
these are the same objects."""

from .policy import CACHE_VARIABLE, CacheError, CompiledPolicy, CompileError, cache_dir, compile_policy

__all__ = ["CACHE_VARIABLE", "CacheError", "CompileError", "CompiledPolicy", "cache_dir", "compile_policy"]
