"""The optional packages ``export_onnx`` needs, imported here and nowhere else in autocastgen: onnx,
onnxscript and onnxruntime (and numpy, which onnx brings; torch does not).

Note [optional packages]: ``import autocastgen`` needs none of them (pyproject.toml declares torch
alone). The modules of the ONNX export read them through the names below, each a module
of one of them imported the first time something of it is used; a package that is missing is then
an ImportError that says what to install, not a ModuleNotFoundError from deep inside the export.
``export_onnx`` asks for all three first (``require``), before it does any work.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the protos' types, for annotations: the type checker reads them, a run never does
    try:
        from onnx import GraphProto as GraphProto
        from onnx import ModelProto as ModelProto
        from onnx import NodeProto as NodeProto
        from onnx.defs import OpSchema as OpSchema
    except ImportError as error:
        raise ImportError("type checking autocastgen.deploy needs onnx: pip install onnx") from error

__all__ = ["INSTALL", "TensorProto", "helper", "numpy", "numpy_helper", "onnx", "onnxruntime", "opset",
           "ort_kernels", "require", "script_ir", "script_optimizer", "torch_lib_nn"]

INSTALL = "pip install onnx onnxscript onnxruntime"


def _missing(package: str) -> ImportError:
    return ImportError(f"autocastgen.export_onnx needs {package}, which is not installed: {INSTALL} "
                       "(scripts/requirements.txt pins the releases autocastgen is tested with)", name=package)


def _onnx() -> ModuleType:
    try:
        import onnx
        import onnx.checker
        import onnx.defs
        import onnx.helper
        import onnx.numpy_helper
    except ImportError as error:
        raise _missing("onnx") from error
    return onnx


def _onnxscript() -> ModuleType:
    try:
        import onnxscript
        import onnxscript.function_libs.torch_lib.ops.nn
        import onnxscript.ir
        import onnxscript.optimizer
    except ImportError as error:
        raise _missing("onnxscript") from error
    return onnxscript


def _onnxruntime() -> ModuleType:
    try:
        import onnxruntime
        import onnxruntime.capi._pybind_state
    except ImportError as error:
        raise _missing("onnxruntime") from error
    module: ModuleType = onnxruntime  # no stubs: Any to the type checker
    return module


def _numpy() -> ModuleType:
    try:
        import numpy
    except ImportError as error:
        raise _missing("numpy (which onnx brings)") from error
    return numpy


def require() -> None:
    """Imports the three packages now: an ImportError naming the first one missing."""
    _onnx(), _onnxscript(), _onnxruntime()


class _Lazy:
    """A module of an optional package (or something of one), imported when first used."""

    def __init__(self, load: Callable[[], Any], name: str) -> None:
        self._load = load
        self._name = name
        self._value: Any = None

    def __getattr__(self, attribute: str) -> Any:
        if self._value is None:
            self._value = self._load()
        return getattr(self._value, attribute)

    def __repr__(self) -> str:
        return f"<{self._name}, imported when first used>"


onnx = _Lazy(_onnx, "onnx")
helper = _Lazy(lambda: _onnx().helper, "onnx.helper")
numpy_helper = _Lazy(lambda: _onnx().numpy_helper, "onnx.numpy_helper")
TensorProto = _Lazy(lambda: _onnx().TensorProto, "onnx.TensorProto")
opset = _Lazy(lambda: _onnxscript().opset20, "onnxscript.opset20")
script_ir = _Lazy(lambda: _onnxscript().ir, "onnxscript.ir")
script_optimizer = _Lazy(lambda: _onnxscript().optimizer, "onnxscript.optimizer")
torch_lib_nn = _Lazy(lambda: _onnxscript().function_libs.torch_lib.ops.nn, "onnxscript's torch_lib.ops.nn")
onnxruntime = _Lazy(_onnxruntime, "onnxruntime")
ort_kernels = _Lazy(lambda: _onnxruntime().capi._pybind_state, "onnxruntime.capi._pybind_state")
numpy = _Lazy(_numpy, "numpy")
