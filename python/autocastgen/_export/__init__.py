"""The policy in a torch.export program (docs/export.md), private: the package's root gives the
public names (``autocastgen.export``, ``apply_policy``, ``precision_map``, ``load_program`` and
their errors); the CLI's ``apply`` and ``precision-map`` run ``python -m autocastgen._export``.

- bake.py: ``export`` and ``apply_policy`` (Note [baking a policy], Note [the program's record]),
  and ``supported()``, why this PyTorch cannot bake a program;
- places.py: module frames from a node's ``nn_module_stack`` (Note [places in an exported graph]);
- ops.py: which ops a program keeps whole (Note [which ops a program keeps]);
- program.py: a baked program's graph: weights stored once, the guard, the record (Note [the guard],
  Note [views of any layout]);
- mapping.py: the precision map;
- program_file.py: ``load_program``, a saved program read as data (Note [a program file is data]);
- cli.py: the CLI's verbs (``main``), which __main__.py runs.
"""

from .bake import apply_policy, export, precision_map, supported
from .program import ExportError
from .program_file import ProgramFileError, load_program

__all__ = ["ExportError", "ProgramFileError", "apply_policy", "export", "load_program", "precision_map", "supported"]
