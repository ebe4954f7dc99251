"""Saved programs as an attacker makes them (test_program_file.py): a benign .pt2 that
torch.export.save wrote, rewritten member by member so that PyTorch's own loader would run a
command (each payload touches a marker file) or decompress far more than the program declares.
"""
from __future__ import annotations

import contextlib
import json
import os
import pickle
import shlex
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

# Member names inside the archive's root folder (torch.export.pt2_archive.constants).
GRAPH = "models/model.json"
SAMPLE_INPUTS = "data/sample_inputs/model.pt"
WEIGHTS_CONFIG = "data/weights/model_weights_config.json"
CONSTANTS_CONFIG = "data/constants/model_constants_config.json"

Edit = Callable[[dict[str, bytes]], None]


class Payload:
    """Unpickled, it runs `touch MARKER` (pickle calls what __reduce__ names)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


def torch_pickle(marker: Path) -> bytes:
    """The payload as torch.save writes an object: what torch.load(weights_only=False) runs."""
    import io

    buffer = io.BytesIO()
    torch.save(Payload(marker), buffer)
    return buffer.getvalue()


def members(path: Path) -> tuple[str, dict[str, bytes]]:
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        root = names[0].split("/", 1)[0]
        return root, {name.split("/", 1)[1]: archive.read(name) for name in names}


def rewrite(source: Path, target: Path, edit: Edit) -> Path:
    """`source` with `edit` applied to its members (name -> bytes, under the root folder)."""
    root, files = members(source)
    edit(files)
    with zipfile.ZipFile(target, "w") as archive:
        for name, data in files.items():
            archive.writestr(f"{root}/{name}", data)
    return target


def _config_edit(name: str, change: Callable[[dict], None]) -> Edit:
    def edit(files: dict[str, bytes]) -> None:
        config = json.loads(files[name])
        change(config["config"])
        files[name] = json.dumps(config).encode()
    return edit


def _first_tensor_meta(files: dict[str, bytes]) -> dict:
    return next(iter(json.loads(files[WEIGHTS_CONFIG])["config"].values()))["tensor_meta"]


def payload_edits(marker: Path) -> dict[str, Edit]:
    """Each way a .pt2 makes torch.export.load run code, by what it hides the payload in."""

    def sample_inputs(files: dict[str, bytes]) -> None:
        files[SAMPLE_INPUTS] = torch_pickle(marker)

    def pickled_weight(files: dict[str, bytes]) -> None:
        def change(config: dict) -> None:
            name = next(iter(config))
            config[name] = {**config[name], "path_name": "weight_99", "use_pickle": True}
        _config_edit(WEIGHTS_CONFIG, change)(files)
        files["data/weights/weight_99"] = torch_pickle(marker)

    def constant(prefix: str, data: bytes) -> Edit:
        def edit(files: dict[str, bytes]) -> None:
            meta = _first_tensor_meta(files)

            def change(config: dict) -> None:
                config["hidden"] = {"path_name": f"{prefix}99", "is_param": False, "use_pickle": True, "tensor_meta": meta}
            _config_edit(CONSTANTS_CONFIG, change)(files)
            files[f"data/constants/{prefix}99"] = data
        return edit

    def shape_expression(files: dict[str, bytes]) -> None:
        graph = files[GRAPH].decode()
        start = graph.index('"expr_str": "') + len('"expr_str": "')
        end = graph.index('"', start)
        command = json.dumps(f"__import__('os').system('touch {marker}')")[1:-1]
        files[GRAPH] = (graph[:start] + command + graph[end:]).encode()

    return {
        "sample inputs": sample_inputs,
        "a use_pickle weight": pickled_weight,
        "a pickled tensor constant": constant("tensor_", torch_pickle(marker)),
        "an opaque constant": constant("opaque_obj_", pickle.dumps(Payload(marker))),
        "a custom-object constant": constant("custom_obj_", pickle.dumps(Payload(marker))),
        "a shape expression": shape_expression,
    }


def needs_trust(value: torch.Tensor) -> Edit:
    """A harmless program that only a trusted read loads: a constant 'hidden' stored as an opaque
    object, pickled (`value`, a tensor, so the program still runs). Every reader refuses it by kind,
    the weights-free precision map too; torch.export.load unpickles it."""
    def edit(files: dict[str, bytes]) -> None:
        meta = _first_tensor_meta(files)

        def change(config: dict) -> None:
            config["hidden"] = {"path_name": "opaque_obj_98", "is_param": False, "use_pickle": True, "tensor_meta": meta}
        _config_edit(CONSTANTS_CONFIG, change)(files)
        files["data/constants/opaque_obj_98"] = pickle.dumps(value)
    return edit


def _first_expression(document: object) -> dict:
    """The first dict of the graph that holds a shape expression (expr_str), depth first."""
    stack = [document]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if "expr_str" in value:
                return value
            stack.extend(reversed(list(value.values())))
        elif isinstance(value, list):
            stack.extend(reversed(value))
    raise AssertionError("the program holds no shape expression")


def expression_edit(expression: object) -> Edit:
    """The graph's first shape expression replaced by ``expression`` (a JSON value: a string as
    PyTorch writes them, or anything else)."""
    def edit(files: dict[str, bytes]) -> None:
        graph = json.loads(files[GRAPH])
        _first_expression(graph)["expr_str"] = expression
        files[GRAPH] = json.dumps(graph).encode()
    return edit


# The benign program's shape expression, as PyTorch 2.15 writes its dynamic batch.
SYMBOL = "Symbol('s77', positive=True, integer=True)"


def expression_cases(marker: Path) -> dict[str, tuple[object, str]]:
    """Shape expressions that each break exactly one rule of the guard before sympify
    (program_file._check_expression), with the refusal's text after "the shape expression ...":
    removing any one rule lets exactly its case through."""
    command = f"__import__('os').system('touch {marker}')"
    long = " + ".join([SYMBOL] * 2500)
    return {
        "not a string": (77, r"a shape expression that is not a string"),
        "too long": (long, rf"a shape expression of {len(long)} characters \(at most 100000\)"),
        "not an expression": (f"{SYMBOL} +", r"the shape expression .* is not an expression PyTorch writes"),
        "a call of no sympy class": ("s77(2)", r"the shape expression 's77\(2\)' holds a call 's77\(2\)'"),
        "a name of no sympy class": (f"Add({SYMBOL}, __builtins__)", r"the shape expression .* holds the name "
                                     r"'__builtins__'"),
        "an attribute": (f"{SYMBOL}.__class__", r"the shape expression .* holds an attribute "
                         r"\"Symbol\('s77', positive=True, integer=True\)\.__class__\""),
        "a private keyword": ("Symbol('s77', positive=True, _mhash=1)", r"the shape expression .* holds a keyword "
                              r"'_mhash=1'"),
        "a keyword of no name": ("Symbol('s77', **s78)", r"the shape expression .* holds a keyword '\*\*s78'"),
        "a Symbol's name that is no name": ("Symbol('os.system', positive=True, integer=True)",
                                            r"the shape expression .* holds the constant \"'os\.system'\""),
        "a Float's digits that are no number": (f"Mul(Float({command!r}), {SYMBOL})",
                                                r"the shape expression .* holds the constant '\"__import__\(.*"),
        "a string anywhere else": (f"Max({SYMBOL}, {command!r})",
                                   r"the shape expression .* holds the constant '\"__import__\(.*"),
        "a constant of another type": (f"Mul({SYMBOL}, None)", r"the shape expression .* holds the constant 'None'"),
    }


def malformed_edits() -> dict[str, tuple[Edit, str]]:
    """Graphs PyTorch's loader fails on with a traceback, and the located error ours must give."""

    def truncated(files: dict[str, bytes]) -> None:
        files[GRAPH] = files[GRAPH][: len(files[GRAPH]) // 2]

    def unknown_operator(files: dict[str, bytes]) -> None:
        files[GRAPH] = files[GRAPH].replace(b'"torch.ops.aten.gelu.default"', b'"torch.ops.aten.no_such_op.default"', 1)

    def python_function(files: dict[str, bytes]) -> None:
        files[GRAPH] = files[GRAPH].replace(b'"torch.ops.aten.gelu.default"', b'"torch.os.system"', 1)

    return {
        "truncated graph": (truncated, r"models/model\.json:1:\d+: not valid JSON"),
        "unknown operator": (unknown_operator, r"models/model\.json: graph\.nodes\[\d+\] \(gelu\): calls "
                                               r"'torch\.ops\.aten\.no_such_op\.default', which is not an operator"),
        "python function": (python_function, r"models/model\.json: graph\.nodes\[\d+\] \(gelu\): calls "
                                             r"'torch\.os\.system', which is not an operator"),
    }


@contextlib.contextmanager
def _precompressed(block: bytes) -> Iterator[None]:
    """zipfile's deflate replaced, for one write, by a compressor that returns `block` for each
    chunk: the chunks are equal and each compressed block ends with a full flush, so the stream is
    what deflating them would give, without minutes of compressing."""

    class Repeat:
        def compress(self, data: bytes) -> bytes:
            return block

        def flush(self) -> bytes:
            return zlib.compressobj(6, zlib.DEFLATED, -15).flush()  # an empty final block

    original = zipfile._get_compressor
    zipfile._get_compressor = lambda compress_type, level=None: Repeat()  # type: ignore[assignment]
    try:
        yield
    finally:
        zipfile._get_compressor = original  # type: ignore[assignment]


def zip_bomb(source: Path, target: Path, gib: int = 4) -> Path:
    """`source` with its first weight's record replaced by `gib` GiB of zeros, deflated to a few MB;
    the weight's declared shape is unchanged (a few bytes)."""
    root, files = members(source)
    first = next(iter(json.loads(files[WEIGHTS_CONFIG])["config"].values()))["path_name"]
    chunk = bytes(64 << 20)
    compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
    block = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)
    with zipfile.ZipFile(target, "w") as archive:
        for name, data in files.items():
            if name != f"data/weights/{first}":
                archive.writestr(f"{root}/{name}", data)
                continue
            info = zipfile.ZipInfo(f"{root}/{name}")
            info.compress_type = zipfile.ZIP_DEFLATED
            with _precompressed(block), archive.open(info, "w", force_zip64=True) as stream:
                for _ in range((gib << 30) // len(chunk)):
                    stream.write(chunk)
    return target


def _deflated_with_headers(source: Path, target: Path, stream: bytes, crc: int) -> tuple[Path, str]:
    """`source` with its first weight's record the raw deflate `stream`, its headers (local and
    central) declaring the weight's own size and `crc`. Built by hand: the stream written stored,
    then its headers patched (method, CRC, size). Also the member's name under the root folder."""
    root, files = members(source)
    first = next(iter(json.loads(files[WEIGHTS_CONFIG])["config"].values()))["path_name"]
    name = f"{root}/data/weights/{first}"
    declared = len(files[f"data/weights/{first}"])
    with zipfile.ZipFile(target, "w") as archive:
        for member, data in files.items():
            archive.writestr(f"{root}/{member}", stream if f"{root}/{member}" == name else data)
        local = archive.getinfo(name).header_offset
    data = bytearray(target.read_bytes())
    assert data[local:local + 4] == b"PK\x03\x04"
    # Local header: method at 8, CRC at 14, compressed size at 18, size at 22.
    data[local + 8:local + 10] = (zipfile.ZIP_DEFLATED).to_bytes(2, "little")
    data[local + 14:local + 18] = crc.to_bytes(4, "little")
    data[local + 22:local + 26] = declared.to_bytes(4, "little")
    # The central directory's entry of the member: method at 10, CRC at 16, size at 24.
    end = data.rindex(b"PK\x05\x06")
    at = int.from_bytes(data[end + 16:end + 20], "little")
    while data[at:at + 4] == b"PK\x01\x02":
        lengths = [int.from_bytes(data[at + i:at + i + 2], "little") for i in (28, 30, 32)]
        if data[at + 46:at + 46 + lengths[0]] == name.encode():
            data[at + 10:at + 12] = (zipfile.ZIP_DEFLATED).to_bytes(2, "little")
            data[at + 16:at + 20] = crc.to_bytes(4, "little")
            data[at + 24:at + 28] = declared.to_bytes(4, "little")
            break
        at += 46 + sum(lengths)
    else:
        raise AssertionError(f"no central directory entry for {name}")
    target.write_bytes(bytes(data))
    return target, f"data/weights/{first}"


def lying_zip_bomb(source: Path, target: Path, gib: int = 4) -> tuple[Path, str]:
    """`source` with its first weight's record a deflate stream of `gib` GiB of zeros whose headers
    declare the weight's own size (512 bytes) and the `gib` GiB's CRC: the directory passes every
    size check, and only inflating past the declared size would find the rest. Also the member's name."""
    chunk = bytes(64 << 20)
    compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
    block = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)
    count = (gib << 30) // len(chunk)
    crc = 0
    for _ in range(count):
        crc = zlib.crc32(chunk, crc)
    return _deflated_with_headers(source, target, block * count + zlib.compressobj(6, zlib.DEFLATED, -15).flush(), crc)


def short_record(source: Path, target: Path) -> tuple[Path, str]:
    """`source` with its first weight's record a deflate stream of half the weight's bytes, with
    their CRC, whose headers declare the whole weight: zipfile reads it without an error and
    short. Also the member's name."""
    _, files = members(source)
    first = next(iter(json.loads(files[WEIGHTS_CONFIG])["config"].values()))["path_name"]
    half = files[f"data/weights/{first}"][: len(files[f"data/weights/{first}"]) // 2]
    compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
    return _deflated_with_headers(source, target, compressor.compress(half) + compressor.flush(), zlib.crc32(half))


class CountingInflate:
    """zipfile's inflater, counting the bytes it inflates; past `limit` it stops (raising
    AssertionError) before inflating more, so a reader that would inflate everything fails
    without taking the memory."""

    def __init__(self, inner: object, counter: list[int], limit: int) -> None:
        self.inner, self.counter, self.limit = inner, counter, limit

    def decompress(self, data: bytes, max_length: int = 0) -> bytes:
        room = self.limit - self.counter[0] + 1
        if max_length <= 0 or max_length > room:
            max_length = max(room, 1)
        out = self.inner.decompress(data, max_length)
        self.counter[0] += len(out)
        if self.counter[0] > self.limit:
            raise AssertionError(f"inflated more than {self.limit} bytes")
        return out

    def flush(self, *args: int) -> bytes:
        out = self.inner.flush(*args)
        self.counter[0] += len(out)
        return out

    def __getattr__(self, name: str) -> object:  # eof, unconsumed_tail, unused_data
        return getattr(self.inner, name)


@contextlib.contextmanager
def counting_inflation(limit: int) -> Iterator[list[int]]:
    """Within it, every deflated zip member is inflated through CountingInflate: the list's one
    item is the bytes inflated so far."""
    counter = [0]
    original = zipfile._get_decompressor

    def counting(compress_type: int) -> object:
        inner = original(compress_type)
        return CountingInflate(inner, counter, limit) if compress_type == zipfile.ZIP_DEFLATED else inner

    zipfile._get_decompressor = counting  # type: ignore[assignment]
    try:
        yield counter
    finally:
        zipfile._get_decompressor = original  # type: ignore[assignment]


def corrupt_weights(source: Path, target: Path) -> Path:
    """`source` with every weight's record replaced by bytes that do not inflate, at its declared size."""
    root, files = members(source)
    with zipfile.ZipFile(target, "w") as archive:
        for name, data in files.items():
            if not name.startswith("data/weights/weight_"):
                archive.writestr(f"{root}/{name}", data)
                continue
            # A deflated member whose stream is garbage: the directory declares the real size.
            info = zipfile.ZipInfo(f"{root}/{name}")
            info.compress_type = zipfile.ZIP_DEFLATED
            with _precompressed(b"\xff" * 16), archive.open(info, "w") as stream:
                stream.write(data)
    return target
