"""The program-file reader's guards at their edges (Note [a program file is data] in
autocastgen/_export/program_file.py): each limit at its value and one past it, each check of the
archive, of its payload configs and tensor records, of the graph's operators and shape expressions,
one rule at a time, with the refusal's whole text. test_program_file.py shows hostile files refused
by every reader; here the reader itself is pinned down, in this process and quickly (one small
program exported, then edited member by member), so that scripts/mutants can run it for each mutant
of the reader (docs/testing.md).

ctest sets AUTOCASTGEN_BUILD_DIR; by hand:
  AUTOCASTGEN_BUILD_DIR=build python3 -m pytest tests/python/export/test_program_file_limits.py
"""
from __future__ import annotations

import copy
import hashlib
import inspect
import io
import json
import os
import pathlib
import re
import tempfile
import zipfile
from collections.abc import Callable

import pytest
import torch
import torch._export.serde.serialize  # noqa: F401 - the reader's imports on first use, made at collection

import requires
from built_tree import require_built

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
require_built(BUILD, "python/autocastgen/__init__.py")

import autocastgen  # noqa: E402
from autocastgen import ProgramFileError  # noqa: E402
from autocastgen._export import program_file  # noqa: E402
from exact import assert_exact  # noqa: E402
from hostile_programs import (  # noqa: E402
    CONSTANTS_CONFIG,
    GRAPH,
    SAMPLE_INPUTS,
    SYMBOL,
    WEIGHTS_CONFIG,
    corrupt_weights,
    expression_edit,
    members,
    rewrite,
)

requires.supported(autocastgen._export.supported())

Files = dict[str, bytes]


class Small(torch.nn.Module):
    """Two parameters, a buffer (weights), a tensor constant (constants), a dynamic batch."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(4, 3)
        self.register_buffer("shift", torch.linspace(-1, 1, 3))
        self.scale = torch.tensor([2.0, 3.0, 4.0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.scale + self.shift


def _export_small(path: pathlib.Path) -> None:
    torch.manual_seed(1)
    program = torch.export.export(Small(), (torch.randn(2, 4),), dynamic_shapes=({0: torch.export.Dim("batch")},))
    torch.export.save(program, path)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The program as torch.export.save writes it. $AUTOCASTGEN_TEST_PROGRAMS (scripts/mutants sets
    it: one export for the run, not one per mutant) keeps it between processes, by PyTorch's
    version and this export's code."""
    folder = os.environ.get("AUTOCASTGEN_TEST_PROGRAMS")
    if not folder:
        path = tmp_path_factory.mktemp("small") / "small.pt2"
        _export_small(path)
        return path
    key = hashlib.sha256((torch.__version__ + inspect.getsource(Small) + inspect.getsource(_export_small)).encode())
    path = pathlib.Path(folder) / f"small-{key.hexdigest()[:16]}.pt2"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".pt2", delete=False) as partial:
            _export_small(pathlib.Path(partial.name))
        os.replace(partial.name, path)
    return path


@pytest.fixture(scope="module")
def reference(small: pathlib.Path) -> torch.export.ExportedProgram:
    return torch.export.load(small)


def edited(small: pathlib.Path, tmp_path: pathlib.Path, edit: Callable[[Files], None]) -> pathlib.Path:
    return rewrite(small, tmp_path / "edited.pt2", edit)


def refused(path: pathlib.Path, why: str, **options: bool) -> None:
    """load_program refuses `path`, and its message after the path is `why` (a regex, whole)."""
    with pytest.raises(ProgramFileError) as error:
        autocastgen.load_program(path, **options)
    assert error.value.path == str(path)
    assert re.fullmatch(f"{re.escape(str(path))}: {why}", str(error.value)), str(error.value)


def config_edit(name: str, change: Callable[[dict], None]) -> Callable[[Files], None]:
    def edit(files: Files) -> None:
        config = json.loads(files[name])
        change(config["config"])
        files[name] = json.dumps(config).encode()
    return edit


def saved(value: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def error(what: str) -> ProgramFileError:
    return ProgramFileError("p.pt2", what)


# --- what is read --------------------------------------------------------------------------------

def test_the_program_reads_as_torch_reads_it(small: pathlib.Path, reference: torch.export.ExportedProgram) -> None:
    ours = autocastgen.load_program(small)
    assert ours.graph_module.code == reference.graph_module.code
    assert str(ours.range_constraints) == str(reference.range_constraints)
    assert list(ours.state_dict) == ["fc.weight", "fc.bias", "shift"]
    for name, tensor in reference.state_dict.items():
        mine = ours.state_dict[name]
        assert type(mine) is type(tensor) and mine.requires_grad == tensor.requires_grad, name
        assert_exact(mine, tensor, name, strides=True)
    assert list(ours.constants) == ["scale"]
    assert_exact(dict(ours.constants), dict(reference.constants))
    assert_exact(ours.example_inputs, reference.example_inputs)
    x = torch.randn(5, 4)
    assert_exact(ours.module()(x), reference.module()(x))


def test_without_weights_every_tensor_is_a_meta_tensor_of_its_shape(small: pathlib.Path,
                                                                     reference: torch.export.ExportedProgram) -> None:
    # Nor any sample input: the sample inputs are a pickle, read only with the weights.
    ours = autocastgen.load_program(small, weights=False)
    assert ours.graph_module.code == reference.graph_module.code
    assert ours.example_inputs is None
    for found, theirs in ((ours.state_dict, reference.state_dict), (ours.constants, reference.constants)):
        assert list(found) == list(theirs)
        for name, tensor in theirs.items():
            mine = found[name]
            assert mine.device.type == "meta" and type(mine) is type(tensor), name
            assert (mine.dtype, mine.shape, mine.stride(), mine.requires_grad) == \
                (tensor.dtype, tensor.shape, tensor.stride(), tensor.requires_grad), name


def test_trusted_is_pytorchs_own_loader(small: pathlib.Path, tmp_path: pathlib.Path, monkeypatch) -> None:
    # trusted=True hands the file to torch.export.load as it is; by default it is never called.
    calls: list[str] = []
    real = torch.export.load
    monkeypatch.setattr(torch.export, "load", lambda path, *a, **k: calls.append(path) or real(path, *a, **k))
    program = autocastgen.load_program(small, trusted=True)
    assert calls == [str(small)] and program.graph_module.code
    autocastgen.load_program(small)
    assert calls == [str(small)]


def test_what_is_no_file_is_refused_by_name(tmp_path: pathlib.Path) -> None:
    for path in (tmp_path / "absent.pt2", tmp_path):
        refused(path, "no such file")
        refused(path, "no such file", trusted=True)


# --- the archive ---------------------------------------------------------------------------------

def test_what_is_not_an_archive_of_one_folder_is_refused(small: pathlib.Path, tmp_path: pathlib.Path) -> None:
    junk = tmp_path / "junk.pt2"
    junk.write_bytes(b"not a zip")
    refused(junk, r"not a program archive \(torch\.export\.save writes a zip file\): File is not a zip file")
    empty = tmp_path / "empty.pt2"
    zipfile.ZipFile(empty, "w").close()
    refused(empty, "not a program archive: its members are not under one folder, as torch.export.save writes them")
    root, files = members(small)
    for names in (["archive_format", f"{root}/x"], [f"{root}/archive_format", "other/x"], [f"{root}/x", f"{root}x/y"]):
        flat = tmp_path / "flat.pt2"
        with zipfile.ZipFile(flat, "w") as archive:
            for name in names:
                archive.writestr(name, b"pt2")
        refused(flat, "not a program archive: its members are not under one folder, as torch.export.save writes them")
    # The root is the first member's folder, whatever its name.
    renamed = tmp_path / "renamed.pt2"
    with zipfile.ZipFile(renamed, "w") as archive:
        for name, data in files.items():
            archive.writestr(f"another/{name}", data)
    assert autocastgen.load_program(renamed).graph_module.code == autocastgen.load_program(small).graph_module.code


@pytest.mark.parametrize(("member", "limit"), [("archive_format", 64), ("archive_version", 64), ("byteorder", 16)])
def test_each_small_member_is_read_within_its_bound(member: str, limit: int, small: pathlib.Path,
                                                    tmp_path: pathlib.Path) -> None:
    # At its bound the member is read (and refused for what it says); one byte past it, unread.
    right = {"archive_format": "pt2", "archive_version": "0", "byteorder": "little"}[member]
    at_bound = edited(small, tmp_path, lambda files: files.update({member: b"x" * limit}))
    refused(at_bound, {"archive_format": "archive_format: not a PT2 archive",
                       "archive_version": "archive_version: archive version '" + "x" * limit + "'; this PyTorch reads '0'",
                       "byteorder": "byteorder: written on a big-endian machine; autocastgen reads little-endian programs "
                                    "only"}[member])
    past = edited(small, tmp_path, lambda files: files.update({member: b"x" * (limit + 1)}))
    refused(past, f"{member}: {limit + 1} bytes, more than the {limit} a program's part may hold")
    assert autocastgen.load_program(edited(small, tmp_path, lambda files: files.update({member: right.encode()})))


def test_the_format_version_and_byte_order_are_checked(small: pathlib.Path, tmp_path: pathlib.Path) -> None:
    refused(edited(small, tmp_path, lambda files: files.update({"archive_format": b"pt3"})),
            "archive_format: not a PT2 archive")
    refused(edited(small, tmp_path, lambda files: files.update({"archive_version": b"1"})),
            "archive_version: archive version '1'; this PyTorch reads '0'")
    refused(edited(small, tmp_path, lambda files: files.update({"byteorder": b"big"})),
            "byteorder: written on a big-endian machine; autocastgen reads little-endian programs only")
    for member in ("archive_format", "archive_version", GRAPH, WEIGHTS_CONFIG, CONSTANTS_CONFIG):
        refused(edited(small, tmp_path, lambda files, member=member: files.pop(member)),
                re.escape(member) + r": missing \(torch\.export\.save writes it\)")
    # No byteorder member (older archives): read as little-endian.
    program = autocastgen.load_program(edited(small, tmp_path, lambda files: files.pop("byteorder")))
    assert_exact(dict(program.state_dict), dict(autocastgen.load_program(small).state_dict))


def test_a_member_is_refused_unread_past_its_limit(small: pathlib.Path) -> None:
    # The limit against the zip directory's size, at it and one past it.
    with program_file._Archive(str(small)) as archive:
        size = archive.size(GRAPH)
        assert archive.read(GRAPH, size) == members(small)[1][GRAPH]
        assert archive.text(GRAPH, size) == members(small)[1][GRAPH].decode()
        with pytest.raises(ProgramFileError, match=f"^{re.escape(str(small))}: models/model.json: {size} bytes, more "
                                                   f"than the {size - 1} a program's graph may hold$"):
            next(archive.chunks(GRAPH, size - 1))
        with pytest.raises(ProgramFileError, match=": data/weights/weight_0: 48 bytes, more than the 47 a program's "
                                                   "part may hold$"):
            archive.read("data/weights/weight_0", 47)
        assert not archive.has("data/weights/model.pt") and archive.has("data/weights/weight_0")


def test_members_are_read_in_chunks_of_what_is_left(small: pathlib.Path, tmp_path: pathlib.Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # Chunks of 16 MiB (here 7 bytes), each no larger than what is left of the declared size.
    monkeypatch.setattr(program_file, "_CHUNK", 7)
    with program_file._Archive(str(small)) as archive:
        chunks = list(archive.chunks("data/weights/weight_0", 48))
    assert [len(chunk) for chunk in chunks] == [7] * 6 + [6]
    assert b"".join(chunks) == members(small)[1]["data/weights/weight_0"]


def declaring(path: pathlib.Path, data: bytes, declared: int) -> pathlib.Path:
    """An archive of one member, r/x, stored: `data`, its directory entries declaring `declared`
    bytes (a stream that ends short of it reads without a complaint from zipfile: its CRC is right)."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("r/x", data)
    raw = bytearray(path.read_bytes())
    raw[22:26] = declared.to_bytes(4, "little")  # the local header's size
    central = raw.index(b"PK\x01\x02")
    raw[central + 24:central + 28] = declared.to_bytes(4, "little")  # the central directory's
    path.write_bytes(bytes(raw))
    return path


def test_a_member_that_ends_short_of_its_declared_size_is_refused(tmp_path: pathlib.Path) -> None:
    # The reader's own check (test_program_file shows it through every reader, on a weight).
    with program_file._Archive(str(declaring(tmp_path / "short.zip", b"x" * 20, 48))) as archive:
        with pytest.raises(ProgramFileError) as error:
            archive.read("x", 48)
        assert str(error.value) == f"{tmp_path / 'short.zip'}: x: inflates to 20 bytes where the zip's directory declares 48"
    with program_file._Archive(str(declaring(tmp_path / "whole.zip", b"x" * 20, 20))) as archive:
        assert archive.read("x", 20) == b"x" * 20


def test_text_and_json_members_are_refused_located(small: pathlib.Path, tmp_path: pathlib.Path) -> None:
    graph = members(small)[1][GRAPH]
    refused(edited(small, tmp_path, lambda files: files.update({GRAPH: graph[:10] + b"\xff" + graph[11:]})),
            r"models/model\.json: not UTF-8 text \(byte 10\)")
    refused(edited(small, tmp_path, lambda files: files.update({GRAPH: b'{"graph_module":\n  [1,, 2]}'})),
            r"models/model\.json:2:6: not valid JSON: Expecting value")
    refused(edited(small, tmp_path, lambda files: files.update({GRAPH: b"[" * 100_000 + b"]" * 100_000})),
            r"models/model\.json: nested too deeply to be a program's graph")
    refused(edited(small, tmp_path, lambda files: files.update({WEIGHTS_CONFIG: b"[" * 100_000 + b"]" * 100_000})),
            r"data/weights/model_weights_config\.json: nested too deeply to be a program's part")
    refused(edited(small, tmp_path, lambda files: files.update({"archive_format": b"\xe9"})),
            r"archive_format: not UTF-8 text \(byte 0\)")


# --- the graph -----------------------------------------------------------------------------------

def test_the_graph_must_be_a_graph_of_this_schema(small: pathlib.Path, tmp_path: pathlib.Path) -> None:
    for document in ([], {"graph_module": []}, {"graph_module": {"graph": 1}}, {"other": {}}):
        refused(edited(small, tmp_path, lambda files, document=document: files.update({GRAPH: json.dumps(document).encode()})),
                r"models/model\.json: no graph_module\.graph: not a program's graph")
    refused(edited(small, tmp_path, lambda files: files.update({GRAPH: b'{"graph_module": {"graph": {}}}'})),
            rf"models/model\.json: not a program graph of PyTorch {re.escape(torch.__version__)}'s schema: .+")


def graph_with(node: dict) -> dict:
    return {"graph_module": {"graph": {"nodes": [node]}}}


def node(target: str, name: str = "out") -> dict:
    return {"target": target, "inputs": [], "outputs": [{"as_tensor": {"name": name}}]}


@pytest.mark.parametrize("target", [
    "torch.ops.aten.add.Tensor", "torch.ops.aten._to_copy.default", "torch.ops.higher_order.cond",
    "torch.ops.aten.linear.default", "_operator.add", "_operator.mul",
    "torch.sym_int", "math.trunc", "torch._sym_sqrt",
])
def test_pytorchs_operators_are_operators(target: str) -> None:
    assert program_file._is_operator(target)
    program_file._check_graph(graph_with(node(target)), error)


@pytest.mark.parametrize("target", [
    "torch.ops.aten.add", "torch.ops.aten", "torch.ops", "torch.ops.aten.add.Tensor.x", "torch.ops.aten.no_such.default",
    "torch.ops.aten.__class__.x", "torch.ops.aten.add.__call__", "torch.ops.__dict__.x", "torch.ops.aten.add.Tens-or",
    "torch.ops.aten.add.", "torch.ops.higher_order.cond.default", "torch.os.system", "os.system", "torch.ops.aten.add.1x",
    "builtins.eval", "_operator.attrgetter", "torch.ops.higher_order.no_such_hop", "xtorch.ops.aten.add.Tensor",
    "torch.opsx.aten.add.Tensor",
])
def test_what_is_no_operator_is_refused_where_it_is_called(target: str) -> None:
    assert not program_file._is_operator(target)
    with pytest.raises(ProgramFileError) as refusal:
        program_file._check_graph(graph_with(node(target, "add_1")), error)
    assert str(refusal.value) == (f"p.pt2: graph.nodes[0] (add_1): calls {target[:200]!r}, which is not an operator "
                                  "of this PyTorch; if it is a custom op, import the library that registers it before "
                                  "reading the program (the CLI: --import MODULE)")


def test_an_extension_operator_is_refused_as_code() -> None:
    with pytest.raises(ProgramFileError) as refusal:
        program_file._check_graph(graph_with(node("#my.ext" + "x" * 300, "e")), error)
    assert str(refusal.value) == (f"p.pt2: graph.nodes[0] (e): calls the extension operator {('#my.ext' + 'x' * 300)[:200]!r}, "
                                  "which PyTorch resolves through registered handlers that can run code; load the program "
                                  "only if you trust it as code (--trust-program, trusted=True)")


def test_only_nodes_are_checked_as_calls_and_every_expression_wherever_it_is() -> None:
    # A "target" outside a node (no inputs or no outputs) names nothing that is called.
    for value in ({"target": "os.system"}, {"target": "os.system", "inputs": []}, {"target": "os.system", "outputs": []},
                  {"target": 7, "inputs": [], "outputs": []}):
        program_file._check_graph({"graph_module": {"graph": {"nodes": [], "x": [value]}}}, error)
    # Shape expressions are checked in any list or dict, named by the node or value they are in.
    bad = {"expr_str": "__import__('os')"}
    for document, where in (
        ({"graph_module": {"graph": {"nodes": [{**node("torch.ops.aten.add.Tensor", "n1"), "meta": [[bad]]}]}}},
         "graph.nodes[0] (n1)"),
        ({"graph_module": {"graph": {"nodes": [node("torch.ops.aten.add.Tensor"), {"x": bad}]}}}, "graph.nodes[1]"),
        ({"graph_module": {"graph": {"tensor_values": {"x" * 150: {"sizes": [{"as_expr": bad}]}}}}},
         f"graph.tensor_values[{'x' * 100!r}]"),
        ({"graph_module": {"graph": {}}, "range_constraints": {"s0": bad}}, "graph"),
    ):
        with pytest.raises(ProgramFileError) as refusal:
            program_file._check_graph(document, error)
        assert str(refusal.value).startswith(f"p.pt2: {where}: the shape expression \"__import__('os')\" holds a call"), \
            str(refusal.value)


def test_nodes_are_named_by_their_first_output() -> None:
    def refusal(outputs: object) -> str:
        with pytest.raises(ProgramFileError) as refused_node:
            program_file._check_graph(graph_with({"target": "os.system", "inputs": [], "outputs": outputs}), error)
        return str(refused_node.value).split(": calls")[0]

    assert refusal([{"as_tensor": {"name": "t"}}, {"as_tensor": {"name": "u"}}]) == "p.pt2: graph.nodes[0] (t)"
    assert refusal([{"as_sym_int": {"as_name": "s"}}]) == "p.pt2: graph.nodes[0] (s)"
    assert refusal([{"as_sym_float": {"as_name": "f"}}]) == "p.pt2: graph.nodes[0] (f)"
    assert refusal([{"as_sym_bool": {"as_name": "b"}}]) == "p.pt2: graph.nodes[0] (b)"
    assert refusal([{"as_tensor": {"name": "n" * 150}}]) == f"p.pt2: graph.nodes[0] ({'n' * 100})"
    for nameless in ([], [{"as_int": 3}], [{"as_tensor": {"name": 5}}], [7], None):
        assert refusal(nameless) == "p.pt2: graph.nodes[0]", nameless


def test_a_graph_with_a_refused_operator_is_refused_before_it_is_read(small: pathlib.Path, tmp_path: pathlib.Path) -> None:
    def edit(files: Files) -> None:
        files[GRAPH] = files[GRAPH].replace(b'"torch.ops.aten.mul.Tensor"', b'"torch.ops.aten.mul"', 1)
    refused(edited(small, tmp_path, edit), r"models/model\.json: graph\.nodes\[1\] \(mul\): calls 'torch\.ops\.aten\.mul', "
            r"which is not an operator of this PyTorch; .*")
    refused(edited(small, tmp_path, expression_edit("__import__('os')")),
            r"models/model\.json: graph\.tensor_values\['x'\]: the shape expression \"__import__\('os'\)\" holds a call .*")


# --- shape expressions ---------------------------------------------------------------------------

def expression_refusal(text: object) -> str:
    with pytest.raises(ProgramFileError) as refusal:
        program_file._check_expression(text, error)
    return str(refusal.value).removeprefix("p.pt2: ")


@pytest.mark.parametrize("text", [
    SYMBOL, "s0", "abc12", "Symbol('s77', integer=True, positive=True)", "Integer(2)", "-s0 + 3 * s1 // 2 % 5 ** 2",
    "Float('2.5', precision=53)", "Float('1e-5')", "Float('-2.5E+3')", "Float('inf')", "Float('nan')", "Float('.5')",
    "Float(2.5)", "Symbol('A_9')", "Max(s0, Integer(1)) >= Min(s1, 3) and not s0 == 2 or s1 != 1", "True", "oo",
    "Rational(1, 2) < 1.5", "FloorDiv(s0, 2)", "OpaqueUnaryFn_tanh(s0)", "Piecewise(ExprCondPair(s0, true))",
    "Symbol('" + "a" * 99_990 + "')",
])
def test_the_forms_pytorch_writes_pass(text: str) -> None:
    assert len(text) <= 100_000
    program_file._check_expression(text, error)


def test_a_shape_expression_is_at_most_100000_characters() -> None:
    program_file._check_expression("Symbol('" + "a" * 99_990 + "')", error)  # 100,000 characters
    long = "Symbol('" + "a" * 99_991 + "')"
    assert expression_refusal(long) == "a shape expression of 100001 characters (at most 100000)"
    # Deeply nested arithmetic ends in the parser's own limit, refused the same way.
    assert expression_refusal("-" * 50_000 + "s1") == (
        "the shape expression '" + "-" * 200 + "' is not an expression PyTorch writes")


@pytest.mark.parametrize(("text", "why"), [
    (77, "a shape expression that is not a string"),
    (None, "a shape expression that is not a string"),
    (b"s0", "a shape expression that is not a string"),
    ("s0 +", "the shape expression 's0 +' is not an expression PyTorch writes"),
    ("", "the shape expression '' is not an expression PyTorch writes"),
    ("s0\0", "the shape expression 's0\\x00' is not an expression PyTorch writes"),
    ("(" * 300 + "1" + ")" * 300, "the shape expression '" + "(" * 200 + "' is not an expression PyTorch writes"),
    ("s0 + " + "x" * 300, "the shape expression 's0 + " + "x" * 195 + "' holds the name '" + "x" * 100 + "', which "
     "PyTorch's shape expressions never do"),
    ("s77(2)", "the shape expression 's77(2)' holds a call 's77(2)', which PyTorch's shape expressions never do"),
    ("eval('1')", "the shape expression \"eval('1')\" holds a call \"eval('1')\", which PyTorch's shape expressions never do"),
    ("Symbol.x(1)", "the shape expression 'Symbol.x(1)' holds a call 'Symbol.x(1)', which PyTorch's shape expressions "
     "never do"),
    ("(lambda: 1)()", "the shape expression '(lambda: 1)()' holds a call '(lambda: 1)()', which PyTorch's shape "
     "expressions never do"),
    ("S0", "the shape expression 'S0' holds the name 'S0', which PyTorch's shape expressions never do"),
    ("s", "the shape expression 's' holds the name 's', which PyTorch's shape expressions never do"),
    ("s0x", "the shape expression 's0x' holds the name 's0x', which PyTorch's shape expressions never do"),
    ("_s0", "the shape expression '_s0' holds the name '_s0', which PyTorch's shape expressions never do"),
    ("s0.real", "the shape expression 's0.real' holds an attribute 's0.real', which PyTorch's shape expressions never do"),
    ("s0[1]", "the shape expression 's0[1]' holds a Subscript 's0[1]', which PyTorch's shape expressions never do"),
    ("[s0]", "the shape expression '[s0]' holds a List '[s0]', which PyTorch's shape expressions never do"),
    ("s0 if s1 else s2", "the shape expression 's0 if s1 else s2' holds a IfExp 's0 if s1 else s2', which PyTorch's "
     "shape expressions never do"),
    ("1j", "the shape expression '1j' holds the constant '1j', which PyTorch's shape expressions never do"),
    ("None", "the shape expression 'None' holds the constant 'None', which PyTorch's shape expressions never do"),
    ("...", "the shape expression '...' holds the constant '...', which PyTorch's shape expressions never do"),
    ("b'1'", "the shape expression \"b'1'\" holds the constant \"b'1'\", which PyTorch's shape expressions never do"),
    ("'s0'", "the shape expression \"'s0'\" holds the constant \"'s0'\", which PyTorch's shape expressions never do"),
    ("Symbol('0s')", "the shape expression \"Symbol('0s')\" holds the constant \"'0s'\", which PyTorch's shape "
     "expressions never do"),
    ("Symbol('s.0')", "the shape expression \"Symbol('s.0')\" holds the constant \"'s.0'\", which PyTorch's shape "
     "expressions never do"),
    ("Symbol('s0 ')", "the shape expression \"Symbol('s0 ')\" holds the constant \"'s0 '\", which PyTorch's shape "
     "expressions never do"),
    ("Symbol(s0, 's1')", "the shape expression \"Symbol(s0, 's1')\" holds the constant \"'s1'\", which PyTorch's shape "
     "expressions never do"),
    ("Symbol('s0', positive='yes')", "the shape expression \"Symbol('s0', positive='yes')\" holds the constant "
     "\"'yes'\", which PyTorch's shape expressions never do"),
    ("Float('1.5.5')", "the shape expression \"Float('1.5.5')\" holds the constant \"'1.5.5'\", which PyTorch's shape "
     "expressions never do"),
    ("Float('1.5 ')", "the shape expression \"Float('1.5 ')\" holds the constant \"'1.5 '\", which PyTorch's shape "
     "expressions never do"),
    ("Float('e5')", "the shape expression \"Float('e5')\" holds the constant \"'e5'\", which PyTorch's shape "
     "expressions never do"),
    ("Integer('5')", "the shape expression \"Integer('5')\" holds the constant \"'5'\", which PyTorch's shape "
     "expressions never do"),
    ("f(Symbol)('x')", "the shape expression \"f(Symbol)('x')\" holds a call \"f(Symbol)('x')\", which PyTorch's shape "
     "expressions never do"),
    ("Symbol('s0', _x=1)", "the shape expression \"Symbol('s0', _x=1)\" holds a keyword '_x=1', which PyTorch's shape "
     "expressions never do"),
    ("Symbol('s0', **s1)", "the shape expression \"Symbol('s0', **s1)\" holds a keyword '**s1', which PyTorch's shape "
     "expressions never do"),
])
def test_each_rule_of_the_shape_expression_guard(text: object, why: str) -> None:
    assert expression_refusal(text) == why


# --- payloads ------------------------------------------------------------------------------------

def test_a_pickled_part_is_read_weights_only_and_never_with_pickle(small: pathlib.Path, tmp_path: pathlib.Path,
                                                                   reference: torch.export.ExportedProgram) -> None:
    # A tensor pickled (use_pickle) reads as that tensor; anything else a weights-only load takes
    # (a list) is refused for not being a tensor; what it refuses (a Python object) is refused so.
    def pickled(value: object, name: str = "shift") -> Callable[[Files], None]:
        def edit(files: Files) -> None:
            def change(config: dict) -> None:
                config[name] = {**config[name], "path_name": "weight_9", "use_pickle": True}
            config_edit(WEIGHTS_CONFIG, change)(files)
            files["data/weights/weight_9"] = saved(value)
        return edit

    value = torch.tensor([7.0, -0.0, float("nan")])
    program = autocastgen.load_program(edited(small, tmp_path, pickled(value)))
    assert list(program.state_dict) == ["fc.weight", "fc.bias", "shift"]
    assert_exact(program.state_dict["shift"], value)
    assert_exact(program.state_dict["fc.weight"], reference.state_dict["fc.weight"])
    # A parameter is pickled as one (the reader keeps what the pickle holds).
    param = autocastgen.load_program(edited(small, tmp_path, pickled(torch.nn.Parameter(torch.ones(3)), "fc.bias")))
    assert type(param.state_dict["fc.bias"]) is torch.nn.Parameter and param.state_dict["fc.bias"].requires_grad
    assert_exact(param.state_dict["fc.bias"].detach(), torch.ones(3))
    refused(edited(small, tmp_path, pickled([1.0, 2.0])), r"data/weights/weight_9: 'shift' is a tensor; the file holds a list")
    # (A function, by reference: the unpickler refuses its module before anything could call it.)
    refused(edited(small, tmp_path, pickled([os.getcwd])),
            r"data/weights/weight_9: a pickled tensor that a weights-only load refuses \(Trying to load unsupported "
            r"GLOBAL posix\.getcwd whose module posix is blocked\): loading it would "
            r"run pickle, which can run code; load the program only if you trust it as code \(--trust-program, "
            r"trusted=True\)")
    # Without weights the pickle is not read: a meta tensor of the declared shape.
    meta = autocastgen.load_program(edited(small, tmp_path, pickled([1.0, 2.0])), weights=False).state_dict["shift"]
    assert (meta.device.type, meta.dtype, meta.shape) == ("meta", torch.float32, (3,))


def test_the_sample_inputs_are_args_and_kwargs(small: pathlib.Path, tmp_path: pathlib.Path,
                                               reference: torch.export.ExportedProgram) -> None:
    x = torch.randn(2, 4)
    program = autocastgen.load_program(edited(small, tmp_path, lambda files: files.update({SAMPLE_INPUTS: saved(((x,), {}))})))
    assert_exact(program.example_inputs, ((x,), {}))
    for value, kind in ((((x,), {}, 1), "tuple"), ([(x,), {}], "list"), (([x], {}), "tuple"), (((x,), []), "tuple"),
                        ((x,), "tuple"), (x, "Tensor")):
        refused(edited(small, tmp_path, lambda files, value=value: files.update({SAMPLE_INPUTS: saved(value)})),
                rf"data/sample_inputs/model\.pt: sample inputs are \(args, kwargs\); the file holds a {kind}")
    # No sample inputs, or an empty file (torch.export.save's when there were none): none.
    for edit in (lambda files: files.pop(SAMPLE_INPUTS), lambda files: files.update({SAMPLE_INPUTS: b""})):
        assert autocastgen.load_program(edited(small, tmp_path, edit)).example_inputs is None
    # Without weights they are never read.
    assert autocastgen.load_program(edited(small, tmp_path, lambda files: files.update({SAMPLE_INPUTS: b"junk"})),
                                    weights=False).example_inputs is None
    refused(edited(small, tmp_path, lambda files: files.update({SAMPLE_INPUTS: b"junk"})),
            r"data/sample_inputs/model\.pt: sample inputs that a weights-only load refuses \(.*\): loading it would run "
            r"pickle, which can run code; load the program only if you trust it as code \(--trust-program, trusted=True\)")


def test_a_payload_config_is_checked_entry_by_entry(small: pathlib.Path, tmp_path: pathlib.Path) -> None:
    def entry(name: str, **changes: object) -> Callable[[Files], None]:
        folder_config = CONSTANTS_CONFIG if name == "scale" else WEIGHTS_CONFIG
        return config_edit(folder_config, lambda config: config[name].update(changes))

    for path_name in (5, None, "", "../weight_0", "weight_0/x", "weight 0", ".hidden", "0weight"):
        refused(edited(small, tmp_path, entry("fc.bias", path_name=path_name)),
                rf"data/weights/model_weights_config\.json: 'fc\.bias' names the file {re.escape(repr(path_name))}, "
                r"which is no payload's name")
    refused(edited(small, tmp_path, entry("fc.bias", tensor_meta=None)),
            r"data/weights/model_weights_config\.json: 'fc\.bias' has no tensor_meta")
    for config, kind in ((b"5", "int"), (b"[]", "list"), (b'"x"', "str")):
        refused(edited(small, tmp_path, lambda files, config=config: files.update({WEIGHTS_CONFIG: b'{"config": ' + config + b"}"})),
                rf"data/weights/model_weights_config\.json: not a payload config: its config is a {kind}, not a dict")
    refused(edited(small, tmp_path, lambda files: files.update({CONSTANTS_CONFIG: b'{"config": {"a": 1}}'})),
            r"data/constants/model_constants_config\.json: not a payload config: .+")
    refused(edited(small, tmp_path, lambda files: files.update({WEIGHTS_CONFIG: b'{"config":'})),
            r"data/weights/model_weights_config\.json:1:11: not valid JSON: Expecting value")
    # A constant stored as a custom or opaque object is refused by its name, before it is read.
    for prefix in ("custom_obj_", "opaque_obj_"):
        def opaque(files: Files, prefix: str = prefix) -> None:
            entry("scale", path_name=f"{prefix}0", use_pickle=True)(files)
            files[f"data/constants/{prefix}0"] = saved(torch.ones(3))
        refused(edited(small, tmp_path, opaque),
                rf"data/constants/{prefix}0: the constant 'scale' is a custom object, which only pickle can make: it "
                r"can run code; load the program only if you trust it as code \(--trust-program, trusted=True\)")
        refused(edited(small, tmp_path, opaque), rf"data/constants/{prefix}0: the constant 'scale' is a custom object.*",
                weights=False)

    # In the weights' folder such a name is a record like any other.
    def weight_named(files: Files) -> None:
        entry("shift", path_name="custom_obj_0")(files)
        files["data/weights/custom_obj_0"] = files.pop("data/weights/weight_2")
    program = autocastgen.load_program(edited(small, tmp_path, weight_named))
    assert_exact(program.state_dict["shift"], torch.linspace(-1, 1, 3))


def test_a_program_of_pytorch_before_2_8_reads_its_pickled_weights(small: pathlib.Path, tmp_path: pathlib.Path,
                                                                   reference: torch.export.ExportedProgram) -> None:
    # One pickled dict per folder (data/weights/model.pt), read weights-only; never without weights.
    weights = {name: copy.deepcopy(tensor) for name, tensor in reference.state_dict.items()}
    weights["shift"] = torch.tensor([5.0, 6.0, 7.0])

    def legacy(value: object) -> Callable[[Files], None]:
        return lambda files: files.update({"data/weights/model.pt": saved(value)})

    program = autocastgen.load_program(edited(small, tmp_path, legacy(weights)))
    assert_exact(program.state_dict["shift"], weights["shift"])
    refused(edited(small, tmp_path, legacy([1])), r"data/weights/model\.pt: weights are a dict; the file holds a list")
    refused(edited(small, tmp_path, legacy(weights)), r"data/weights/model\.pt: an archive of PyTorch before 2\.8, whose "
            r"graph cannot be read without its weights", weights=False)
    refused(edited(small, tmp_path, legacy({"x": os.getcwd})),
            r"data/weights/model\.pt: weights that a weights-only load refuses \(Trying to load unsupported GLOBAL "
            r"posix\.getcwd whose module posix is blocked\): loading it would run pickle, .*")
    # Only its own folder's: the constants come from theirs.
    legacy_constants = edited(small, tmp_path, lambda files: files.update({"data/constants/model.pt": saved({"scale": torch.zeros(3)})}))
    assert_exact(dict(autocastgen.load_program(legacy_constants).constants), {"scale": torch.zeros(3)})


# --- tensor records ------------------------------------------------------------------------------

def meta_of(files: Files, name: str) -> dict:
    folder_config = CONSTANTS_CONFIG if name == "scale" else WEIGHTS_CONFIG
    return json.loads(files[folder_config])["config"][name]


def set_meta(name: str, **changes: object) -> Callable[[Files], None]:
    folder_config = CONSTANTS_CONFIG if name == "scale" else WEIGHTS_CONFIG
    return config_edit(folder_config, lambda config: config[name]["tensor_meta"].update(changes))


def ints(*values: int) -> list[dict]:
    return [{"as_int": v} for v in values]


def test_views_of_one_record_read_it_once_at_their_extent(small: pathlib.Path, tmp_path: pathlib.Path,
                                                          reference: torch.export.ExportedProgram) -> None:
    # fc.bias as a strided view into fc.weight's record (12 floats): elements 5, 7, 9.
    def edit(files: Files) -> None:
        config_edit(WEIGHTS_CONFIG, lambda config: config["fc.bias"].update(path_name="weight_0"))(files)
        set_meta("fc.bias", sizes=ints(3), strides=ints(2), storage_offset={"as_int": 5})(files)
        files.pop("data/weights/weight_1")
    program = autocastgen.load_program(edited(small, tmp_path, edit))
    weight, bias = program.state_dict["fc.weight"], program.state_dict["fc.bias"]
    assert_exact(bias.detach(), reference.state_dict["fc.weight"].flatten()[5:10:2])
    assert bias.untyped_storage().data_ptr() == weight.untyped_storage().data_ptr()
    assert (bias.stride(), bias.storage_offset()) == ((2,), 5)
    # A view past the record's end makes the extent larger than what is stored.
    past = edited(small, tmp_path, lambda files: (edit(files), set_meta("fc.bias", storage_offset={"as_int": 8})(files)))
    refused(past, "data/weights/weight_0: stores 48 bytes where its tensors' declared shapes span 52; refused before "
                  "decompressing")
    # The record viewed as two dtypes is refused.
    refused(edited(small, tmp_path, lambda files: (edit(files), set_meta("fc.bias", dtype=8)(files))),
            r"data/weights/weight_0: viewed as torch\.float32 and as torch\.float64")


@pytest.mark.parametrize(("sizes", "strides", "offset", "elements"), [
    ((3, 4), (4, 1), 0, 12),   # contiguous
    ((4, 3), (1, 4), 0, 12),   # transposed
    ((2, 2), (1, 2), 3, 7),    # offset + (2-1)*1 + (2-1)*2 + 1
    ((12,), (1,), 0, 12),
    ((1, 12), (5, 1), 0, 12),  # a size-1 dimension's stride spans nothing
    ((0, 5), (5, 1), 0, 0),    # no element: no bytes
    ((0, 5), (1, 1), 0, 0),    # (whatever the strides would span)
    ((2, 0), (1, 1), 3, 0),
    ((), (), 11, 12),
])
def test_a_record_must_hold_exactly_the_bytes_its_view_spans(sizes: tuple, strides: tuple, offset: int, elements: int,
                                                            small: pathlib.Path, tmp_path: pathlib.Path) -> None:
    data = bytes(range(4 * elements))

    def edit(files: Files, stored: bytes = data) -> None:
        set_meta("fc.weight", sizes=ints(*sizes), strides=ints(*strides), storage_offset={"as_int": offset})(files)
        files["data/weights/weight_0"] = stored

    # The records alone (the program's graph would refuse a weight of another shape).
    records = tensor_records(edited(small, tmp_path, edit))
    assert records.extent["data/weights/weight_0"] == (4 * elements, torch.float32)
    view = records.view(records_meta(records, "fc.weight"), "data/weights/weight_0")
    assert (tuple(view.shape), view.stride(), view.storage_offset()) == (sizes, strides, offset)
    if elements:
        flat = torch.frombuffer(bytearray(data), dtype=torch.float32)
        assert_exact(view, torch.as_strided(flat, sizes, strides, offset))
        for wrong in (data[:-1], data + b"\0"):
            with pytest.raises(ProgramFileError, match=f": data/weights/weight_0: stores {len(wrong)} bytes where its "
                                                       f"tensors' declared shapes span {len(data)}; refused before "
                                                       "decompressing$"):
                tensor_records(edited(small, tmp_path, lambda files, wrong=wrong: edit(files, wrong))).read(
                    "data/weights/weight_0")


def tensor_records(path: pathlib.Path, weights: bool = True, limit: int = 1 << 40) -> program_file._TensorRecords:
    from torch._export.serde import schema
    from torch._export.serde.serialize import _dict_to_dataclass

    archive = program_file._Archive(str(path))
    config = _dict_to_dataclass(schema.PayloadConfig, archive.json(WEIGHTS_CONFIG, 1 << 20)).config
    records = program_file._TensorRecords(archive, "data/weights/", config, weights,
                                          program_file._Budget(archive, limit))
    records.config = config  # type: ignore[attr-defined]
    return records


def records_meta(records: program_file._TensorRecords, name: str) -> object:
    return records.config[name]  # type: ignore[attr-defined]


def test_a_record_of_no_bytes_is_zeros_and_counted(small: pathlib.Path, tmp_path: pathlib.Path) -> None:
    # torch.export.save stores a fake tensor as no bytes: read as zeros of its extent (as torch.load does).
    zero = edited(small, tmp_path, lambda files: files.update({"data/weights/weight_0": b""}))
    program = autocastgen.load_program(zero)
    assert_exact(program.state_dict["fc.weight"].detach(), torch.zeros(3, 4))
    assert type(program.state_dict["fc.weight"]) is torch.nn.Parameter
    records = tensor_records(zero, limit=48)
    assert_exact(records.read("data/weights/weight_0"), torch.zeros(12))
    with pytest.raises(ProgramFileError, match=r": data/weights/weight_0: the program's weights and inputs declare more "
                                               r"bytes than this machine's memory \(47\); refused before decompressing$"):
        tensor_records(zero, limit=47).read("data/weights/weight_0")


@pytest.mark.parametrize(("dtype", "code", "element"), [(torch.float16, 6, 2), (torch.int8, 2, 1), (torch.float64, 8, 8),
                                                        (torch.bool, 12, 1), (torch.bfloat16, 13, 2)])
def test_a_records_bytes_are_counted_in_its_dtypes_elements(dtype: torch.dtype, code: int, element: int,
                                                           small: pathlib.Path, tmp_path: pathlib.Path) -> None:
    # shift: 3 elements of `dtype` in 3 * element bytes.
    values = torch.tensor([1, 0, 1], dtype=dtype)
    stored = values.view(torch.uint8).numpy().tobytes() if element > 1 or dtype is torch.bool else values.numpy().tobytes()

    def edit(files: Files, extra: bytes = b"") -> None:
        set_meta("shift", dtype=code)(files)
        files["data/weights/weight_2"] = stored + extra
    records = tensor_records(edited(small, tmp_path, edit))
    assert_exact(records.view(records_meta(records, "shift"), "data/weights/weight_2"), values)
    with pytest.raises(ProgramFileError, match=f"stores {3 * element + 1} bytes where its tensors' declared shapes span "
                                               f"{3 * element};"):
        bad = tensor_records(edited(small, tmp_path, lambda files: edit(files, b"\0")))
        bad.view(records_meta(bad, "shift"), "data/weights/weight_2")


def test_a_stored_tensors_layout_is_checked(small: pathlib.Path, tmp_path: pathlib.Path) -> None:
    why = r"data/weights/weight_0: a stored tensor's {} must be a non-negative integer"
    for field, value, what in (("sizes", ints(3, -4), "size"), ("sizes", [{"as_int": 3}, {"as_expr": {"expr_str": "s0"}}], "size"),
                               ("strides", ints(4, -1), "stride"), ("storage_offset", {"as_int": -1}, "storage offset"),
                               ("storage_offset", {"as_int": 1.5}, "storage offset")):
        path = edited(small, tmp_path, set_meta("fc.weight", **{field: value}))
        refused(path, why.format(what))
        refused(path, why.format(what), weights=False)
    refused(edited(small, tmp_path, set_meta("fc.weight", strides=ints(1))), "data/weights/weight_0: 2 sizes and 1 strides")
    for field in ("sizes", "strides"):
        refused(edited(small, tmp_path, set_meta("fc.weight", **{field: 5})),
                "data/weights/weight_0: a stored tensor's sizes and strides must be lists")
    refused(edited(small, tmp_path, set_meta("fc.weight", requires_grad="yes")),
            r"data/weights/model_weights_config\.json: 'fc\.weight' has a requires_grad that is not a bool")
    refused(edited(small, tmp_path, set_meta("fc.weight", dtype=99)), "data/weights/weight_0: unknown dtype 99")
    refused(edited(small, tmp_path, set_meta("fc.weight", dtype=99)), "data/weights/weight_0: unknown dtype 99",
            weights=False)
    # A size of zero and an offset of zero are integers like any other.
    program_file._layout(records_meta(tensor_records(edited(small, tmp_path, set_meta(
        "fc.weight", sizes=ints(0, 4), storage_offset={"as_int": 0}))), "fc.weight").tensor_meta, error, "m")


def test_without_weights_a_records_layout_gives_a_meta_tensor(small: pathlib.Path, tmp_path: pathlib.Path) -> None:
    path = edited(small, tmp_path, set_meta("fc.weight", sizes=ints(2, 2), strides=ints(1, 2),
                                            storage_offset={"as_int": 3}))
    records = tensor_records(path, weights=False)
    view = records.view(records_meta(records, "fc.weight"), "data/weights/weight_0")
    assert (view.device.type, view.dtype, tuple(view.shape), view.stride(), view.storage_offset()) == \
        ("meta", torch.float32, (2, 2), (1, 2), 3)
    assert records.storages == {}
    assert program_file._element_size(torch.bfloat16) == 2 and program_file._element_size(torch.float64) == 8


# --- the memory budget ---------------------------------------------------------------------------

def test_the_declared_bytes_together_must_fit_in_memory(small: pathlib.Path, tmp_path: pathlib.Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # weights 48 + 12 + 12 bytes, the constant 12, the sample inputs' pickle: all must fit together.
    inputs = len(members(small)[1][SAMPLE_INPUTS])
    total = 48 + 12 + 12 + 12 + inputs
    monkeypatch.setattr(program_file, "_memory_bytes", lambda: total)
    assert autocastgen.load_program(small).state_dict
    monkeypatch.setattr(program_file, "_memory_bytes", lambda: total - 1)
    refused(small, r"data/sample_inputs/model\.pt: the program's weights and inputs declare more bytes than this "
                   rf"machine's memory \({total - 1}\); refused before decompressing")
    monkeypatch.setattr(program_file, "_memory_bytes", lambda: 47)
    refused(small, r"data/weights/weight_0: the program's weights and inputs declare more bytes than this machine's "
                   r"memory \(47\); refused before decompressing")
    # Without weights nothing is read, whatever the memory.
    monkeypatch.setattr(program_file, "_memory_bytes", lambda: 0)
    assert autocastgen.load_program(small, weights=False).state_dict


def test_a_budget_takes_exactly_what_is_left() -> None:
    class Archive:
        error = staticmethod(error)

    budget = program_file._Budget(Archive(), 10)  # type: ignore[arg-type]
    assert budget.take(4, "a") == 4 and budget.take(6, "b") == 6 and budget.take(0, "c") == 0
    with pytest.raises(ProgramFileError, match=r"^p\.pt2: d: the program's weights and inputs declare more bytes than "
                                               r"this machine's memory \(10\); refused before decompressing$"):
        budget.take(1, "d")


def test_the_machines_memory_is_its_physical_pages() -> None:
    assert program_file._memory_bytes() == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_a_pickled_part_is_counted_before_it_is_read(small: pathlib.Path, tmp_path: pathlib.Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # A pickled weight takes its stored size from the budget before it is inflated.
    def pickled(files: Files) -> None:
        config_edit(WEIGHTS_CONFIG, lambda config: config["shift"].update(path_name="weight_9", use_pickle=True))(files)
        files["data/weights/weight_9"] = saved(torch.zeros(1000))
    path = edited(small, tmp_path, pickled)
    size = len(members(path)[1]["data/weights/weight_9"])
    monkeypatch.setattr(program_file, "_memory_bytes", lambda: 48 + 12 + size - 1)
    refused(path, r"data/weights/weight_9: the program's weights and inputs declare more bytes than this machine's "
                  rf"memory \({48 + 12 + size - 1}\); refused before decompressing")


# --- pickled parts -------------------------------------------------------------------------------

def pickled_shift(value: object, dtype: int = 7) -> Callable[[Files], None]:
    """The buffer `shift` stored pickled (use_pickle), as `value`, declared of `dtype`."""
    def edit(files: Files) -> None:
        def change(config: dict) -> None:
            config["shift"] = {**config["shift"], "path_name": "weight_9", "use_pickle": True}
            config["shift"]["tensor_meta"]["dtype"] = dtype
        config_edit(WEIGHTS_CONFIG, change)(files)
        files["data/weights/weight_9"] = saved(value)
    return edit


def test_a_pickled_part_is_weights_only_whatever_the_environment_asks(small: pathlib.Path, tmp_path: pathlib.Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD turns torch.load's default to full pickle; the reader asks
    # for weights only in so many words, so the environment changes nothing.
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    refused(edited(small, tmp_path, pickled_shift([os.getcwd])),
            r"data/weights/weight_9: a pickled tensor that a weights-only load refuses \(Trying to load unsupported "
            r"GLOBAL posix\.getcwd whose module posix is blocked\): loading it would run pickle, which can run code; "
            r"load the program only if you trust it as code \(--trust-program, trusted=True\)")


def test_a_pickled_part_saved_on_a_gpu_reads_onto_the_cpu(small: pathlib.Path, tmp_path: pathlib.Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # A tensor pickled where it lived on CUDA (its storage's location says so): read onto the CPU.
    value = torch.tensor([1.0, -2.0, 3.5])
    with monkeypatch.context() as patch:
        patch.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        data = saved(value)
    assert b"cuda:0" in data
    program = autocastgen.load_program(edited(small, tmp_path, lambda files: (
        pickled_shift(value)(files), files.update({"data/weights/weight_9": data}))))
    assert_exact(program.state_dict["shift"], value)


def test_without_weights_a_pickled_part_is_a_meta_tensor_of_its_declared_layout(small: pathlib.Path,
                                                                                tmp_path: pathlib.Path) -> None:
    # Its declared dtype (float16 here), shape and strides; a declared layout that is no layout is refused.
    meta = autocastgen.load_program(edited(small, tmp_path, pickled_shift([1], dtype=6)), weights=False).state_dict["shift"]
    assert (meta.device.type, meta.dtype, tuple(meta.shape), meta.stride()) == ("meta", torch.float16, (3,), (1,))

    def bad(files: Files) -> None:
        pickled_shift([1])(files)
        set_meta("shift", sizes=ints(-3))(files)
    refused(edited(small, tmp_path, bad), "data/weights/weight_9: a stored tensor's size must be a non-negative integer",
            weights=False)


def test_a_record_of_no_bytes_is_zeros_of_its_dtype(small: pathlib.Path, tmp_path: pathlib.Path) -> None:
    def edit(files: Files) -> None:
        set_meta("shift", dtype=6, sizes=ints(4), strides=ints(1))(files)
        files["data/weights/weight_2"] = b""
    records = tensor_records(edited(small, tmp_path, edit))
    assert_exact(records.read("data/weights/weight_2"), torch.zeros(4, dtype=torch.float16))


def refusal_of(data: bytes) -> BaseException:
    try:
        torch.load(io.BytesIO(data), weights_only=True)
    except Exception as error:  # noqa: BLE001 - the refusal is what is tested
        return error
    raise AssertionError("torch.load took it")


def test_a_refusal_gives_the_unpicklers_own_reason() -> None:
    # PyTorch's refusals, in its two forms: a blocked module (the paragraph after the opening one),
    # a global not allowed ("WeightsUnpickler error: ...", to the end of its sentence).
    assert program_file._unpickler_reason(refusal_of(saved([os.getcwd]))) == (
        "Trying to load unsupported GLOBAL posix.getcwd whose module posix is blocked")
    assert program_file._unpickler_reason(refusal_of(saved(zipfile.ZipInfo("x")))) == (
        "Unsupported global: GLOBAL zipfile.ZipInfo was not an allowed global by default")
    long = program_file._unpickler_reason(refusal_of(b"\x80\x02c" + b"m" * 400 + b"\nf\n."))
    assert long == "Unsupported global: GLOBAL " + "m" * 273, long
    # What is not the weights-only unpickler's refusal: its first line.
    assert program_file._unpickler_reason(refusal_of(b"junk")) == "unpack requires a buffer of 4 bytes"
    # The other forms PyTorch writes: the reason after the advice, or none but the opening line.
    assert program_file._unpickler_reason(RuntimeError(
        "Weights only load failed. Advice. WeightsUnpickler error: \n\nUnsupported operand 149\n\nCheck the "
        "documentation of torch.load.")) == "Unsupported operand 149"
    assert program_file._unpickler_reason(RuntimeError(
        "Weights only load failed. Import failed\n Advice.\n\nCheck the documentation of torch.load.")) == (
        "Weights only load failed. Import failed")
    assert program_file._unpickler_reason(RuntimeError("Weights only load failed.")) == "Weights only load failed."


def test_an_errors_first_line_is_at_most_500_characters() -> None:
    assert program_file._first_line(ValueError("x" * 600 + "\nmore")) == "x" * 500
    assert program_file._first_line(ValueError("\n  first\nsecond")) == "first"
    assert program_file._first_line(KeyError()) == "KeyError"
    assert program_file._first_line(ValueError("   ")) == "ValueError"


def test_a_record_is_read_chunk_by_chunk_into_place(small: pathlib.Path, reference: torch.export.ExportedProgram,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # Chunks of 7 bytes (16 MiB in earnest): each lands after the one before.
    monkeypatch.setattr(program_file, "_CHUNK", 7)
    program = autocastgen.load_program(small)
    for name, tensor in reference.state_dict.items():
        assert_exact(program.state_dict[name], tensor, name)


def test_without_the_machines_memory_the_budget_is_a_tebibyte(monkeypatch: pytest.MonkeyPatch) -> None:
    def unknown(name: str) -> int:
        raise ValueError(name)

    monkeypatch.setattr(os, "sysconf", unknown)
    assert program_file._memory_bytes() == 1 << 40


@pytest.mark.parametrize(("text", "reason"), [
    # A "WeightsUnpickler error:" line: its first sentence, without a final full stop.
    ("Weights only load failed. Advice.\n\tWeightsUnpickler error: .odd GLOBAL X.\n\nCheck the documentation.",
     ".odd GLOBAL X"),
    ("Weights only load failed.\n\tWeightsUnpickler error: GLOBAL a. More. WeightsUnpickler error: b", "GLOBAL a"),
    # Else the paragraph after the opening one, its first line, at most 300 characters.
    ("Weights only load failed. Advice.\n\n\nTrying to load unsupported GLOBAL X.\nmore\n\nCheck the documentation.",
     "Trying to load unsupported GLOBAL X"),
    ("Weights only load failed.\n\n" + "y" * 400, "y" * 300),
])
def test_the_unpicklers_reason_is_cut_from_pytorchs_text(text: str, reason: str) -> None:
    assert program_file._unpickler_reason(RuntimeError(text)) == reason


def test_the_schemas_and_the_deserializers_refusals_are_theirs_first_line(small: pathlib.Path,
                                                                          tmp_path: pathlib.Path) -> None:
    from torch._export.serde import schema
    from torch._export.serde.serialize import _dict_to_dataclass

    document = {"graph_module": {"graph": {}}}
    with pytest.raises(Exception) as theirs:  # noqa: PT011 - whatever the schema's reader raises
        _dict_to_dataclass(schema.ExportedProgram, document)
    refused(edited(small, tmp_path, lambda files: files.update({GRAPH: json.dumps(document).encode()})),
            rf"models/model\.json: not a program graph of PyTorch {re.escape(torch.__version__)}'s schema: "
            + re.escape(str(theirs.value).strip().splitlines()[0]))
    # A buffer the graph names and the weights lack: PyTorch's deserializer says so.
    refused(edited(small, tmp_path, lambda files: (config_edit(WEIGHTS_CONFIG, lambda config: config.pop("shift"))(files),
                                                   files.pop("data/weights/weight_2"))),
            rf"models/model\.json: PyTorch {re.escape(torch.__version__)} cannot rebuild the program: Buffer shift is not "
            r"in the state dict\.")


def test_a_parameter_keeps_its_declared_requires_grad(small: pathlib.Path, tmp_path: pathlib.Path) -> None:
    program = autocastgen.load_program(edited(small, tmp_path, set_meta("fc.bias", requires_grad=False)))
    bias = program.state_dict["fc.bias"]
    assert type(bias) is torch.nn.Parameter and bias.requires_grad is False
    assert program.state_dict["fc.weight"].requires_grad is True


def test_an_operators_name_touches_no_namespace_it_does_not_hold() -> None:
    # torch.ops makes a namespace object for any attribute asked of it: a part that is no name, or a
    # dunder, is refused before anything is asked.
    for name, part in (("torch.ops.not-a-namespace.op.default", "not-a-namespace"),
                       ("torch.ops.__acg_probe__.op.default", "__acg_probe__")):
        assert not program_file._is_operator(name)
        assert part not in torch.ops.__dict__, name


def test_a_record_that_does_not_inflate_is_refused_by_name(small: pathlib.Path, tmp_path: pathlib.Path) -> None:
    corrupt = corrupt_weights(small, tmp_path / "corrupt.pt2")
    refused(corrupt, r"data/weights/weight_\d: cannot be read: Error -3 while decompressing data: .+")


def test_a_long_targets_name_is_cut_at_200_characters() -> None:
    target = "torch.ops.aten." + "x" * 300 + ".default"
    with pytest.raises(ProgramFileError) as refusal:
        program_file._check_graph(graph_with(node(target, "n")), error)
    assert str(refusal.value).startswith(f"p.pt2: graph.nodes[0] (n): calls {target[:200]!r}, which is not an operator")
