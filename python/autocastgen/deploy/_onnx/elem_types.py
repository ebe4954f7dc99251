"""ONNX's element types (``onnx.TensorProto.DataType``) by the numbers the ONNX standard gives them:
the export's sets of types are made when its modules are imported, before onnx is (packages.py).
tests/python/deploy/test_deploy_onnx.py checks each against onnx's."""

FLOAT = 1
UINT8 = 2
INT8 = 3
INT32 = 6
INT64 = 7
BOOL = 9
FLOAT16 = 10
DOUBLE = 11
BFLOAT16 = 16
FLOAT8E4M3FN = 17
FLOAT8E4M3FNUZ = 18
FLOAT8E5M2 = 19
FLOAT8E5M2FNUZ = 20
