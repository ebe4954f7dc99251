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

import requires
from built_tree import require_built

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
CLI = pathlib.Path(os.environ.get("AUTOCASTGEN_CLI", BUILD / "bin" / "autocastgen"))
require_built(BUILD, "python/autocastgen/__init__.py", "bin/autocastgen")

import autocastgen  # noqa: E402
from autocastgen import ProgramFileError  # noqa: E402
from autocastgen._export import cli as export_cli  # noqa: E402
from exact import assert_exact  # noqa: E402
from export_checks import ISSUE_POLICY  # noqa: E402
from hostile_programs import (  # noqa: E402
    SYMBOL,
    corrupt_weights,
    counting_inflation,
    expression_cases,
    expression_edit,
    lying_zip_bomb,
    malformed_edits,
    needs_trust,
    payload_edits,
    rewrite,
    short_record,
    zip_bomb,
)

# autocastgen.export with the pinned PyTorch: an error under ctest where it says no (requires.py).
requires.supported(autocastgen._export.supported())

# The payloads torch.export.load (PyTorch 2.15) runs; a custom object goes through PyTorch's C++
# unpickler, which refuses a Python pickle without running it: ours refuses it by kind.
TORCH_RUNS = {"sample inputs", "a use_pickle weight", "a pickled tensor constant", "an opaque constant",
              "a shape expression"}
# Payloads in the weights and sample inputs, which the precision map never reads: it maps them.
MAPPED = {"sample inputs", "a use_pickle weight", "a pickled tensor constant"}
# Why each payload is refused, after the file's path (every ProgramFileError starts with it).
REFUSALS = {
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


def original() -> tuple[torch.nn.Module, torch.Tensor]:
    """The module the benign program was exported from and its sample input (the same seed)."""
    torch.manual_seed(0)
    return Block(), torch.randn(3, 8)


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
    block, x = original()
    program = torch.export.export(block, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},))
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
        elif name.startswith("cli"):  # the CLI's own line says why
            with pytest.raises(ProgramFileError, match="the CLI refused it"):
                read(hostile)
        else:
            with pytest.raises(ProgramFileError, match=f"^{re.escape(str(hostile))}: {REFUSALS[hidden_in]}"):
                read(hostile)
        assert not marker.exists(), (name, hidden_in)
        assert not (tmp_path / "out.pt2").exists(), name
        err = capsys.readouterr().err
        if name.startswith("cli") and not maps:
            assert re.match(f"autocastgen: error: {re.escape(str(hostile))}: {REFUSALS[hidden_in]}", err), err
            assert err.count("\n") == 1, err
            assert "Traceback" not in err and ("trust-program" in err or hidden_in == "a shape expression"), err


@pytest.fixture
def compiled(monkeypatch: pytest.MonkeyPatch) -> list[torch.export.ExportedProgram]:
    """The programs handed to Inductor's AOT compile, which is replaced by one that writes an empty
    package: the readers are what these tests check (test_deploy_aoti compiles)."""
    programs: list[torch.export.ExportedProgram] = []

    def compile_package(program: torch.export.ExportedProgram, package_path: str, **_: object) -> str:
        programs.append(program)
        pathlib.Path(package_path).write_bytes(b"")
        return package_path

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", compile_package)
    return programs


def test_every_reader_reads_the_benign_program(benign: pathlib.Path, tmp_path: pathlib.Path, capsys,
                                               compiled: list[torch.export.ExportedProgram]) -> None:
    # The control of the refusals above: each reader takes the benign file. Inductor's compile is
    # replaced (the reader is what is tested here; test_deploy_aoti compiles).
    for name, read in readers(tmp_path).items():
        result = read(benign)
        assert result is not None or name.startswith("cli"), name
        (tmp_path / "out.pt2").unlink(missing_ok=True)
    assert len(compiled) == 1 and compiled[0].graph_module.code, compiled
    out = capsys.readouterr()
    assert "error" not in out.err, out.err


def test_the_refusals_say_what_and_where(benign: pathlib.Path, tmp_path: pathlib.Path) -> None:
    marker = tmp_path / "MARKER"
    expected = REFUSALS
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
    block, sample = original()
    # What was saved: the module's weights and buffer, and its sample input (none of them empty).
    assert sorted(theirs.state_dict) == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight", "shift"]
    assert_exact(dict(theirs.state_dict), dict(block.state_dict()))
    assert_exact(theirs.example_inputs, ((sample,), {}))
    assert ours.graph_module.code == theirs.graph_module.code
    assert str(ours.range_constraints) == str(theirs.range_constraints)
    assert ours.state_dict.keys() == theirs.state_dict.keys()
    for name, tensor in theirs.state_dict.items():
        mine = ours.state_dict[name]
        assert type(mine) is type(tensor) and mine.requires_grad == tensor.requires_grad, name
        assert_exact(mine, tensor, name, strides=True)
    assert_exact(ours.example_inputs, theirs.example_inputs)
    for batch in (1, 3, 7):
        x = torch.randn(batch, 8)
        assert_exact(ours.module()(x), theirs.module()(x))
    # Mapped and applied bit for bit as from torch.export.load's program.
    assert autocastgen.precision_map(benign) == autocastgen.precision_map(theirs)
    options = {"device": "cpu", "dtype": torch.bfloat16, "policy": ISSUE_POLICY}
    applied, reference = autocastgen.apply_policy(benign, **options), autocastgen.apply_policy(theirs, **options)
    assert applied.graph_module.code == reference.graph_module.code
    x = torch.randn(5, 8)
    assert_exact(applied.module()(x), reference.module()(x))
    # Trusted (PyTorch's own loader): the program that was saved, the module's weights and outputs.
    trusted = autocastgen.load_program(benign, trusted=True)
    assert trusted.graph_module.code == ours.graph_module.code
    assert_exact(dict(trusted.state_dict), dict(block.state_dict()))
    assert_exact(trusted.example_inputs, ((sample,), {}))
    x = torch.randn(5, 8)
    with torch.no_grad():
        assert_exact(trusted.module()(x), block(x))
        assert_exact(ours.module()(x), block(x))


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


@pytest.fixture(scope="module")
def trust_needed(benign: pathlib.Path, tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The benign program plus a harmless constant that only pickle makes (hostile_programs.needs_trust)."""
    return rewrite(benign, tmp_path_factory.mktemp("trust") / "needs-trust.pt2", needs_trust(HIDDEN))


HIDDEN = torch.full((4,), 0.25)
NEEDS_TRUST = (r"data/constants/opaque_obj_98: the constant 'hidden' is a custom object, which only pickle can make: "
               r"it can run code; load the program only if you trust it as code \(--trust-program, trusted=True\)")


def test_every_reader_passes_trust_on(trust_needed: pathlib.Path, tmp_path: pathlib.Path, capsys,
                                      compiled: list[torch.export.ExportedProgram]) -> None:
    # A file that every reader refuses as data and reads when trusted: each passes trusted= (the
    # CLI --trust-program) on to load_program, and the trusted read is PyTorch's loader's.
    out = tmp_path / "out.pt2"
    options = {"device": "cpu", "dtype": torch.bfloat16, "policy": ISSUE_POLICY}
    api = {
        "load_program": lambda **trust: autocastgen.load_program(trust_needed, **trust),
        "precision_map": lambda **trust: autocastgen.precision_map(trust_needed, **trust),
        "apply_policy": lambda **trust: autocastgen.apply_policy(trust_needed, **options, **trust),
        "export_onnx": lambda **trust: autocastgen.export_onnx(trust_needed, **trust),
        "export_aoti": lambda **trust: autocastgen.export_aoti(trust_needed, package_path=out, **trust),
    }
    refused = f"^{re.escape(str(trust_needed))}: {NEEDS_TRUST}$"
    for name, read in api.items():
        with pytest.raises(ProgramFileError, match=refused):
            read()
        assert read(trusted=True) is not None, name
        out.unlink(missing_ok=True)
    assert len(compiled) == 1, compiled
    # What only PyTorch's loader reads: the pickled constant.
    assert_exact(autocastgen.load_program(trust_needed, trusted=True).constants["hidden"], HIDDEN)
    capsys.readouterr()
    for verb in (["apply", str(trust_needed), "--dtype", "bfloat16", "-o", str(out)],
                 ["precision-map", str(trust_needed), "--format", "json"]):
        assert export_cli.main(verb) == 1, verb
        err = capsys.readouterr().err
        assert re.fullmatch(f"autocastgen: error: {re.escape(str(trust_needed))}: {NEEDS_TRUST}\n", err), err
        assert export_cli.main([*verb, "--trust-program"]) == 0, verb
        assert capsys.readouterr().err == ""
    assert out.is_file()


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


# Past the declared 512 bytes, zipfile inflates at most one read's worth (MIN_READ_SIZE, 4 KiB) more.
INFLATED_AT_MOST = 512 + (64 << 10)


def test_a_lying_zip_bomb_is_refused_unread(benign: pathlib.Path, tmp_path: pathlib.Path, capsys) -> None:
    # The weight's headers declare its 512 bytes, its stream inflates to 4 GiB: every size check
    # passes, so the reader must stop inflating where the declared size ends (each read counted;
    # past the bound the count stops the reader) and refuse the stream's CRC.
    bomb, member = lying_zip_bomb(benign, tmp_path / "lying-bomb.pt2")
    assert bomb.stat().st_size < 8 << 20
    with counting_inflation(INFLATED_AT_MOST) as inflated:
        assert autocastgen.precision_map(bomb) == autocastgen.precision_map(benign)
        mapped = inflated[0]
        with pytest.raises(ProgramFileError) as refused:
            autocastgen.load_program(bomb)
        assert re.fullmatch(f"{re.escape(str(bomb))}: {member}: cannot be read: Bad CRC-32 for file .*",
                            str(refused.value)), str(refused.value)
        read = inflated[0]
        assert export_cli.main(["apply", str(bomb), "--dtype", "bfloat16", "-o", str(tmp_path / "o.pt2")]) == 1
    assert 0 < read - mapped <= INFLATED_AT_MOST, (mapped, read)
    assert f"{member}: cannot be read: Bad CRC-32" in capsys.readouterr().err
    assert not (tmp_path / "o.pt2").exists()


def test_a_record_that_inflates_short_is_refused(benign: pathlib.Path, tmp_path: pathlib.Path) -> None:
    # Headers declare the weight's 512 bytes, the stream and its CRC hold 256: zipfile reads it
    # without a complaint, so the reader counts what it got (else the rest of the weight would be
    # whatever memory torch.empty gave).
    short, member = short_record(benign, tmp_path / "short.pt2")
    with pytest.raises(ProgramFileError, match=f"^{re.escape(str(short))}: {member}: inflates to 256 bytes where the "
                                                "zip's directory declares 512$"):
        autocastgen.load_program(short)
    assert autocastgen.precision_map(short) == autocastgen.precision_map(benign)


def test_the_cli_takes_trust_program_and_refuses_without(benign: pathlib.Path, trust_needed: pathlib.Path,
                                                         tmp_path: pathlib.Path) -> None:
    # The C++ verbs pass --trust-program through to the Python half: a file refused without it is
    # read with it (one process each way), and a payload is refused and never run.
    assert CLI.is_file(), CLI
    marker = tmp_path / "MARKER"
    hostile = rewrite(benign, tmp_path / "needs-pickle.pt2", payload_edits(marker)["sample inputs"])
    env = dict(os.environ, AUTOCASTGEN_PYTHON=sys.executable)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(CLI), *args], capture_output=True, text=True, env=env, timeout=300, check=False)

    refused = cli("apply", str(hostile), "--dtype", "float16", "-o", str(tmp_path / "o.pt2"))
    assert refused.returncode == 1 and re.fullmatch(
        f"autocastgen: error: {re.escape(str(hostile))}: {REFUSALS['sample inputs']}\n", refused.stderr), refused.stderr
    assert not marker.exists()
    for verb in (["precision-map", str(trust_needed)], ["apply", str(trust_needed), "--dtype", "float16", "-o",
                                                        str(tmp_path / "o.pt2")]):
        refused = cli(*verb)
        assert refused.returncode == 1 and re.fullmatch(
            f"autocastgen: error: {re.escape(str(trust_needed))}: {NEEDS_TRUST}\n", refused.stderr), refused.stderr
        trusted = cli(*verb, "--trust-program")
        assert trusted.returncode == 0, trusted.stderr
    assert trusted.returncode == 0 and (tmp_path / "o.pt2").is_file()
    mapped = cli("precision-map", str(trust_needed), "--trust-program")
    assert mapped.stdout.startswith("needs-trust.pt2:") and mapped.stdout == cli("precision-map", str(benign)).stdout \
        .replace("block.pt2", "needs-trust.pt2"), mapped.stdout


@pytest.mark.parametrize("case", sorted(expression_cases(pathlib.Path("m"))))
def test_each_rule_of_the_shape_expression_guard(case: str, benign: pathlib.Path, tmp_path: pathlib.Path) -> None:
    # One payload per rule of the guard, breaking that rule alone (hostile_programs.expression_cases):
    # refused for that rule's reason, before sympify runs anything.
    marker = tmp_path / "MARKER"
    expression, reason = expression_cases(marker)[case]
    edited = rewrite(benign, tmp_path / "expression.pt2", expression_edit(expression))
    for read in (autocastgen.load_program, autocastgen.precision_map):
        with pytest.raises(ProgramFileError) as refused:
            read(edited)
        assert re.fullmatch(f"{re.escape(str(edited))}: models/model\\.json: graph\\.tensor_values\\['x'\\]: "
                            f"{reason}(, which PyTorch's shape expressions never do)?", str(refused.value)), \
            str(refused.value)
    assert not marker.exists()


def test_the_shape_expression_guard_takes_what_pytorch_writes(benign: pathlib.Path, tmp_path: pathlib.Path) -> None:
    # The control of the cases above: the forms PyTorch writes (srepr's calls, keywords, a Symbol's
    # name and a Float's digits as strings, arithmetic) read, as the same batch.
    reference = autocastgen.load_program(benign)
    for expression in (SYMBOL, "Symbol('s77', integer=True, positive=True)",
                       f"Add({SYMBOL}, Mul(Integer(0), Float('2.5', precision=53)))", f"{SYMBOL} * 1 + 0",
                       f"Max({SYMBOL}, Integer(1))"):
        edited = rewrite(benign, tmp_path / "expression.pt2", expression_edit(expression))
        program = autocastgen.load_program(edited)
        assert str(program.range_constraints) == str(reference.range_constraints), expression
        x = torch.randn(6, 8)
        assert_exact(program.module()(x), reference.module()(x), expression)
