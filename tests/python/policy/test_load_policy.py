"""autocastgen.load_policy / register_runtime_policy / clear_runtime_policies on custom ops.

What is checked:

1. a policy file giving custom ops defined with torch.library all six policies, loaded from a
   pathlib.Path, from a str path and as YAML text, behaves as docs/policy-language.md says under
   torch.autocast (and does nothing outside it, and nothing after clear_runtime_policies());
2. a bad policy raises PolicyError (a RuntimeError) whose text is what `autocastgen check` prints
   for the same file (for text: with the file named `<string>` or `name=`), and registers nothing;
3. register_runtime_policy for each policy, its errors (the CLI's `error:` lines), banned's message;
4. a relative `extends:` in text is taken from the current directory; schemas= and bad arguments
   give clear errors.

ctest sets AUTOCASTGEN_BUILD_DIR and AUTOCASTGEN_CLI; run by hand, build/ and its CLI are used:
python3 -m pytest tests/python/policy/test_load_policy.py
"""

from __future__ import annotations

import itertools
import math
import os
import re
import subprocess
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

from built_tree import require_built

ROOT = Path(__file__).resolve().parents[3]
BUILD = Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", ROOT / "build"))
CLI = os.environ.get("AUTOCASTGEN_CLI", str(BUILD / "bin" / "autocastgen"))
require_built(BUILD, "python/autocastgen/policy/_load.py", CLI)

import autocastgen  # noqa: E402

BF16, F16, F32, F64 = torch.bfloat16, torch.float16, torch.float32, torch.float64
_namespaces = itertools.count()


def has_kernel(op: str, key: str = "AutocastCPU") -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op, key)


def summarize(value):
    if isinstance(value, torch.Tensor):
        return value.dtype
    if isinstance(value, (list, tuple)):
        return [summarize(v) for v in value]
    return value


class CustomOps:
    """A fresh namespace with one op per policy; each CPU kernel records what reached it."""

    SCHEMAS = {
        "lp": "lp(Tensor a, Tensor b) -> Tensor",                       # lower_precision_fp
        "f32": "f32(Tensor a, Tensor b) -> Tensor",                     # fp32
        "pr": "pr(Tensor a, Tensor b) -> Tensor",                       # promote
        "sod": "sod(Tensor a, *, ScalarType? dtype=None) -> Tensor",    # fp32_set_opt_dtype
        "apd": "apd(Tensor a) -> Tensor",                               # fp32_append_dtype ...
        "apd.dtype": "apd.dtype(Tensor a, ScalarType dtype) -> Tensor",  # ... redispatches here
        "ban": "ban(Tensor a) -> Tensor",                               # banned
    }

    def __init__(self) -> None:
        self.ns = f"acg_load_policy{next(_namespaces)}"
        self.lib = torch.library.Library(self.ns, "DEF")
        self.seen: list[tuple[str, list]] = []
        for name, schema in self.SCHEMAS.items():
            self.lib.define(schema)
            self.lib.impl(name, self._kernel(name), "CPU")

    def _kernel(self, name):
        def kernel(*args, **kwargs):
            self.seen.append((name, summarize(list(args) + list(kwargs.values()))))
            return args[0].clone()

        return kernel

    def op(self, name: str):
        base, _, overload = name.partition(".")
        return getattr(getattr(getattr(torch.ops, self.ns), base), overload or "default")

    def q(self, name: str) -> str:
        return f"{self.ns}::{name}"

    def last(self):
        return self.seen[-1]

    def policy_text(self) -> str:
        return textwrap.dedent(f"""\
            autocast:
              device: cpu
            lists:
              lower_precision_fp: [{self.q("lp")}]
              fp32: [{self.q("f32")}]
              promote: [{self.q("pr")}]
              fp32_set_opt_dtype: [{self.q("sod")}]
              fp32_append_dtype: [{self.q("apd")}]
              banned:
                - {{op: {self.q("ban")}, message: "ban is unsafe under autocast; call it in float32"}}
            """)

    def schema_file(self, path: Path) -> Path:
        path.write_text("".join(f"- func: {self.ns}::{s}\n" for s in self.SCHEMAS.values()))
        return path


@pytest.fixture
def ops():
    custom = CustomOps()
    yield custom
    autocastgen.clear_runtime_policies()
    custom.lib._destroy()


@pytest.fixture(autouse=True)
def _quiet_replacement_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def check_all_six(ops: CustomOps) -> None:
    """The six policies under torch.autocast("cpu", bfloat16), and nothing outside it."""
    a32, b32, a16 = torch.randn(3), torch.randn(3), torch.randn(3, dtype=BF16)
    with torch.autocast("cpu", dtype=BF16):
        ops.op("lp")(a32, b32)
        assert ops.last() == ("lp", [BF16, BF16])
        ops.op("lp")(a32.double(), b32)           # float64 is not eligible
        assert ops.last() == ("lp", [F64, BF16])
        ops.op("f32")(a16, b32)
        assert ops.last() == ("f32", [F32, F32])
        ops.op("pr")(a16, b32)
        assert ops.last() == ("pr", [F32, F32])
        ops.op("pr")(a16, a16)
        assert ops.last() == ("pr", [BF16, BF16])
        ops.op("sod")(a16)                        # dtype set, nothing cast
        assert ops.last() == ("sod", [BF16, F32])
        ops.op("sod")(a16, dtype=F16)             # a dtype given is kept
        assert ops.last() == ("sod", [BF16, F16])
        ops.op("apd")(a16)                        # redispatched to apd.dtype with float32
        assert ops.last() == ("apd.dtype", [BF16, F32])
        ops.op("apd")(torch.arange(3))            # not eligible: its own dtype
        assert ops.last() == ("apd.dtype", [torch.int64, torch.int64])
        with pytest.raises(RuntimeError) as banned:
            ops.op("ban")(a32)
        assert str(banned.value).startswith("ban is unsafe under autocast; call it in float32")
    for name, args, expected in [("lp", (a32, b32), [F32, F32]), ("f32", (a16, b32), [BF16, F32]),
                                 ("apd", (a16,), [BF16]), ("ban", (a32,), [F32])]:
        ops.op(name)(*args)                       # outside autocast nothing happens
        assert ops.last() == (name, expected)


def check_none(ops: CustomOps) -> None:
    for name in ("lp", "f32", "pr", "sod", "apd", "ban"):
        assert not has_kernel(ops.q(name)), name
    with torch.autocast("cpu", dtype=BF16):
        ops.op("lp")(torch.randn(3), torch.randn(3))
        assert ops.last() == ("lp", [F32, F32])
        ops.op("ban")(torch.randn(3))


# ---------------------------------------------------------------------------------------------
# 1. The six policies, from a file and from text.


@pytest.mark.parametrize("form", ["pathlib", "str path", "text"])
def test_six_policies_on_custom_ops(ops, tmp_path, form):
    check_none(ops)
    path = tmp_path / "custom.yaml"
    path.write_text(ops.policy_text())
    source = {"pathlib": path, "str path": str(path), "text": ops.policy_text()}[form]
    assert autocastgen.load_policy(source) == 6
    for name in ("lp", "f32", "pr", "sod", "apd", "ban"):
        assert has_kernel(ops.q(name)), name
    check_all_six(ops)
    autocastgen.clear_runtime_policies()
    check_none(ops)


def test_clear_brings_back_pytorch_kernels(ops):
    x, w = torch.randn(2, 3), torch.randn(3, 2)
    with torch.autocast("cpu", dtype=BF16):
        assert torch.mm(x, w).dtype == BF16  # PyTorch's CPU autocast
    autocastgen.load_policy("autocast: {device: cpu}\nlists:\n  fp32: [mm]\n")
    with torch.autocast("cpu", dtype=BF16):
        assert torch.mm(x, w).dtype == F32
    autocastgen.clear_runtime_policies()
    with torch.autocast("cpu", dtype=BF16):
        assert torch.mm(x, w).dtype == BF16


def test_own_state_scope_drives_runtime_policies(ops):
    autocastgen.load_policy(ops.policy_text())
    with autocastgen.autocast("cpu", dtype=F16):
        ops.op("lp")(torch.randn(3), torch.randn(3))
    assert ops.last() == ("lp", [F16, F16])


def test_text_relative_extends_is_from_the_working_directory(ops, tmp_path, monkeypatch):
    (tmp_path / "base.yaml").write_text(ops.policy_text())
    monkeypatch.chdir(tmp_path)
    text = f"extends: base.yaml   # the six\nremove: [{ops.q('ban')}]\n"
    assert autocastgen.load_policy(text) == 5
    assert not has_kernel(ops.q("ban")) and has_kernel(ops.q("lp"))
    autocastgen.clear_runtime_policies()
    assert autocastgen.load_policy("extends: 'base.yaml'\n") == 6


def test_file_extends_is_relative_to_the_file(ops, tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "base.yaml").write_text(ops.policy_text())
    (tmp_path / "sub" / "top.yaml").write_text("extends: base.yaml\n")
    monkeypatch.chdir(tmp_path)
    assert autocastgen.load_policy("sub/top.yaml") == 6


# ---------------------------------------------------------------------------------------------
# 2. Bad policies: the CLI's diagnostics, nothing registered.

BAD = textwrap.dedent("""\
    autocast:
      device: cpu
    lists:
      fp32: [tanh, {ns}::lp]
      lower_precision_fp: [aten::mvv, mv, {ns}::lpp]
      promote: [add_.Tensor]
    """)


def aten_schemas() -> str:
    """The installed PyTorch's native_functions.yaml (the CLI's default schemas)."""
    import torchgen

    return str(Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml")


def cli_diagnostics(path: Path, schemas: Path) -> str:
    """`autocastgen check` stderr without its `N errors generated.` line, with aten's and `schemas`."""
    command = [CLI, "check", "--policy", str(path), "--schemas", aten_schemas(), "--schemas", str(schemas)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    return "".join(line for line in result.stderr.splitlines(keepends=True)
                   if not re.search(r"\d+ errors? generated\.$", line)).rstrip("\n")


def test_bad_file_raises_policy_error_and_registers_nothing(ops, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD.format(ns=ops.ns))
    with pytest.raises(autocastgen.PolicyError) as error:
        autocastgen.load_policy(path)
    text = str(error.value)
    assert isinstance(error.value, RuntimeError)
    assert error.value.source == str(path) and error.value.diagnostics == text
    assert f"{path}:5:24: error: unknown op 'aten::mvv'; did you mean 'aten::mv'?" in text
    assert f"{path}:5:39: error: unknown op '{ops.ns}::lpp'; did you mean '{ops.ns}::lp'?" in text
    assert f"{path}:6:13: error: 'add_.Tensor' cannot autocast: it is an in-place overload" in text
    check_none(ops)
    assert not has_kernel("aten::tanh")  # fp32: [tanh] was valid, and is not registered either


def test_bad_file_text_is_the_clis(ops, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD.format(ns=ops.ns))
    with pytest.raises(autocastgen.PolicyError) as error:
        autocastgen.load_policy(str(path))
    assert str(error.value) == cli_diagnostics(path, ops.schema_file(tmp_path / "schemas.yaml"))


@pytest.mark.parametrize("name", [None, "my_policy.yaml"])
def test_bad_text_names_the_string(ops, tmp_path, name):
    text = BAD.format(ns=ops.ns)
    with pytest.raises(autocastgen.PolicyError) as error:
        autocastgen.load_policy(text, **({} if name is None else {"name": name}))
    shown = name or "<string>"
    assert error.value.source == shown
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    expected = cli_diagnostics(path, ops.schema_file(tmp_path / "schemas.yaml")).replace(str(path), shown)
    assert str(error.value) == expected
    assert f"{shown}:5:24: error: unknown op 'aten::mvv'" in str(error.value)
    check_none(ops)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("autocast:\n  device: cpuu\nlists: {}\n", "<string>:2:11: error: unknown device 'cpuu'; did you mean 'cpu'?"),
        ("lists:\n  fp33: [tanh]\n", "<string>:2:3: error: unknown policy 'fp33'; did you mean 'fp32'?"),
        ("autocast: {device: cpu}\nlists: [\n", "<string>:3:1: error:"),
        ("autocast: {device: cpu}\nextends: missing.yaml\n", "error: cannot read extended policy"),
        ("autocast: {device: cpu}\nlists:\n  banned: [tanh]\n",
         "<string>:3:12: error: banned op 'tanh' needs a message"),
    ],
)
def test_text_error_cases(text, expected, ops):
    with pytest.raises(autocastgen.PolicyError) as error:
        autocastgen.load_policy(text)
    assert expected in str(error.value), str(error.value)
    check_none(ops)


def test_missing_file():
    with pytest.raises(autocastgen.PolicyError, match=r"cannot read policy 'no/such/policy.yaml'"):
        autocastgen.load_policy("no/such/policy.yaml")


def test_bad_arguments(tmp_path):
    with pytest.raises(NotImplementedError, match="schemas= is not supported"):
        autocastgen.load_policy(tmp_path / "p.yaml", schemas=tmp_path / "s.yaml")
    with pytest.raises(TypeError, match="needs a path .* or YAML text .*, not bytes"):
        autocastgen.load_policy(b"lists: {}\n")
    with pytest.raises(ValueError, match="name must be a one-line"):
        autocastgen.load_policy("lists: {}\n", name="")
    with pytest.raises(TypeError, match="policy must be a str"):
        autocastgen.register_runtime_policy("tanh", None)


def test_bad_arguments_are_refused_in_so_many_words(tmp_path):
    # The errors' whole text (the Python wrappers' own; the policy's are the CLI's, above).
    with pytest.raises(NotImplementedError) as error:
        autocastgen.load_policy("lists: {}\n", schemas=tmp_path / "s.yaml")
    assert str(error.value) == (
        "autocastgen.load_policy: schemas= is not supported: a runtime policy resolves against the ops registered "
        "with PyTorch's dispatcher when it is loaded (define custom ops with torch.library first), and its kernels "
        "can only be registered for those ops")
    for source, kind in ((b"lists: {}\n", "bytes"), (None, "NoneType"), (3, "int")):
        with pytest.raises(TypeError) as error:
            autocastgen.load_policy(source)
        assert str(error.value) == ("autocastgen.load_policy: needs a path (str or os.PathLike) or YAML text (str), "
                                    f"not {kind}")
    for name in ("", "two\nlines", "end\n", None, b"bytes"):
        with pytest.raises(ValueError) as error:
            autocastgen.load_policy("lists: {}\n", name=name)
        assert str(error.value) == f"autocastgen.load_policy: name must be a one-line, non-empty str, not {name!r}"
    for args, label, kind in (((None, "fp32"), "op", "NoneType"), (("tanh", b"fp32"), "policy", "bytes"),
                              (("tanh", "fp32", 0), "device", "int")):
        with pytest.raises(TypeError) as error:
            autocastgen.register_runtime_policy(*args)
        assert str(error.value) == f"autocastgen.register_runtime_policy: {label} must be a str, not {kind}"
    with pytest.raises(TypeError) as error:
        autocastgen.register_runtime_policy("tanh", "banned", "cpu", b"why")
    assert str(error.value) == "autocastgen.register_runtime_policy: message must be a str, not bytes"
    # Text that is no text (a lone surrogate) is refused as writing it to a file would be.
    with pytest.raises(UnicodeEncodeError):
        autocastgen.load_policy("lists: {}\n# \udcff\n")


def test_a_path_and_text_are_told_apart_by_a_line_break(ops, tmp_path, monkeypatch):
    # A str with no line break is a path, whatever it holds; with one, text. A path object is a path.
    (tmp_path / "autocast: {device: cpu}").write_text(ops.policy_text())
    monkeypatch.chdir(tmp_path)
    assert autocastgen.load_policy("autocast: {device: cpu}") == 6
    autocastgen.clear_runtime_policies()
    assert autocastgen.load_policy("autocast: {device: cpu}\n") == 0
    assert autocastgen.load_policy(Path("autocast: {device: cpu}")) == 6


def test_text_in_a_removed_working_directory(ops, tmp_path, monkeypatch):
    # The working directory was removed: text still loads; a relative extends: is the runtime's error.
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert autocastgen.load_policy(ops.policy_text()) == 6
    with pytest.raises(autocastgen.PolicyError) as error:
        autocastgen.load_policy("extends: base.yaml\n", name="t.yaml")
    assert str(error.value).startswith("t.yaml:1:10: error: cannot read extended policy 'base.yaml': "), str(error.value)
    assert error.value.source == "t.yaml"


def test_a_file_is_named_by_its_path_and_through_a_link_as_given(ops, tmp_path):
    # The policy's owner (what autocastgen.export records): the file as the runtime shows a path
    # (its name, outside the working directory); through a link (its folder's path is not UTF-8),
    # the path as the user gave it, never the link's.
    path = tmp_path / "six.yaml"
    path.write_text(ops.policy_text())
    autocastgen.load_policy(path)
    assert list(torch.ops.autocastgen.policies_in_force()[1]) == ["six.yaml"]
    autocastgen.clear_runtime_policies()
    folder = os.fsencode(tmp_path) + b"/odd \xff"
    os.makedirs(folder)
    with open(folder + b"/six.yaml", "w") as f:
        f.write(ops.policy_text())
    autocastgen.load_policy(os.fsdecode(folder + b"/six.yaml"))
    assert list(torch.ops.autocastgen.policies_in_force()[1]) == [f"{tmp_path}/odd \\xff/six.yaml"]
    autocastgen.clear_runtime_policies()
    not_utf8 = os.fsdecode(folder + b"/\xfe.yaml")
    with pytest.raises(autocastgen.PolicyError) as error:
        autocastgen.load_policy(not_utf8)
    assert str(error.value) == (f"autocastgen: error: cannot load policy '{tmp_path}/odd \\xff/\\xfe.yaml': its file "
                                "name is not UTF-8 (the runtime takes UTF-8 paths; the folder may be anything): rename "
                                "it, or use compile_policy")
    assert error.value.source == not_utf8 and error.value.diagnostics == str(error.value)


# ---------------------------------------------------------------------------------------------
# 3. register_runtime_policy.


def test_register_each_policy_then_clear(ops):
    for name, policy in [("lp", "lower_precision_fp"), ("f32", "fp32"), ("pr", "promote"),
                         ("sod", "fp32_set_opt_dtype"), ("apd", "fp32_append_dtype")]:
        autocastgen.register_runtime_policy(ops.q(name), policy)
    autocastgen.register_runtime_policy(ops.q("ban"), "banned", "cpu",
                                        message="ban is unsafe under autocast; call it in float32")
    check_all_six(ops)
    autocastgen.clear_runtime_policies()
    check_none(ops)


@pytest.mark.parametrize(
    "args, expected",
    [
        (("{ns}::lpp", "fp32"), "error: unknown op '{ns}::lpp'; did you mean '{ns}::lp'?"),
        (("{ns}::lp", "fp33"), "error: unknown policy 'fp33'; did you mean 'fp32'?"),
        (("{ns}::lp", "fp32", "cpuu"), "error: unknown device 'cpuu'; did you mean 'cpu'?"),
        (("{ns}::lp", "fp32_set_opt_dtype"), "error: fp32_set_opt_dtype needs an argument 'ScalarType? dtype'"),
        (("{ns}::ban", "banned"), "note: pass the message as the fourth argument"),
        (("{ns}::lp", "fp32", "cpu", "why"), "error: 'message:' is only meaningful in banned, not in fp32"),
    ],
)
def test_register_errors(ops, args, expected):
    args = tuple(a.format(ns=ops.ns) for a in args)
    with pytest.raises(autocastgen.PolicyError) as error:
        autocastgen.register_runtime_policy(*args)
    assert expected.format(ns=ops.ns) in str(error.value), str(error.value)
    assert error.value.source.startswith(f"register_runtime_policy('{args[0]}', '{args[1]}'")
    check_none(ops)


def test_rule_keywords_are_a_policy_files_rule():
    # The keyword arguments as the flow mapping the runtime reads: a policy file entry's keys, its
    # values as the policy language writes them (dtypes by name, infinities as YAML's).
    from autocastgen.policy._load import _rule_text

    assert _rule_text(None, None, None, None) == ""
    assert _rule_text(None, None, None, None, None) == ""
    assert _rule_text("float16", None, None, None) == '{"dtypes": ["float16"]}'
    assert _rule_text(torch.bfloat16, None, None, None) == '{"dtypes": ["bfloat16"]}'
    assert _rule_text([torch.float16, "bfloat16"], None, None, None) == '{"dtypes": ["float16", "bfloat16"]}'
    assert _rule_text((), None, None, None) == '{"dtypes": []}'
    assert _rule_text(None, {"exponent": [1, 2.5, math.inf]}, {"p": -math.inf, "q": math.nan}, None) == (
        '{"when": {"exponent": [1, 2.5, ".inf"]}, "unless": {"p": "-.inf", "q": ".nan"}}')
    assert _rule_text(None, {"dtype": torch.float16, "t": (1, (torch.bfloat16, 0.5))}, {}, None) == (
        '{"when": {"dtype": "float16", "t": [1, ["bfloat16", 0.5]]}, "unless": {}}')
    assert _rule_text(None, None, None, {"weight": "fp32", 5: "keep"}, "model.*.attn") == (
        '{"modules": ["model.*.attn"], "args": {"weight": "fp32", "5": "keep"}}')
    assert _rule_text("float16", {"a": True}, {"b": "none"}, {"c": "fp32"}, ("x", "y")) == (
        '{"dtypes": ["float16"], "modules": ["x", "y"], "when": {"a": true}, "unless": {"b": "none"}, '
        '"args": {"c": "fp32"}}')
    for key, value, kind in (("when", [1], "list"), ("unless", "p", "str"), ("args", (("w", "fp32"),), "tuple")):
        with pytest.raises(TypeError) as error:
            _rule_text(None, **{"when": None, "unless": None, "args": None, key: value})
        assert str(error.value) == f"autocastgen.register_runtime_policy: {key} must be a dict, not {kind}"


def test_rules_given_as_keywords_decide_as_in_a_policy_file(ops):
    # pow(x, 2) in bfloat16 when the exponent is 1 or 2; in float32 under float16 autocast unless it
    # is; norm with p=inf (a max: exact in any dtype) left to bfloat16 unless p is inf.
    x = torch.rand(4) + 1
    autocastgen.register_runtime_policy("aten::pow.Tensor_Scalar", "lower_precision_fp", "cpu",
                                        dtypes=[torch.bfloat16], when={"exponent": [1, 2]})
    with torch.autocast("cpu", dtype=BF16):
        assert torch.pow(x, 2).dtype == BF16 and torch.pow(x, 3).dtype == F32
    with torch.autocast("cpu", dtype=F16):
        assert torch.pow(x, 2).dtype == F32
    autocastgen.register_runtime_policy("aten::pow.Tensor_Scalar", "fp32", "cpu", dtypes="float16",
                                        unless={"exponent": [1.0, 2.0]})
    with torch.autocast("cpu", dtype=F16):
        assert torch.pow(x.half(), 3).dtype == F32 and torch.pow(x.half(), 2).dtype == F16
    autocastgen.register_runtime_policy("aten::linalg_vector_norm", "fp32", "cpu", unless={"ord": math.inf})
    with torch.autocast("cpu", dtype=BF16):
        assert torch.linalg.vector_norm(x.bfloat16(), math.inf).dtype == BF16
        assert torch.linalg.vector_norm(x.bfloat16(), 2).dtype == F32
    autocastgen.clear_runtime_policies()


def test_register_errors_name_the_call_and_keep_every_line(ops):
    with pytest.raises(autocastgen.PolicyError) as error:
        autocastgen.register_runtime_policy(ops.q("ban"), "banned")
    assert error.value.source == f"register_runtime_policy('{ops.q('ban')}', 'banned', 'cpu')"
    lines = str(error.value).splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: banned op ") and lines[1].startswith("note: pass the message")
    assert error.value.diagnostics == str(error.value)


def test_rule_keywords_reach_the_runtime_args_and_modules(ops):
    # args=: how each argument is cast; modules=: only inside those modules of an attached model.
    a32, b32 = torch.randn(3), torch.randn(3)
    autocastgen.register_runtime_policy(ops.q("lp"), "lower_precision_fp", args={"b": "fp32"})
    with torch.autocast("cpu", dtype=BF16):
        ops.op("lp")(a32, b32)
    assert ops.last() == ("lp", [BF16, F32])

    class Inner(torch.nn.Module):
        def forward(self, x):
            return ops.op("f32")(x, x)

    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            return self.inner(x) + ops.op("f32")(x, x)

    autocastgen.register_runtime_policy(ops.q("f32"), "fp32", modules="inner")
    model, a16 = Outer(), torch.randn(3, dtype=BF16)
    with autocastgen.attach(model), torch.autocast("cpu", dtype=BF16):
        model(a16)
    assert ops.seen[-2:] == [("f32", [F32, F32]), ("f32", [BF16, BF16])]


def test_register_error_is_the_clis(ops, tmp_path):
    with pytest.raises(autocastgen.PolicyError) as error:
        autocastgen.register_runtime_policy(ops.q("lpp"), "lower_precision_fp")
    path = tmp_path / "one.yaml"
    path.write_text(f"autocast: {{device: cpu}}\nlists:\n  lower_precision_fp: [{ops.q('lpp')}]\n")
    clis = re.findall(r"^\S+:\d+:\d+: (error: .*)$", cli_diagnostics(path, ops.schema_file(tmp_path / "s.yaml")), re.M)
    assert str(error.value).splitlines() == clis


def test_exported_and_documented():
    for name in ("load_policy", "register_runtime_policy", "clear_runtime_policies", "PolicyError"):
        assert name in autocastgen.__all__
        assert getattr(autocastgen, name).__doc__
