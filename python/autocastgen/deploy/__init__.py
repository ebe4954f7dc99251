"""Deploying a baked program: ONNX that loads and runs in ONNX Runtime with the policy's precision
(`export_onnx`), AOTInductor packages that round as eager does (`export_aoti`), neither needing
autocastgen to run (docs/deploy.md).

- _program.py: the program a deployment starts from (``deployable_program``; Note [scalar operands]);
- _fp8.py: what ONNX can take of an fp8 policy's GEMMs (Note [fp8 in a deployed program]);
- _aoti.py: ``export_aoti``;
- _onnx/: ``export_onnx``, the ONNX pass and what it needs of onnx, onnxscript and onnxruntime, which
  it imports at one place (_onnx/packages.py: Note [optional packages]).
"""

from ._aoti import export_aoti
from ._onnx import NO_KERNEL_CHOICES, OnnxExport, export_onnx
from ._program import DeployError, deployable_program

__all__ = ["DeployError", "NO_KERNEL_CHOICES", "OnnxExport", "deployable_program", "export_aoti", "export_onnx"]
