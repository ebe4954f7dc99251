"""What every feature of the package shares, private (docs/architecture.md, "The Python package"):

- ``terminal``: names as a terminal shows them (Note [names on a terminal]);
- ``atomic``: files written whole or not at all (Note [atomic writes]);
- ``paths``: where the package's files are: its folder, what the pip package keeps beside it
  (bin/, lib/, include/, share/) and the build tree it was copied into;
- ``runtime``: loading libautocastgen_runtime_torch.so, whose ops the package calls;
- ``traced``: the own state under torch.compile (Note [scopes under torch.compile]);
- ``ranges``: what a record's ranges say for a dtype, the advisor's range proposal that the report
  shows too.

Importing this folder imports none of them: ``terminal``, ``atomic``, ``paths`` and ``ranges`` import
without torch (tests read files with them in processes that never load it).
"""

__all__: list[str] = []
