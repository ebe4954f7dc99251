"""autocastgen from Python.

Importing the package loads ``libautocastgen_runtime_torch.so`` (unless a backend library brought
it already) and offers to Python:

* autocastgen's own autocast state, the C++ ``autocastgen::AutocastScope`` and worker-thread
  capture (``autocast``, ``capture_state``, ``state_guard``, ``with_state``, ...)::

      with autocastgen.autocast("cpu", dtype=torch.bfloat16):
          y = model(x)

* runtime policies: ``load_policy(path_or_yaml_text)``, ``register_runtime_policy``,
  ``clear_runtime_policies`` (errors: ``PolicyError`` with the CLI's diagnostics);
* compiled policies: ``compile_policy(path)`` generates a policy's typed wrappers, compiles them
  once (cached on disk) and loads them;
* precision by place: ``attach(model)`` names the running module for a policy's module-scoped
  rules (``modules:``) and for the insight below;
* ``GradScaler``, a drop-in for ``torch.amp.GradScaler`` on autocastgen's fused scaler ops;
* per-op autocast statistics, the non-finite watch and the range record:
  ``with autocastgen.stats() as s: ...``, ``autocastgen.watch("raise")``,
  ``autocastgen.record("ranges.json")`` (docs/insight.md);
* the policy advisor: ``advise(model, inputs, policy=..., dtype=torch.float16)`` returns a policy
  that keeps float32 only where measured ranges or a validation need it (docs/advise.md);
* the precision report: ``report("run.json", output="run.html")``, one HTML page (docs/report.md);
* the policy in a torch.export program: ``export(model, args, device=..., dtype=...)`` and
  ``apply_policy(program, ...)``: explicit casts, run without autocastgen; ``precision_map``
  (docs/export.md); ``load_program(path)`` reads a saved program as data, running no code from it
  (docs/security.md).
* deployment of a baked program: ``export_onnx(program)`` (ONNX that runs in ONNX Runtime with the
  policy's precision), ``export_aoti(program, package_path=...)`` (an AOTInductor package that
  rounds as eager does) (docs/deploy.md).
* where people train: ``autocastgen.integrations.transformers.AutocastgenCallback`` for
  transformers' Trainer, ``autocastgen.integrations.lightning.AutocastgenPrecision`` for Lightning,
  each importing its framework only when imported itself (docs/training.md).

See docs/python.md.
"""

from __future__ import annotations

import sys

from ._core.runtime import release_folder

# First: a torch release the wheel has no runtime for is an ImportError that says so (Note [one
# runtime per release]), before the modules below define torch ops with APIs that release may lack.
release_folder()

from . import compile as compile  # the documented autocastgen.compile.CacheError (a re-export)
from . import deploy, distributed, insight, integrations
from ._core.paths import build_info, build_tree
from ._core.runtime import load_runtime
from ._export import ExportError, ProgramFileError, apply_policy, export, load_program, precision_map
from .advisor import Advice, AdviseError, advise
from .deploy import DeployError, OnnxExport, export_aoti, export_onnx
from .grad_scaler import GradScaler
from .insight import Stats, record, stats, watch
from .places import Attachment, ModuleScope, attach
from .policy import (
    CompiledPolicy,
    CompileError,
    PolicyError,
    cache_dir,
    clear_runtime_policies,
    compile_policy,
    forget_fp8_selections,
    fp8_auto_rule,
    fp8_selection_file,
    fp8_selections,
    load_policy,
    register_runtime_policy,
    shipped_policy,
)
from .reporter import report
from .state import (
    AutocastState,
    autocast,
    capture_state,
    get_dtype,
    is_cache_enabled,
    is_enabled,
    nesting,
    state_guard,
    with_state,
)


def _version() -> str:
    """The package's version (CMakeLists.txt's project version), recorded by the build in the pip
    package and the wheel (``_build_info``) and in a build tree (``_build_tree``)."""
    for info in (build_info(), build_tree()):
        if info is not None and hasattr(info, "VERSION"):
            return str(info.VERSION)
    return "unknown"


__version__ = _version()

__all__ = [
    "Advice",
    "AdviseError",
    "Attachment",
    "AutocastState",
    "CompileError",
    "CompiledPolicy",
    "DeployError",
    "ExportError",
    "GradScaler",
    "ModuleScope",
    "OnnxExport",
    "PolicyError",
    "ProgramFileError",
    "Stats",
    "advise",
    "apply_policy",
    "attach",
    "autocast",
    "cache_dir",
    "capture_state",
    "clear_runtime_policies",
    "compile_policy",
    "deploy",
    "distributed",
    "export",
    "export_aoti",
    "export_onnx",
    "forget_fp8_selections",
    "fp8_auto_rule",
    "fp8_selection_file",
    "fp8_selections",
    "get_dtype",
    "insight",
    "integrations",
    "is_cache_enabled",
    "is_enabled",
    "load_policy",
    "load_program",
    "load_runtime",
    "nesting",
    "precision_map",
    "record",
    "register_runtime_policy",
    "report",
    "shipped_policy",
    "state_guard",
    "stats",
    "watch",
    "with_state",
]

load_runtime()
if "torch.distributed.tensor" in sys.modules:  # DTensors may reach the scaler op directly
    distributed.register_dtensor_ops()
