"""The training frameworks ``autocastgen.integrations`` plugs into, imported here and nowhere else in
autocastgen: transformers (its ``Trainer``) and Lightning.

Note [the frameworks' boundary]: ``import autocastgen`` (and ``import autocastgen.integrations``)
imports none of them; pyproject.toml declares torch alone and an extra per framework
(``autocastgen[transformers]``, ``[accelerate]``, ``[lightning]``) with the releases the tests run
(scripts/requirements-models.txt). An integration module asks for its framework's base class when it
is itself imported (its classes subclass them: a ``TrainerCallback``, Lightning's ``MixedPrecision``):
``from ._packages import TrainerCallback`` imports transformers then (this module's ``__getattr__``),
and a framework that is missing is an ImportError that names the extra to install, not a
ModuleNotFoundError from inside the integration. The type checker reads the classes from the
``TYPE_CHECKING`` block (as Any: pyproject.toml follows none of the frameworks). Accelerate needs
no module of ours: its ``Accelerator`` enters ``torch.autocast``, which a loaded policy follows
(docs/training.md).
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the base classes, for the type checker; a run imports them in __getattr__
    try:
        from lightning.pytorch.plugins.precision import MixedPrecision as MixedPrecision
        from transformers import TrainerCallback as TrainerCallback
    except ImportError as error:
        raise ImportError("type checking autocastgen.integrations needs transformers and lightning: "
                          "pip install autocastgen[transformers,lightning]") from error

__all__ = ["MixedPrecision", "TrainerCallback", "lightning_pytorch", "transformers_package"]


def _missing(what: str, extra: str, error: ImportError) -> ImportError:
    return ImportError(f"autocastgen.integrations.{extra} needs {what}, which is not installed: "
                       f"pip install autocastgen[{extra}] ({error})", name=error.name)


def transformers_package() -> ModuleType:
    """``transformers``, with its ``TrainerCallback``."""
    try:
        import transformers
        import transformers.trainer_callback
    except ImportError as error:
        raise _missing("transformers", "transformers", error) from error
    module: ModuleType = transformers
    return module


def lightning_pytorch() -> ModuleType:
    """``lightning.pytorch`` (the ``lightning`` package), with its precision plugins."""
    try:
        import lightning.pytorch
        import lightning.pytorch.plugins.precision
    except ImportError as error:
        raise _missing("Lightning", "lightning", error) from error
    module: ModuleType = lightning.pytorch
    return module


def __getattr__(name: str) -> Any:
    """The frameworks' base classes, each importing its framework the first time it is asked for."""
    if name == "MixedPrecision":
        return lightning_pytorch().plugins.precision.MixedPrecision
    if name == "TrainerCallback":
        return transformers_package().TrainerCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
