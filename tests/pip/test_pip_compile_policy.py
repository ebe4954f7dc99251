"""compile_policy from the pip package (a fresh venv, used from outside the clone).

What is checked:

1. two processes compiling one policy at once (custom ops defined with torch.library under all
   six policies, an `extends:` chain, schemas from the dispatcher) both succeed: one compiles, the
   other waits for it and loads its library; the cache holds one valid entry and no leftovers;
2. the six policies behave as docs/policy-language.md says under torch.autocast (and not outside);
3. a third process loads the cached library without compiling (the entry's build record unchanged);
4. an edited extended file is seen: broken, it gives the CLI's diagnostics (`autocastgen check`),
   compiles nothing and caches nothing;
5. a truncated library and a stale entry (an input whose recorded hash does not match) are
   detected, reported and compiled again.

One library is compiled from scratch (1); the rebuilds of 5 compile the same source with the same
command again, which ccache serves when it is installed (cpp_extension puts it in front of the
compiler).
"""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
from pathlib import Path

import pytest
from pipvenv import clean_env, run

NS = "acg_pip"
BAN_MESSAGE = "ban is unsafe under autocast; call it in float32"

SCHEMAS = {
    "lp": "lp(Tensor a, Tensor b) -> Tensor",                       # lower_precision_fp
    "f32": "f32(Tensor a, Tensor b) -> Tensor",                     # fp32
    "pr": "pr(Tensor a, Tensor b) -> Tensor",                       # promote
    "sod": "sod(Tensor a, *, ScalarType? dtype=None) -> Tensor",    # fp32_set_opt_dtype
    "apd": "apd(Tensor a) -> Tensor",                               # fp32_append_dtype ...
    "apd.dtype": "apd.dtype(Tensor a, ScalarType dtype) -> Tensor",  # ... redispatches here
    "ban": "ban(Tensor a) -> Tensor",                               # banned
}

# Defines one op per policy, compiles the policy given as argv[1], calls each op, prints JSON.
SCRIPT = textwrap.dedent('''\
    import json, os, sys, time
    import torch
    import autocastgen

    NS = "acg_pip"
    SCHEMAS = @SCHEMAS@
    seen = []
    lib = torch.library.Library(NS, "DEF")
    for name, schema in SCHEMAS.items():
        lib.define(schema)
        def kernel(*args, _name=name, **kwargs):
            seen.append([_name, [str(getattr(v, "dtype", v)) for v in list(args) + list(kwargs.values())]])
            return args[0].clone()
        lib.impl(name, kernel, "CPU")

    barrier = os.environ.get("ACG_BARRIER")
    if barrier:  # start compile_policy at the same moment as the other process
        open(os.path.join(barrier, str(os.getpid())), "w").close()
        deadline = time.monotonic() + 120
        while len(os.listdir(barrier)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)

    handle = autocastgen.compile_policy(sys.argv[1])

    def op(name):
        base, _, overload = name.partition(".")
        return getattr(getattr(getattr(torch.ops, NS), base), overload or "default")

    a32, b32, a16 = torch.randn(3), torch.randn(3), torch.randn(3, dtype=torch.bfloat16)
    calls = {
        "lp": ("lp", (a32, b32), {}), "lp f64": ("lp", (a32.double(), b32), {}),
        "f32": ("f32", (a16, b32), {}), "pr mixed": ("pr", (a16, b32), {}), "pr bf16": ("pr", (a16, a16), {}),
        "sod": ("sod", (a16,), {}), "sod given": ("sod", (a16,), {"dtype": torch.float16}),
        "apd": ("apd", (a16,), {}), "apd int": ("apd", (torch.arange(3),), {}),
    }
    results = {}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for label, (name, args, kwargs) in calls.items():
            op(name)(*args, **kwargs)
            results[label] = seen[-1]
        try:
            op("ban")(a32)
            results["ban"] = "no error"
        except RuntimeError as error:
            results["ban"] = str(error).splitlines()[0]
    op("lp")(a32, b32)
    results["lp outside autocast"] = seen[-1]
    print(json.dumps({"compiled": handle.compiled, "library": str(handle.library), "entry": str(handle.entry),
                      "key": handle.key, "ops": dict(handle.ops), "dispatch_key": handle.dispatch_key,
                      "results": results, "pid": os.getpid()}))
    ''').replace("@SCHEMAS@", repr(SCHEMAS))

EXPECTED = {
    "lp": ["lp", ["torch.bfloat16", "torch.bfloat16"]],
    "lp f64": ["lp", ["torch.float64", "torch.bfloat16"]],  # float64 is not eligible
    "f32": ["f32", ["torch.float32", "torch.float32"]],
    "pr mixed": ["pr", ["torch.float32", "torch.float32"]],
    "pr bf16": ["pr", ["torch.bfloat16", "torch.bfloat16"]],
    "sod": ["sod", ["torch.bfloat16", "torch.float32"]],  # dtype set, nothing cast
    "sod given": ["sod", ["torch.bfloat16", "torch.float16"]],  # a dtype given is kept
    "apd": ["apd.dtype", ["torch.bfloat16", "torch.float32"]],  # redispatched with float32
    "apd int": ["apd.dtype", ["torch.int64", "torch.int64"]],  # not eligible: its own dtype
    "ban": BAN_MESSAGE,
    "lp outside autocast": ["lp", ["torch.float32", "torch.float32"]],
}


@pytest.fixture(scope="module")
def setup(venv, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("compile")
    folder = venv["work"] / "compile"  # the policy files, outside the clone
    folder.mkdir()
    (folder / "base.yaml").write_text("autocast:\n  device: cpu\n  lower_precision: [bfloat16, float16]\n")
    (folder / "six.yaml").write_text(textwrap.dedent(f"""\
        extends: base.yaml
        lists:
          lower_precision_fp: [{NS}::lp]
          fp32: [{NS}::f32]
          promote: [{NS}::pr]
          fp32_set_opt_dtype: [{NS}::sod]
          fp32_append_dtype: [{NS}::apd]
          banned:
            - {{op: {NS}::ban, message: "{BAN_MESSAGE}"}}
        """))
    (root / "script.py").write_text(SCRIPT)
    ops = root / "ops.yaml"  # the custom ops' schemas as a file, for `autocastgen check`
    ops.write_text("".join(f"- func: {NS}::{schema}\n" for schema in SCHEMAS.values()))
    cache = root / "cache"
    return {"root": root, "folder": folder, "policy": folder / "six.yaml", "script": root / "script.py",
            "ops": ops, "cache": cache}


def native_functions(venv) -> str:
    """The venv's torch's native_functions.yaml (what compile_policy uses by default)."""
    return run([venv["python"], "-c", "import torchgen, pathlib; print(pathlib.Path(torchgen.__file__).parent / "
                "'packaged/ATen/native/native_functions.yaml')"], cwd=venv["work"]).stdout.strip()


def env_for(setup) -> dict[str, str]:
    return clean_env(AUTOCASTGEN_CACHE=str(setup["cache"]))


def compile_in_new_process(venv, setup) -> tuple[dict, str]:
    done = run([venv["python"], setup["script"], "compile/six.yaml"], cwd=venv["work"], env=env_for(setup),
               timeout=900)
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


def entries(setup) -> list[Path]:
    return sorted(p for p in setup["cache"].iterdir() if p.is_dir())


def metadata(result) -> dict:
    return json.loads((Path(result["entry"]) / "metadata.json").read_text())


@pytest.fixture(scope="module")
def first(venv, setup) -> list[tuple[dict, str]]:
    """Two processes compiling six.yaml at once into an empty cache: [(result, stderr)] for each."""
    barrier = setup["root"] / "barrier"
    barrier.mkdir()
    command = [str(venv["python"]), str(setup["script"]), "compile/six.yaml"]
    env = {**env_for(setup), "ACG_BARRIER": str(barrier)}
    children = [subprocess.Popen(command, cwd=venv["work"], env=env, text=True, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE) for _ in range(2)]
    outputs = [child.communicate(timeout=900) for child in children]
    for child, (out, err) in zip(children, outputs):
        assert child.returncode == 0, f"exit {child.returncode}\nstdout:\n{out}\nstderr:\n{err}"
    return [(json.loads(out.splitlines()[-1]), err) for out, err in outputs]


def test_two_processes_compile_once(first, setup, venv):
    assert not (venv["package"] / "_build_tree.py").exists()
    compiled = [result["compiled"] for result, _ in first]
    assert sorted(compiled) == [False, True], compiled
    (builder, builder_err), (waiter, waiter_err) = sorted(first, key=lambda r: not r[0]["compiled"])
    assert "autocastgen: compiling policy 'six' (compile/six.yaml; first use)" in builder_err, builder_err
    assert "waiting for another process compiling policy 'six'" in waiter_err, waiter_err
    assert "autocastgen: compiling policy" not in waiter_err, waiter_err
    assert builder["library"] == waiter["library"] and builder["key"] == waiter["key"]
    assert [p.name for p in entries(setup)] == [Path(builder["entry"]).name]
    assert not [p for p in setup["cache"].iterdir() if p.name.endswith((".build", ".failed")) or ".old-" in p.name]
    record = metadata(builder)
    assert record["built_by"]["pid"] == builder["pid"] and record["key"] == builder["key"]
    assert str(setup["folder"] / "base.yaml") in record["dependencies"]  # the extends chain, from the depfile
    assert Path(builder["library"]).stat().st_size == record["library_size"]


def test_six_policies_behave(first):
    for result, _ in first:
        assert result["ops"] == {f"{NS}::lp": "lower_precision_fp", f"{NS}::f32": "fp32", f"{NS}::pr": "promote",
                                 f"{NS}::sod": "fp32_set_opt_dtype", f"{NS}::apd": "fp32_append_dtype",
                                 f"{NS}::ban": "banned"}
        assert result["dispatch_key"] == "AutocastCPU"
        assert result["results"] == EXPECTED


def test_new_process_loads_from_the_cache(first, setup, venv):
    builder = next(result for result, _ in first if result["compiled"])
    log = Path(builder["entry"]) / "build.log"
    before = (metadata(builder), log.stat().st_mtime_ns)
    result, stderr = compile_in_new_process(venv, setup)
    assert not result["compiled"] and result["library"] == builder["library"]
    assert "autocastgen: compiling" not in stderr, stderr
    assert (metadata(builder), log.stat().st_mtime_ns) == before  # nothing was rebuilt or rewritten
    assert result["results"] == EXPECTED


def test_edited_extended_file_gives_its_diagnostics(first, setup, venv):
    base = setup["folder"] / "base.yaml"
    good = base.read_text()
    base.write_text(good + "lists:\n  fp32: [no_such_op_anywhere]\n")
    try:
        done = run([venv["python"], setup["script"], "compile/six.yaml"], cwd=venv["work"], env=env_for(setup),
                   check=False, timeout=300)
        # The same op set: PyTorch's schemas and the custom ops' (compile_policy takes the latter
        # from the dispatcher).
        check = run([venv["script"], "check", "--policy", "compile/six.yaml", "--schemas", native_functions(venv),
                     "--schemas", setup["ops"]], cwd=venv["work"], check=False)
    finally:
        base.write_text(good)
    assert done.returncode != 0
    assert "autocastgen.PolicyError" in done.stderr or "PolicyError" in done.stderr, done.stderr
    # The CLI's diagnostics, from their first line (torch may warn before them: the console script
    # imports the package, and a torch-alone venv has no numpy).
    diagnostics = check.stderr[check.stderr.index("compile/"):] if "compile/" in check.stderr else check.stderr
    diagnostics = re.sub(r"\n[^\n]*: \d+ errors? generated\.\n\Z", "\n", diagnostics)
    assert re.search(r"base\.yaml:5:10: error: unknown op", diagnostics), diagnostics
    assert diagnostics.rstrip("\n") in done.stderr, done.stderr  # PolicyError's text is the CLI's
    assert "autocastgen: compiling" not in done.stderr
    assert len(entries(setup)) == 1  # nothing cached for the broken chain


def rebuilt(venv, setup, first, damage, reason: str) -> None:
    """Damages the (valid) entry with ``damage(entry)``; a new process must report ``reason`` and
    rebuild it, and the next one load the rebuilt entry."""
    builder = next(result for result, _ in first if result["compiled"])
    entry = Path(builder["entry"])
    damage(entry)
    result, stderr = compile_in_new_process(venv, setup)
    assert result["compiled"], stderr
    assert f"cache entry {entry.name}: {reason}" in stderr, stderr
    assert result["library"] == builder["library"] and result["results"] == EXPECTED
    assert metadata(result)["built_by"]["pid"] == result["pid"]
    again, _ = compile_in_new_process(venv, setup)
    assert not again["compiled"]
    assert not [p for p in setup["cache"].iterdir() if p.name.endswith((".build", ".failed")) or ".old-" in p.name]


def test_truncated_library_is_rebuilt(first, setup, venv):
    def truncate(entry: Path) -> None:
        library = entry / "six.so"
        with open(library, "r+b") as f:
            f.truncate(library.stat().st_size // 2)

    rebuilt(venv, setup, first, truncate, "six.so does not match the size and sha256 in metadata.json")


def test_stale_entry_is_rebuilt(first, setup, venv):
    base = str(setup["folder"] / "base.yaml")

    def stale(entry: Path) -> None:  # base.yaml as it was when compiled is not what is there now
        record = json.loads((entry / "metadata.json").read_text())
        record["dependencies"][base] = "0" * 64
        (entry / "metadata.json").write_text(json.dumps(record))

    rebuilt(venv, setup, first, stale, f"{base} (an input) changed since it was compiled")
