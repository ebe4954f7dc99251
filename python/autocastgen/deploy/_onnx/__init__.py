"""``export_onnx``: a baked program as ONNX that runs in ONNX Runtime with the policy's precision
(docs/deploy.md), private to autocastgen.deploy.

- export.py: ``export_onnx`` and ``OnnxExport``;
- passes.py: the graph pass (Note [the ONNX pass], Note [one rounding per op]);
- kernels.py: ONNX Runtime's kernel registry;
- translations.py: torch.onnx translations of attention (Note [attention in low precision]);
- fp8.py: fp8 as DequantizeLinear and QuantizeLinear;
- elem_types.py: ONNX's element types by number;
- packages.py: onnx, onnxscript and onnxruntime, imported here only (Note [optional packages]).
"""

from .export import NO_KERNEL_CHOICES, OnnxExport, export_onnx

__all__ = ["NO_KERNEL_CHOICES", "OnnxExport", "export_onnx"]
