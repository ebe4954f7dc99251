"""A program file is data (docs/security.md#program-files, Note [a program file is data] in
autocastgen/_export/program_file.py): every reader of a saved program in autocastgen runs no code from it
and reads no more than the program declares; a benign program reads as torch.export.load reads it.

Each hostile file is first shown to run its payload through PyTorch's own loader (so the payload
is real), then fed to every reader: the marker file must never appear.

ctest sets AUTOCASTGEN_BUILD_DIR; by hand:
  AUTOCASTGEN_BUILD_DIR=build python3 -m pytest tests/python/export/test_program_file.py
"""
from __future__ import annotations

import contextlib
import os
import pathlib
import re
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch

from built_tree import require_built

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
CLI = pathlib.Path(os.environ.get("AUTOCASTGEN_CLI", BUILD / "bin" / "autocastgen"))
require_built(BUILD, "python/autocastgen/__init__.py", "bin/autocastgen")

import autocastgen  # noqa: E402
from autocastgen import ProgramFileError  # noqa: E402
from autocastgen._export import cli as export_cli  # noqa: E402
from export_checks import ISSUE_POLICY  # noqa: E402
from hostile_programs import corrupt_weights, malformed_edits, payload_edits, rewrite, zip_bomb  # noqa: E402

pytestmark = pytest.mark.skipif(autocastgen._export.supported() is not None,
                                reason=str(autocastgen._export.supported()))

# The payloads torch.export.load (PyTorch 2.15) runs; a custom object goes through PyTorch's C++
# unpickler, which refuses a Python pickle without running it: ours refuses it by kind.
TORCH_RUNS = {"sample inputs", "a use_pickle weight", "a pickled tensor constant", "an opaque constant",
              "a shape expression"}
# Payloads in the weights and sample inputs, which the precision map never reads: it maps them.
MAPPED = {"sample inputs", "a use_pickle weight", "a pickled tensor constant"}


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)
        self.register_buffer("shift", torch.linspace(-1, 1, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.fc1(x)).matmul(self.fc2.weight.t()) + self.shift


@pytest.fixture(scope="module")
def benign(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A float32 program with a dynamic batch (a shape expression in its graph), weights, a buffer
    and sample inputs, as torch.export.save writes it."""
    torch.manual_seed(0)
    program = torch.export.export(Block(), (torch.randn(3, 8),), dynamic_shapes=({0: torch.export.Dim("batch")},))
    path = tmp_path_factory.mktemp("benign") / "block.pt2"
    torch.export.save(program, path)
    return path


def readers(tmp: pathlib.Path) -> dict[str, Callable[[pathlib.Path], object]]:
    """Every place autocastgen reads a saved program, called on a path."""
    def cli(verb: str) -> Callable[[pathlib.Path], object]:
        def run(path: pathlib.Path) -> object:
            args = {"apply": ["apply", str(path), "--dtype", "bfloat16", "-o", str(tmp / "out.pt2")],
                    "precision-map": ["precision-map", str(path), "--format", "json"]}[verb]
            status = export_cli.main(args)
            if status:
                raise ProgramFileError(str(path), "the CLI refused it")
            return status
        return run

    return {
        "load_program": autocastgen.load_program,
        "precision_map": autocastgen.precision_map,
        "apply_policy": lambda path: autocastgen.apply_policy(path, device="cpu", dtype=torch.bfloat16, policy=ISSUE_POLICY),
        "export_onnx": lambda path: autocastgen.export_onnx(path),
        "export_aoti": lambda path: autocastgen.export_aoti(path, package_path=tmp / "out.pt2"),
        "cli apply": cli("apply"),
        "cli precision-map": cli("precision-map"),
    }


@pytest.mark.parametrize("hidden_in", sorted(payload_edits(pathlib.Path("m"))))
def test_no_reader_runs_a_payload(hidden_in: str, benign: pathlib.Path, tmp_path: pathlib.Path, capsys) -> None:
    marker = tmp_path / "MARKER"
    hostile = rewrite(benign, tmp_path / "hostile.pt2", payload_edits(marker)[hidden_in])
    # The payload is real: PyTorch's own loader runs it (or, for a custom object, refuses it).
    with contextlib.suppress(Exception):  # it may fail after running the payload, or not at all
        torch.export.load(hostile)
    assert marker.exists() == (hidden_in in TORCH_RUNS), hidden_in
    marker.unlink(missing_ok=True)
    capsys.readouterr()
    for name, read in readers(tmp_path).items():
        maps = name.endswith(("precision_map", "precision-map")) and hidden_in in MAPPED
        if maps:
            read(hostile)
        else:
            with pytest.raises(ProgramFileError, match=re.escape(str(hostile))):
                read(hostile)
        assert not marker.exists(), (name, hidden_in)
        assert not (tmp_path / "out.pt2").exists(), name
        err = capsys.readouterr().err
        if name.startswith("cli") and not maps:
            assert err.startswith(f"autocastgen: error: {hostile}: ") and err.count("\n") == 1, err
            assert "Traceback" not in err and ("trust-program" in err or hidden_in == "a shape expression"), err


def test_the_refusals_say_what_and_where(benign: pathlib.Path, tmp_path: pathlib.Path) -> None:
    marker = tmp_path / "MARKER"
    expected = {
        "sample inputs": r"data/sample_inputs/model\.pt: sample inputs that a weights-only load refuses "
                         r"\(Trying to load unsupported GLOBAL posix\.system whose module posix is blocked\): loading it would run pickle, which can run "
                         r"code; load the program only if you trust it as code \(--trust-program, trusted=True\)",
        "a use_pickle weight": r"data/weights/weight_99: a pickled tensor that a weights-only load refuses",
        "a pickled tensor constant": r"data/constants/tensor_99: a pickled tensor that a weights-only load refuses",
        "an opaque constant": r"data/constants/opaque_obj_99: the constant 'hidden' is a custom object, which only "
                              r"pickle can make",
        "a custom-object constant": r"data/constants/custom_obj_99: the constant 'hidden' is a custom object",
        "a shape expression": r"models/model\.json: graph\.tensor_values\['x'\]: the shape expression \"__import__"
                              r"\('os'\)\.system\(.*\" holds a call .*, which PyTorch's shape expressions never do",
    }
    for hidden_in, edit in payload_edits(marker).items():
        hostile = rewrite(benign, tmp_path / "hostile.pt2", edit)
        with pytest.raises(ProgramFileError) as refused:
            autocastgen.load_program(hostile)
        assert re.match(re.escape(str(hostile)) + ": " + expected[hidden_in], str(refused.value)), str(refused.value)
        assert refused.value.path == str(hostile)
    assert not marker.exists()


@pytest.mark.parametrize("case", sorted(malformed_edits()))
def test_a_malformed_graph_gets_a_located_error(case: str, benign: pathlib.Path, tmp_path: pathlib.Path, capsys) -> None:
    edit, message = malformed_edits()[case]
    broken = rewrite(benign, tmp_path / "broken.pt2", edit)
    for verb in (["precision-map", str(broken)], ["apply", str(broken), "--dtype", "float16", "-o", str(tmp_path / "o.pt2")]):
        assert export_cli.main(verb) == 1
        err = capsys.readouterr().err
        assert re.fullmatch(f"autocastgen: error: {re.escape(str(broken))}: {message}.*\n", err), err
    with pytest.raises(ProgramFileError, match=message):
        autocastgen.precision_map(broken)


def test_a_benign_program_reads_as_torch_reads_it(benign: pathlib.Path, tmp_path: pathlib.Path) -> None:
    ours, theirs = autocastgen.load_program(benign), torch.export.load(benign)
    assert ours.graph_module.code == theirs.graph_module.code
    assert str(ours.range_constraints) == str(theirs.range_constraints)
    assert ours.state_dict.keys() == theirs.state_dict.keys()
    for name, tensor in theirs.state_dict.items():
        mine = ours.state_dict[name]
        assert type(mine) is type(tensor) and mine.requires_grad == tensor.requires_grad, name
        assert torch.equal(mine, tensor) and mine.stride() == tensor.stride(), name
    assert all(torch.equal(a, b) for a, b in zip(ours.example_inputs[0], theirs.example_inputs[0]))
    for batch in (1, 3, 7):
        x = torch.randn(batch, 8)
        assert torch.equal(ours.module()(x), theirs.module()(x))
    # Mapped and applied bit for bit as from torch.export.load's program.
    assert autocastgen.precision_map(benign) == autocastgen.precision_map(theirs)
    options = {"device": "cpu", "dtype": torch.bfloat16, "policy": ISSUE_POLICY}
    applied, reference = autocastgen.apply_policy(benign, **options), autocastgen.apply_policy(theirs, **options)
    assert applied.graph_module.code == reference.graph_module.code
    x = torch.randn(5, 8)
    assert torch.equal(applied.module()(x), reference.module()(x))
    # Trusted: PyTorch's own loader, the same program.
    trusted = autocastgen.load_program(benign, trusted=True)
    assert trusted.graph_module.code == theirs.graph_module.code


def test_trust_is_asked_for_and_then_given(benign: pathlib.Path, tmp_path: pathlib.Path, capsys) -> None:
    # A program whose weight needs pickle: refused as data, read by PyTorch's loader when trusted
    # (here its payload runs: that is what trusting a file means).
    marker = tmp_path / "MARKER"
    hostile = rewrite(benign, tmp_path / "needs-pickle.pt2", payload_edits(marker)["a use_pickle weight"])
    assert export_cli.main(["apply", str(hostile), "--dtype", "float16", "-o", str(tmp_path / "o.pt2")]) == 1
    assert "--trust-program" in capsys.readouterr().err and not marker.exists()
    with pytest.raises(Exception):  # noqa: B017, PT011 - the payload is no tensor; PyTorch fails after running it
        autocastgen.load_program(hostile, trusted=True)
    assert marker.exists()


def test_the_precision_map_reads_no_weight(benign: pathlib.Path, tmp_path: pathlib.Path) -> None:
    # Every weight's record is a deflate stream that does not inflate: the map never reads one, so it
    # maps the program as it maps the benign one; apply reads them and says which failed.
    corrupt = corrupt_weights(benign, tmp_path / "corrupt.pt2")
    assert autocastgen.precision_map(corrupt) == autocastgen.precision_map(benign)
    with pytest.raises(ProgramFileError, match=r"data/weights/weight_\d+: cannot be read: "):
        autocastgen.load_program(corrupt)


@pytest.fixture(scope="module")
def bomb(benign: pathlib.Path, tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return zip_bomb(benign, tmp_path_factory.mktemp("bomb") / "bomb.pt2")


def test_a_zip_bomb_is_mapped_unread_and_refused_unread(bomb: pathlib.Path, benign: pathlib.Path, tmp_path: pathlib.Path,
                                                         capsys) -> None:
    # 4 GiB of zeros deflated to a few MB, declared as a 16x8 float32 weight (512 bytes).
    assert bomb.stat().st_size < 8 << 20
    assert autocastgen.precision_map(bomb) == autocastgen.precision_map(benign)
    assert export_cli.main(["apply", str(bomb), "--dtype", "bfloat16", "-o", str(tmp_path / "o.pt2")]) == 1
    err = capsys.readouterr().err
    assert re.fullmatch(f"autocastgen: error: {re.escape(str(bomb))}: data/weights/weight_0: stores 4294967296 bytes "
                        "where its tensors' declared shapes span 512; refused before decompressing\n", err), err
    assert not (tmp_path / "o.pt2").exists()


@pytest.mark.skipif(not CLI.is_file(), reason="the CLI is not built")
def test_the_cli_takes_trust_program_and_refuses_without(benign: pathlib.Path, tmp_path: pathlib.Path) -> None:
    # The C++ verbs pass --trust-program through to the Python half; one process each way.
    marker = tmp_path / "MARKER"
    hostile = rewrite(benign, tmp_path / "needs-pickle.pt2", payload_edits(marker)["sample inputs"])
    env = dict(os.environ, AUTOCASTGEN_PYTHON=sys.executable)
    refused = subprocess.run([str(CLI), "apply", str(hostile), "--dtype", "float16", "-o", str(tmp_path / "o.pt2")],
                             capture_output=True, text=True, env=env, timeout=300, check=False)
    assert refused.returncode == 1 and refused.stderr.startswith(f"autocastgen: error: {hostile}: data/sample_inputs/")
    assert "Traceback" not in refused.stderr and not marker.exists()
    mapped = subprocess.run([str(CLI), "precision-map", str(benign), "--trust-program"],
                            capture_output=True, text=True, env=env, timeout=300, check=False)
    assert mapped.returncode == 0 and mapped.stdout.startswith("block.pt2:"), mapped.stderr
