"""A policy is data (Note [data in generated code] in codegen/emit/cpp_text.h): what it names never
becomes code, and the compiled and the runtime policy decide alike on the same text.

1. Injection: a policy whose `extends:` names a file called `b<newline>#include ...std::system(...)`,
   and a schema file whose string default holds a line break and a C++ statement, pass `check` and
   compile with `compile_policy`; the statement never runs (a marker file would appear) and every
   comment of the generated file stays on its line.
2. A differential fuzz: random ops (argument names from C++'s keywords, macros and the generated
   file's own names; string defaults with `": "` and quotes) and random `when:`/`unless:` text values
   over every code point 0-255, the Unicode line separators and quotes, in one policy compiled once;
   the same text loaded as a runtime policy. Every call (the values, their prefixes across a NUL,
   random strings) gives the same dtype, or the same banned message, both ways.
3. Every run, whatever the seed: one `when:` value holding every byte UTF-8 text can hold, each
   followed by an octal digit, decides alike compiled and at runtime (EVERY_BYTE). A day's sample
   draws about 42 of the 256 values, so an escape a following digit extends (`\1` for byte 1)
   would pass the fuzz on most days; this case fails on every run.

The seed is $AUTOCASTGEN_FUZZ_SEED, else the UTC day number, and every failure prints it.
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from pathlib import Path

import pytest
import torch

from built_tree import require_built

ROOT = Path(__file__).resolve().parents[3]
BUILD = Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", ROOT / "build"))
require_built(BUILD, "python/autocastgen/_build_tree.py")

import autocastgen  # noqa: E402

CLI = os.environ.get("AUTOCASTGEN_CLI", str(BUILD / "bin" / "autocastgen"))
SEED = int(os.environ.get("AUTOCASTGEN_FUZZ_SEED", int(time.time()) // 86400))
NS = "acg_data"

# Names a schema may give its arguments that C++, its headers or the generated file reserve.
# (TorchScript's own keywords, such as `and` and `assert`, cannot name a dispatcher op's argument.)
ARGUMENT_NAMES = ["signed", "switch", "static", "default", "register", "typename", "co_await", "xor_eq", "NULL",
                  "EOF", "errno", "linux", "major", "__cplusplus", "rt", "State", "at", "c10", "std", "kDevice",
                  "kAutocastKey", "lower_precision", "int64_t", "m", "x", "self", "mode"]
# Code points a `when:` text value is drawn from: 0-255, the line and paragraph separators, NEL,
# and the characters that matter to C++ and YAML.
ALPHABET = [chr(c) for c in range(256)] + ["\u2028", "\u2029", "\u0085", "\ufeff", "\u00e9", "\U0001f600"]
SPECIALS = ['"', "\\", "?", "??/", "\n", "\r", "\x00", "\x01", ": ", "#", "'", "*/", "\\\n", "{{x}}"]
# (No slash: it is also a file's name. The marker's path comes from the environment.)
INJECTED = '#include <cstdlib>\nstatic int autocastgen_pwned = std::system("touch \"$AUTOCASTGEN_PWNED\"");'


# Every byte a C++ string from a Python str can hold (UTF-8: all but 0xC0, 0xC1 and 0xF5-0xFF),
# each followed by an octal digit where UTF-8 lets a digit follow it: the code points 0-255 (the
# single bytes, and 0x80-0xBF as the last byte of U+0080-U+00FF), then one character for each lead
# byte 0xC4-0xF4 (always followed by a continuation byte; its escape has three digits anyway). An
# escape with fewer than three digits, or a hexadecimal one, would take the digit as part of it
# and the compiled literal would hold other bytes.
EVERY_BYTE_CODE_POINTS = [*range(256), *(0x100 + 0x40 * i for i in range(28)), 0x800,
                          *(0x1000 * i for i in range(1, 16)), 0x10000, 0x40000, 0x80000, 0xC0000, 0x100000]
EVERY_BYTE = "".join(chr(c) + "01234567"[i % 8] for i, c in enumerate(EVERY_BYTE_CODE_POINTS))
UTF8_BYTES = set(range(256)) - {0xC0, 0xC1, *range(0xF5, 0x100)}


def yaml_quoted(text: str) -> str:
    """A YAML double-quoted scalar for any text (escapes for everything outside printable ASCII)."""
    out = []
    for char in text:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif 0x20 <= code < 0x7F:
            out.append(char)
        elif code <= 0xFF:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def random_text(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(0, 4)):
        parts.append(rng.choice(SPECIALS) if rng.random() < 0.3 else rng.choice(ALPHABET))
    return "".join(parts)


class Fuzz:
    """One batch: ops, their policy entries, and the calls to compare."""

    def __init__(self, seed: int, ops: int = 10) -> None:
        rng = random.Random(seed)
        self.schemas: list[str] = []
        self.entries: dict[str, list[str]] = {"lower_precision_fp": [], "fp32": [], "banned": []}
        self.calls: list[tuple[str, str, int]] = []
        for k in range(ops):
            tensor, text, number = rng.sample(ARGUMENT_NAMES, 3)
            default = rng.choice(['"a: b"', "'say \"x\": y'", "'??/'", '"#"', "\"it's\""])
            op = f"probe{k}"
            self.schemas.append(f"{NS}::{op}(Tensor {tensor}, str {text}={default}, int {number}=0) -> Tensor")
            values: list[str] = []
            while len(values) < rng.randint(2, 5):
                value = random_text(rng)
                if value not in values:
                    values.append(value)
            split = rng.randint(1, len(values) - 1)
            first, second = values[:split], values[split:]
            qualified = f"{NS}::{op}"
            listed = lambda vs: "[" + ", ".join(yaml_quoted(v) for v in vs) + "]"  # noqa: E731
            kind = rng.choice(["lower_precision_fp", "fp32"])
            self.entries[kind].append(f"{{op: {yaml_quoted(qualified)}, when: {{{yaml_quoted(text)}: {listed(first)}}}}}")
            other = "fp32" if kind == "lower_precision_fp" else "lower_precision_fp"
            if rng.random() < 0.5:  # the complement: every value the first entry does not name
                self.entries[other].append(f"{{op: {yaml_quoted(qualified)}, unless: {{{yaml_quoted(text)}: {listed(first)}}}}}")
            else:
                self.entries[other].append(
                    f"{{op: {yaml_quoted(qualified)}, when: {{{yaml_quoted(text)}: {listed(second)}, {yaml_quoted(number)}: 3}}}}")
            probes = set(values)
            for value in values:
                if "\x00" in value:
                    probes.add(value[: value.index("\x00")])  # what a C string would have kept
                probes.add(value[:-1])
                probes.add(value + "\x00")
            probes.update(random_text(rng) for _ in range(4))
            for probe in sorted(probes):
                for n in (0, 3):
                    self.calls.append((op, probe, n))
        # The fixed case (EVERY_BYTE), seed or not: listed lower_precision_fp when its text is it.
        self.schemas.append(f"{NS}::every_byte(Tensor self, str text) -> Tensor")
        self.entries["lower_precision_fp"].append(
            f"{{op: {yaml_quoted(NS + '::every_byte')}, when: {{text: [{yaml_quoted(EVERY_BYTE)}]}}}}")
        # A banned op whose message holds the specials a message may (no control character but
        # newline and tab: the policy refuses the others with a located error).
        self.schemas.append(f"{NS}::forbidden(Tensor self) -> Tensor")
        self.message = "no: " + "".join(s for s in SPECIALS if s.isprintable()) + "\t\u00e9\u2028\nsecond line\\"
        self.entries["banned"].append(f"{{op: {yaml_quoted(NS + '::forbidden')}, message: {yaml_quoted(self.message)}}}")

    def policy(self, extends: str | None = None) -> str:
        lines = ["autocast: {device: cpu, lower_precision: [bfloat16, float16]}"]
        if extends is not None:
            lines.append(f"extends: {yaml_quoted(extends)}")
        lines.append("lists:")
        for kind, entries in self.entries.items():
            if entries:
                lines.append(f"  {kind}:")
                lines.extend(f"    - {entry}" for entry in entries)
        return "\n".join(lines) + "\n"

    def schema_file(self) -> str:
        return "".join(f"- func: {yaml_quoted(schema)}\n" for schema in self.schemas)


def outcome(op_name: str, *args):
    """What autocast made of one call: the dtype its tensor reached the kernel in, or the error."""
    op = getattr(getattr(torch.ops, NS), op_name)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        try:
            return op(torch.ones(2, dtype=torch.float16), *args).dtype
        except RuntimeError as error:
            return f"raised: {error}"


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    fuzz = Fuzz(SEED)
    lib = torch.library.Library(NS, "DEF")
    for schema in fuzz.schemas:
        lib.define(schema.split("::", 1)[1])
        lib.impl(schema.split("::", 1)[1].split("(")[0], lambda t, *rest: t.clone(), "CPU")
    root = tmp_path_factory.mktemp("policy_as_data")
    marker = root / "pwned"
    # A base file whose name, written raw into a comment, would end it and include a statement.
    base_name = "b\n" + INJECTED + "\nb"
    folder = root / "policies"
    folder.mkdir()
    (folder / base_name).write_text("lists:\n  fp32: [mm]\n")
    # An op whose schema file's string default holds a line break and the statement, listed under
    # a condition on the same text.
    injected = "x\n" + INJECTED + "\n"
    fuzz.schemas.append(f"{NS}::inj(Tensor self, str mode='{injected}') -> Tensor")  # raw line breaks in the default
    fuzz.entries["lower_precision_fp"].append(f"{{op: {yaml_quoted(NS + '::inj')}, when: {{mode: {yaml_quoted(injected)}}}}}")
    policy = folder / "fuzz.yaml"
    policy.write_text(fuzz.policy(extends=base_name))
    schemas = root / "ops.yaml"
    schemas.write_text(fuzz.schema_file())
    lib.define("inj(Tensor self, str mode='x') -> Tensor")
    lib.impl("inj", lambda t, *rest: t.clone(), "CPU")
    import torchgen

    native = Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AUTOCASTGEN_CACHE", str(root / "cache"))
        patch.setenv("AUTOCASTGEN_PWNED", str(marker))
        yield {"fuzz": fuzz, "policy": policy, "schemas": [native, schemas], "marker": marker, "lib": lib, "injected": injected}


def test_check_passes_and_nothing_runs(batch):
    checked = subprocess.run([CLI, "check", "--policy", str(batch["policy"]), *sum((["--schemas", str(s)] for s in batch["schemas"]), [])],
                             capture_output=True, text=True)
    assert checked.returncode == 0, f"seed {SEED}\n{checked.stderr}"
    compiled = autocastgen.compile_policy(batch["policy"], schemas=batch["schemas"])
    assert not batch["marker"].exists(), f"seed {SEED}: the injected statement ran"
    source = compiled.source.read_bytes()
    assert all(b == 0x0A or 0x20 <= b < 0x7F for b in source), f"seed {SEED}: a byte outside printable ASCII"
    for number, line in enumerate(source.decode().splitlines(), 1):
        assert not line.rstrip().endswith("\\"), f"seed {SEED}: line {number} continues: {line}"
        assert "std::system" not in line or line.lstrip().startswith("//") or '"' in line, f"line {number}: {line}"
    # The injected default's op is a real wrapper, and its condition the whole text.
    assert outcome("inj", batch["injected"]) == torch.bfloat16
    assert outcome("inj", "x") == torch.float16
    assert not batch["marker"].exists()


def test_compiled_and_runtime_policies_decide_alike(batch):
    fuzz: Fuzz = batch["fuzz"]
    autocastgen.compile_policy(batch["policy"], schemas=batch["schemas"])
    compiled = [outcome(op, text, n) for op, text, n in fuzz.calls]
    compiled_banned = outcome("forbidden")
    autocastgen.load_policy(batch["policy"])
    try:
        runtime = [outcome(op, text, n) for op, text, n in fuzz.calls]
        runtime_banned = outcome("forbidden")
    finally:
        autocastgen.clear_runtime_policies()
    differing = [(call, a, b) for call, a, b in zip(fuzz.calls, compiled, runtime) if a != b]
    assert not differing, f"seed {SEED}: {len(differing)} of {len(fuzz.calls)} calls differ, first {differing[:3]}"
    # Each outcome occurs: the fuzz exercised both lists and the fall-through.
    assert {torch.bfloat16, torch.float32, torch.float16} <= set(compiled), f"seed {SEED}: {set(compiled)}"
    assert compiled_banned == runtime_banned, f"seed {SEED}: {compiled_banned!r} != {runtime_banned!r}"
    assert compiled_banned.startswith(f"raised: {fuzz.message}"), f"seed {SEED}: {compiled_banned!r}"


def test_every_byte_followed_by_a_digit_decides_alike(batch):
    # Not from the seed: this case catches an escape a following digit extends on every run.
    assert set(EVERY_BYTE.encode()) == UTF8_BYTES
    probes = {"the text": EVERY_BYTE, "less its last digit": EVERY_BYTE[:-1], "and one digit more": EVERY_BYTE + "0"}
    expected = {"the text": torch.bfloat16, "less its last digit": torch.float16, "and one digit more": torch.float16}
    autocastgen.compile_policy(batch["policy"], schemas=batch["schemas"])
    compiled = {name: outcome("every_byte", text) for name, text in probes.items()}
    autocastgen.load_policy(batch["policy"])
    try:
        runtime = {name: outcome("every_byte", text) for name, text in probes.items()}
    finally:
        autocastgen.clear_runtime_policies()
    assert runtime == expected, f"the runtime policy: {runtime}"
    assert compiled == expected, f"the compiled policy (its string literal holds other bytes): {compiled}"
