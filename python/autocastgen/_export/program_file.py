"""A saved torch.export program read as data: no pickle that can run code, no more bytes than the
program declares (Note [a program file is data]). Every reader of a ``.pt2`` in autocastgen calls
``load_program``.

Note [a program file is data]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
``torch.export.load`` trusts its file: a pickled part that a weights-only load refuses is loaded
again with pickle (sample inputs, and weights and constants marked ``use_pickle``), opaque objects
are unpickled as they are, and the graph's shape expressions are parsed by ``sympy.sympify``, which
evaluates Python. A precision map is what a reviewer runs on a program someone sent them, so we
read the archive ourselves and hand PyTorch's deserializer only what is checked:

* the graph (``models/model.json``): every operator a node calls is one of PyTorch's operators
  (``torch.ops...``, resolved by name, or the symbolic-shape functions PyTorch's own serializer
  writes), and every shape expression holds only numbers, symbol names, arithmetic and the sympy
  classes PyTorch writes: nothing that could call into Python;
* pickled parts are read weights-only, with no fallback; custom and opaque objects, which only
  pickle can make, need ``trusted=True`` (then ``torch.export.load`` reads the whole file);
* raw weights: a stored record must hold exactly the bytes its tensors' declared shapes span, and
  that is checked against the zip's directory before anything is decompressed; all declared
  bytes together must fit in the machine's memory. ``weights=False`` (the precision map) reads no
  weight at all: the tensors are meta tensors of their declared shapes.
"""

from __future__ import annotations

import ast
import functools
import io
import json
import math
import os
import re
import zipfile
import zlib
from collections.abc import Iterator
from typing import Any

import torch

# The graph and the payload configs are JSON; a file past these is no program torch.export wrote
# for a model that fits in memory (a 70B model's graph is tens of MB).
_GRAPH_BYTES = 1 << 30
_CONFIG_BYTES = 256 << 20
_EXPRESSION_CHARS = 100_000
_CHUNK = 16 << 20

# Names a shape expression may call or name: sympy's classes as PyTorch's serializer prints them
# (srepr: Symbol('s0', positive=True, integer=True), Add(...), Integer(2)) and PyTorch's own sympy
# functions (torch.utils._sympy.functions). No name here turns a string into code.
_SYMPY_NAMES = frozenset({
    "Symbol", "Integer", "Float", "Rational", "Add", "Mul", "Pow", "Mod", "Max", "Min", "Abs", "floor",
    "ceiling", "sqrt", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "Equality", "Unequality", "StrictLessThan",
    "LessThan", "StrictGreaterThan", "GreaterThan", "And", "Or", "Not", "Xor", "Piecewise", "ExprCondPair",
    "true", "false", "True", "False", "oo", "zoo", "nan", "pi", "E",
    "FloorDiv", "ModularIndexing", "Where", "PythonMod", "CleanDiv", "CeilToInt", "FloorToInt", "CeilDiv",
    "LShift", "RShift", "PowByNatural", "FloatPow", "FloatTrueDiv", "IntTrueDiv",
    "IsNonOverlappingAndDenseIndicator", "TruncToFloat", "TruncToInt", "RoundToInt", "RoundDecimal", "ToFloat",
    "Identity", "IntInfinity", "NegativeIntInfinity", "int_oo",
    "BitwiseFn_bitwise_and", "BitwiseFn_bitwise_or", "BitwiseFn_bitwise_xor",
    *(f"OpaqueUnaryFn_{name}" for name in ("acos", "asin", "asinh", "atan", "cos", "cosh", "exp", "log", "log2",
                                          "sin", "sinh", "sqrt", "tan", "tanh")),
})
_SYMBOL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_NUMBER_TEXT = re.compile(r"[-+]?(?:[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|inf|nan)")
_OP_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ProgramFileError(ValueError):
    """A saved program refused as it stands: the message names the file, the part of it and why."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(f"{path}: {what}")
        self.path = path


def load_program(path: str | os.PathLike[str], *, trusted: bool = False,
                 weights: bool = True) -> torch.export.ExportedProgram:
    """The program ``torch.export.save`` wrote to ``path``, read as data (Note [a program file is
    data]). ``trusted=True`` reads it with ``torch.export.load`` as it is, pickle included: only for
    a file you trust as you trust code. ``weights=False`` reads the graph alone (weights and tensor
    constants become meta tensors of their declared shapes; no sample inputs).

    Raises:
        ProgramFileError: what was refused, with the member of the archive and a position where
            there is one.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ProgramFileError(path, "no such file")
    if trusted:
        return torch.export.load(path)
    with _Archive(path) as archive:
        return archive.program(weights=weights)


class _Archive:
    """One PT2 archive: its members under one root folder, each read within a bound."""

    def __init__(self, path: str) -> None:
        from torch.export.pt2_archive import constants

        self.path = path
        self.c = constants
        try:
            self.zip = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError, ValueError) as error:
            raise self.error(f"not a program archive (torch.export.save writes a zip file): {error}") from None
        names = self.zip.namelist()
        root = names[0].split("/", 1)[0] + "/" if names and "/" in names[0] else ""
        if not root or any(not name.startswith(root) for name in names):
            raise self.error("not a program archive: its members are not under one folder, as torch.export.save "
                             "writes them")
        self.members = {info.filename[len(root):]: info for info in self.zip.infolist()}

    def __enter__(self) -> _Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.zip.close()

    def error(self, what: str) -> ProgramFileError:
        return ProgramFileError(self.path, what)

    def has(self, name: str) -> bool:
        return name in self.members

    def size(self, name: str) -> int:
        return self.member(name).file_size

    def member(self, name: str) -> zipfile.ZipInfo:
        info = self.members.get(name)
        if info is None:
            raise self.error(f"{name}: missing (torch.export.save writes it)")
        return info

    def chunks(self, name: str, limit: int) -> Iterator[bytes]:
        """The member's bytes, refused before decompressing when its directory entry declares more
        than ``limit``. Each read asks for no more than is left of the declared size, so a stream
        that inflates past it is inflated at most one of zipfile's minimum reads (4 KiB) further
        (zipfile stops at the declared size and checks the CRC there); one that ends short of it,
        which zipfile reads without a complaint when the CRC agrees, is refused."""
        info = self.member(name)
        if info.file_size > limit:
            raise self.error(f"{name}: {info.file_size} bytes, more than the {limit} a program's {_what(name)} "
                             "may hold")
        left = info.file_size
        try:
            with self.zip.open(info) as stream:
                while left and (chunk := stream.read(min(_CHUNK, left))):
                    left -= len(chunk)
                    yield chunk
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError, OSError) as error:
            raise self.error(f"{name}: cannot be read: {error}") from None
        if left:
            raise self.error(f"{name}: inflates to {info.file_size - left} bytes where the zip's directory declares "
                             f"{info.file_size}")

    def read(self, name: str, limit: int) -> bytes:
        return b"".join(self.chunks(name, limit))

    def text(self, name: str, limit: int) -> str:
        try:
            return self.read(name, limit).decode("utf-8")
        except UnicodeDecodeError as error:
            raise self.error(f"{name}: not UTF-8 text (byte {error.start})") from None

    def json(self, name: str, limit: int) -> Any:
        try:
            return json.loads(self.text(name, limit))
        except json.JSONDecodeError as error:
            raise self.error(f"{name}:{error.lineno}:{error.colno}: not valid JSON: {error.msg}") from None
        except RecursionError:
            raise self.error(f"{name}: nested too deeply to be a program's {_what(name)}") from None

    def program(self, *, weights: bool) -> torch.export.ExportedProgram:
        from torch._export.serde import schema
        from torch._export.serde.serialize import ExportedProgramDeserializer, _dict_to_dataclass

        c = self.c
        if self.text(c.ARCHIVE_FORMAT_PATH, 64) != c.ARCHIVE_FORMAT_VALUE:
            raise self.error(f"{c.ARCHIVE_FORMAT_PATH}: not a PT2 archive")
        version = self.text(c.ARCHIVE_VERSION_PATH, 64)
        if version != c.ARCHIVE_VERSION_VALUE:
            raise self.error(f"{c.ARCHIVE_VERSION_PATH}: archive version {version!r}; this PyTorch reads "
                             f"{c.ARCHIVE_VERSION_VALUE!r}")
        if self.has("byteorder") and self.text("byteorder", 16) != "little":
            raise self.error("byteorder: written on a big-endian machine; autocastgen reads little-endian programs "
                             "only")
        graph_name = c.MODELS_FILENAME_FORMAT.format("model")
        document = self.json(graph_name, _GRAPH_BYTES)
        _check_graph(document, lambda what: self.error(f"{graph_name}: {what}"))
        try:
            serialized = _dict_to_dataclass(schema.ExportedProgram, document)
        except Exception as error:  # noqa: BLE001 - whatever the schema's reader says of a malformed graph
            raise self.error(f"{graph_name}: not a program graph of PyTorch {torch.__version__}'s schema: "
                             f"{_first_line(error)}") from None
        budget = _Budget(self, _memory_bytes())
        state_dict = self.payloads(c.WEIGHTS_CONFIG_FILENAME_FORMAT.format("model"), c.WEIGHTS_DIR, weights, budget)
        constants = self.payloads(c.CONSTANTS_CONFIG_FILENAME_FORMAT.format("model"), c.CONSTANTS_DIR, weights, budget)
        inputs = None
        sample_inputs = c.SAMPLE_INPUTS_FILENAME_FORMAT.format("model")
        if weights and self.has(sample_inputs) and self.size(sample_inputs):
            inputs = self.unpickle(sample_inputs, budget, "sample inputs")
            if not (isinstance(inputs, tuple) and len(inputs) == 2 and isinstance(inputs[0], tuple)
                    and isinstance(inputs[1], dict)):
                raise self.error(f"{sample_inputs}: sample inputs are (args, kwargs); the file holds a "
                                 f"{type(inputs).__name__}")
        try:
            return ExportedProgramDeserializer().deserialize(serialized, state_dict, constants, inputs)
        except Exception as error:  # noqa: BLE001 - the deserializer's own refusal, located by the graph's name
            raise self.error(f"{graph_name}: PyTorch {torch.__version__} cannot rebuild the program: "
                             f"{_first_line(error)}") from None

    def payloads(self, config_name: str, folder: str, weights: bool, budget: _Budget) -> dict[str, Any]:
        """Weights or constants by name, as torch.export.save described them in ``config_name``."""
        from torch._export.serde import schema
        from torch._export.serde.serialize import _dict_to_dataclass

        legacy = folder + "model.pt"
        if self.has(legacy):  # PyTorch before 2.8 pickled them all in one file
            if not weights:
                raise self.error(f"{legacy}: an archive of PyTorch before 2.8, whose graph cannot be read without "
                                 "its weights")
            legacy_payloads = self.unpickle(legacy, budget, "weights")
            if not isinstance(legacy_payloads, dict):
                raise self.error(f"{legacy}: weights are a dict; the file holds a {type(legacy_payloads).__name__}")
            return legacy_payloads
        if not self.has(config_name):
            raise self.error(f"{config_name}: missing (torch.export.save writes it)")
        try:
            payload_config = _dict_to_dataclass(
                schema.PayloadConfig, self.json(config_name, _CONFIG_BYTES))
            config: dict[str, Any] = payload_config.config
            if not isinstance(config, dict):  # the schema's reader takes any value for a field
                raise TypeError(f"its config is a {type(config).__name__}, not a dict")
        except ProgramFileError:
            raise
        except Exception as error:  # noqa: BLE001 - a malformed config, in the schema reader's words
            raise self.error(f"{config_name}: not a payload config: {_first_line(error)}") from None
        c = self.c
        tensors = _TensorRecords(self, folder, config, weights, budget)
        found: dict[str, Any] = {}
        for name, meta in config.items():
            if not isinstance(meta.path_name, str) or not _OP_PART.fullmatch(meta.path_name):
                raise self.error(f"{config_name}: {name!r} names the file {meta.path_name!r}, which is no "
                                 "payload's name")
            member = folder + meta.path_name
            opaque = folder == c.CONSTANTS_DIR and meta.path_name.startswith(
                (c.CUSTOM_OBJ_FILENAME_PREFIX, c.OPAQUE_OBJ_FILENAME_PREFIX))
            if opaque:
                raise self.error(f"{member}: the constant {name!r} is a custom object, which only pickle can make: "
                                 "it can run code; load the program only if you trust it as code (--trust-program, "
                                 "trusted=True)")
            if meta.tensor_meta is None:
                raise self.error(f"{config_name}: {name!r} has no tensor_meta")
            if not isinstance(meta.tensor_meta.requires_grad, bool):
                raise self.error(f"{config_name}: {name!r} has a requires_grad that is not a bool")
            if meta.use_pickle and weights:
                value = self.unpickle(member, budget, "a pickled tensor")
                if not isinstance(value, torch.Tensor):
                    raise self.error(f"{member}: {name!r} is a tensor; the file holds a {type(value).__name__}")
                found[name] = value
                continue
            # Read unpickled (a map's meta tensor when not weights): as torch.export.save described it.
            view = _meta_tensor(meta.tensor_meta, self.error, member) if meta.use_pickle else tensors.view(meta, member)
            found[name] = (torch.nn.Parameter(view, requires_grad=meta.tensor_meta.requires_grad) if meta.is_param
                           else view)
        return found

    def unpickle(self, name: str, budget: _Budget, what: str) -> Any:
        """A pickled part, weights-only, and never again with pickle when that refuses."""
        data = self.read(name, budget.take(self.size(name), name))
        try:
            return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
        except Exception as error:  # noqa: BLE001 - the weights-only unpickler's refusal, in its words
            raise self.error(f"{name}: {what} that a weights-only load refuses ({_unpickler_reason(error)}): "
                             "loading it would run pickle, which can run code; load the program only if you trust it "
                             "as code (--trust-program, trusted=True)") from None


class _Budget:
    """The bytes a program's weights, constants and inputs may take together: the machine's memory."""

    def __init__(self, archive: _Archive, limit: int) -> None:
        self.archive, self.left, self.limit = archive, limit, limit

    def take(self, nbytes: int, name: str) -> int:
        if nbytes > self.left:
            raise self.archive.error(f"{name}: the program's weights and inputs declare more bytes than this machine's "
                                     f"memory ({self.limit}); refused before decompressing")
        self.left -= nbytes
        return nbytes


class _TensorRecords:
    """The raw tensor records of one payload folder: each checked against the extent of the tensors
    that view it, then read once (views of one storage share it, as torch.export.save wrote them)."""

    def __init__(self, archive: _Archive, folder: str, config: dict[str, Any], weights: bool, budget: _Budget) -> None:
        self.archive, self.folder, self.weights, self.budget = archive, folder, weights, budget
        self.storages: dict[str, torch.Tensor] = {}
        self.extent: dict[str, tuple[int, torch.dtype]] = {}
        for meta in config.values():
            if meta.use_pickle or meta.tensor_meta is None or not isinstance(meta.path_name, str):
                continue
            member = folder + meta.path_name
            dtype, sizes, strides, offset = _layout(meta.tensor_meta, archive.error, member)
            numel = math.prod(sizes)
            end = 0 if numel == 0 else offset + sum((n - 1) * s for n, s in zip(sizes, strides)) + 1
            nbytes = end * _element_size(dtype)
            known = self.extent.get(member)
            if known is not None and known[1] != dtype:
                raise archive.error(f"{member}: viewed as {known[1]} and as {dtype}")
            self.extent[member] = (max(nbytes, known[0] if known else 0), dtype)

    def view(self, meta: Any, member: str) -> torch.Tensor:
        dtype, sizes, strides, offset = _layout(meta.tensor_meta, self.archive.error, member)
        if not self.weights:
            return _meta_tensor(meta.tensor_meta, self.archive.error, member)
        storage = self.storages.get(member)
        if storage is None:
            storage = self.storages[member] = self.read(member)
        return torch.as_strided(storage, sizes, strides, offset)

    def read(self, member: str) -> torch.Tensor:
        extent, dtype = self.extent[member]
        stored = self.archive.size(member)
        if stored == 0:  # torch.export.save stores a fake tensor as no bytes; torch loads it as zeros
            self.budget.take(extent, member)
            return torch.zeros(extent // _element_size(dtype), dtype=dtype)
        if stored != extent:
            raise self.archive.error(f"{member}: stores {stored} bytes where its tensors' declared shapes span "
                                     f"{extent}; refused before decompressing")
        self.budget.take(stored, member)
        flat = torch.empty(stored, dtype=torch.uint8)
        at = 0
        for chunk in self.archive.chunks(member, stored):
            flat[at:at + len(chunk)] = torch.frombuffer(bytearray(chunk), dtype=torch.uint8)
            at += len(chunk)
        return flat.view(dtype)


def _layout(tensor_meta: Any, error: Any, member: str) -> tuple[torch.dtype, list[int], list[int], int]:
    from torch._export.serde.serialize import deserialize_scalar_type

    def integer(value: Any, what: str) -> int:
        number = getattr(value, "as_int", None) if getattr(value, "type", None) == "as_int" else None
        if not isinstance(number, int) or number < 0:
            raise error(f"{member}: a stored tensor's {what} must be a non-negative integer")
        return number

    try:
        dtype = deserialize_scalar_type(tensor_meta.dtype)
    except Exception:  # noqa: BLE001 - an unknown scalar type's number
        raise error(f"{member}: unknown dtype {tensor_meta.dtype!r}") from None
    if not (isinstance(tensor_meta.sizes, list) and isinstance(tensor_meta.strides, list)):
        raise error(f"{member}: a stored tensor's sizes and strides must be lists")
    sizes = [integer(size, "size") for size in tensor_meta.sizes]
    strides = [integer(stride, "stride") for stride in tensor_meta.strides]
    if len(sizes) != len(strides):
        raise error(f"{member}: {len(sizes)} sizes and {len(strides)} strides")
    return dtype, sizes, strides, integer(tensor_meta.storage_offset, "storage offset")


def _meta_tensor(tensor_meta: Any, error: Any, member: str) -> torch.Tensor:
    dtype, sizes, strides, offset = _layout(tensor_meta, error, member)
    return torch.empty_strided(sizes, strides, dtype=dtype, device="meta").as_strided(sizes, strides, offset)


def _element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype, device="meta").element_size()


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def _what(name: str) -> str:
    return "graph" if name.startswith("models/") else "part"


def _unpickler_reason(error: BaseException) -> str:
    """The weights-only unpickler's own reason (which global it refused), without PyTorch's advice
    around it: what follows its "WeightsUnpickler error:" to the end of that sentence, else the
    first paragraph after the opening one that is not the pointer to the documentation."""
    text = str(error)
    if not text.startswith("Weights only load failed"):
        return _first_line(error)
    for line in text.splitlines():
        _, marker, reason = line.partition("WeightsUnpickler error: ")
        if marker and reason.strip():
            return reason.strip().split(". ")[0].rstrip(".")[:300]
    for paragraph in [part.strip() for part in text.split("\n\n") if part.strip()][1:]:
        if not paragraph.startswith("Check the documentation"):
            return paragraph.splitlines()[0].rstrip(".")[:300]
    return _first_line(error)


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:500]


# --- the graph -----------------------------------------------------------------------------------

@functools.cache
def _operator_names() -> frozenset[str]:
    """The non-torch.ops targets PyTorch's serializer writes (its symbolic-shape functions), by the
    names it writes them under."""
    from torch._export.serde.serialize import _SYM_OPS

    return frozenset(f"{op.__module__}.{op.__name__}" for op in _SYM_OPS)


def _is_operator(name: str) -> bool:
    """Whether ``name`` names one of PyTorch's operators, resolved by name without calling anything."""
    parts = name.split(".")
    if parts[:2] != ["torch", "ops"] or len(parts) not in (4, 5):
        return name in _operator_names()
    if not all(_OP_PART.fullmatch(part) and not part.startswith("__") for part in parts[2:]):
        return False
    target: Any = torch.ops
    try:
        for part in parts[2:]:
            target = getattr(target, part)
    except (AttributeError, RuntimeError):
        return False
    kind = torch._ops.OpOverload if len(parts) == 5 else torch._ops.HigherOrderOperator
    return isinstance(target, kind)


def _check_graph(document: Any, error: Any) -> None:
    """Every node's operator is PyTorch's and every shape expression only arithmetic, before
    PyTorch's deserializer resolves or sympifies any of them."""
    module = document.get("graph_module") if isinstance(document, dict) else None
    graph = module.get("graph") if isinstance(module, dict) else None
    if not isinstance(graph, dict):
        raise error("no graph_module.graph: not a program's graph")
    for where, value in _walk(document, "graph"):
        if (isinstance(value, dict) and isinstance(value.get("target"), str) and "inputs" in value
                and "outputs" in value):
            target = value["target"]
            if target.startswith("#"):
                raise error(f"{where}: calls the extension operator {target[:200]!r}, which PyTorch resolves through "
                            "registered handlers that can run code; load the program only if you trust it as code "
                            "(--trust-program, trusted=True)")
            if not _is_operator(target):
                raise error(f"{where}: calls {target[:200]!r}, which is not an operator of this PyTorch; if it is a "
                            "custom op, import the library that registers it before reading the program (the CLI: "
                            "--import MODULE)")
        elif isinstance(value, dict) and "expr_str" in value:
            _check_expression(value["expr_str"], lambda what, where=where: error(f"{where}: {what}"))


def _walk(value: Any, where: str) -> Iterator[tuple[str, Any]]:
    """(place, value) for every value of the document, depth first; a place names the node a value
    is in (``graph.nodes[3] (add_1)``), so that building it costs nothing per value."""
    stack = [(where, value)]
    while stack:
        where, value = stack.pop()
        yield where, value
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "nodes" and isinstance(item, list):
                    stack.extend((f"{where}.nodes[{i}]" + (f" ({name})" if (name := _node_name(node)) else ""), node)
                                 for i, node in enumerate(item))
                elif key.endswith("_values") and isinstance(item, dict):  # the graph's values by name
                    stack.extend((f"{where}.{key}[{str(name)[:100]!r}]", entry) for name, entry in item.items())
                else:
                    stack.append((where, item))
        elif isinstance(value, list):
            stack.extend((where, item) for item in value)


def _node_name(node: Any) -> str:
    if not (isinstance(node, dict) and "target" in node and isinstance(node.get("outputs"), list) and node["outputs"]):
        return ""
    first = node["outputs"][0]
    for kind in ("as_tensor", "as_sym_int", "as_sym_float", "as_sym_bool"):
        named = first.get(kind) if isinstance(first, dict) else None
        if isinstance(named, dict) and isinstance(named.get("as_name", named.get("name")), str):
            return str(named.get("as_name", named.get("name")))[:100]
    return ""


def _check_expression(text: Any, error: Any) -> None:
    """A shape expression as PyTorch writes it, or refused: sympify evaluates it as Python."""
    if not isinstance(text, str):
        raise error("a shape expression that is not a string")
    if len(text) > _EXPRESSION_CHARS:
        raise error(f"a shape expression of {len(text)} characters (at most {_EXPRESSION_CHARS})")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise error(f"the shape expression {text[:200]!r} is not an expression PyTorch writes") from None
    for node in ast.walk(tree):
        allowed = isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.operator,
                                    ast.unaryop, ast.boolop, ast.cmpop, ast.Load, ast.keyword))
        if isinstance(node, ast.Constant):
            allowed = (isinstance(node.value, (bool, int, float))
                       or (isinstance(node.value, str) and _quoted_ok(node, tree)))
        elif isinstance(node, ast.Name):
            allowed = node.id in _SYMPY_NAMES or bool(re.fullmatch(r"[a-z]+[0-9]+", node.id))
        elif isinstance(node, ast.Call):
            allowed = isinstance(node.func, ast.Name) and node.func.id in _SYMPY_NAMES
        elif isinstance(node, ast.keyword):
            allowed = node.arg is not None and _OP_PART.fullmatch(node.arg) is not None and not node.arg.startswith("_")
        if not allowed:
            kind = {"Call": "a call", "Name": "the name", "Constant": "the constant", "Attribute": "an attribute"}.get(
                type(node).__name__, f"a {type(node).__name__}")
            raise error(f"the shape expression {text[:200]!r} holds {kind} "
                        f"{(ast.get_source_segment(text, node) or '')[:100]!r}, which PyTorch's shape expressions "
                        "never do")


def _quoted_ok(constant: ast.Constant, tree: ast.AST) -> bool:
    """A string is allowed only as the name of a Symbol or the digits of a Float (srepr's forms)."""
    if not isinstance(constant.value, str):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and node.args[0] is constant and isinstance(node.func, ast.Name):
            if node.func.id == "Symbol":
                return _SYMBOL_NAME.fullmatch(constant.value) is not None
            if node.func.id == "Float":
                return _NUMBER_TEXT.fullmatch(constant.value) is not None
    return False
