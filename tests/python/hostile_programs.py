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
