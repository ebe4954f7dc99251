#!/usr/bin/env python3
"""Regenerates the golden generator output into a temporary directory and compares bytes; also
checks determinism, write-only-if-changed, --check, and that a run with fewer --shards removes the
extra shard files. `--update` refreshes the golden files."""
import difflib
import filecmp
import os
import subprocess
import sys
import tempfile
import time

GOLDEN = "tests/emit/golden"
ARGS = ["generate", "--policy", "tests/data/policies/mini_all_policies.yaml",
        "--schemas", "tests/data/schemas/mini_native_functions.yaml",
        "--schemas", "tests/data/schemas/custom_ops.yaml", "--torch-version", "2.15", "--name", "mini"]
# The same policy with autocastgen's own runtime state (`--state autocastgen`).
OWN_STATE_ARGS = [*ARGS[:-1], "mini_own_state", "--state", "autocastgen"]
# An fp8 list and its recipe.
FP8_ARGS = ["generate", "--policy", "tests/data/policies/mini_fp8.yaml",
            "--schemas", "tests/data/schemas/mini_native_functions.yaml", "--torch-version", "2.15", "--name", "mini_fp8"]

# Precision rules: every rule and literal kind (tests/rules compiles the same file).
RULES_ARGS = ["generate", "--policy", "tests/data/policies/mini_rules.yaml",
              "--schemas", "tests/data/schemas/mini_native_functions.yaml", "--torch-version", "2.15", "--name", "mini_rules"]

# Precision by place: entries scoped to modules and the `modules:` section, over a base file.
MODULES_ARGS = ["generate", "--policy", "tests/data/policies/mini_modules.yaml",
                "--schemas", "tests/data/schemas/mini_native_functions.yaml", "--torch-version", "2.15", "--name", "mini_modules"]

# Two shards (Note [shards] in codegen/emit/torch_target.h), with --state autocastgen so shard 1
# also holds the key claim (every op of both shards) and the fallthrough fallback.
SHARDED_ARGS = [*ARGS[:-1], "mini_sharded", "--state", "autocastgen", "--shards", "2"]


def run(cli, *extra, check=True):
    return subprocess.run([cli, *ARGS, *extra], capture_output=True, text=True, check=check)


def run_variants(cli, out):
    """The own-state, fp8, precision-rules and precision-by-place variants of the golden output."""
    for args in (OWN_STATE_ARGS, FP8_ARGS, RULES_ARGS, MODULES_ARGS, SHARDED_ARGS):
        subprocess.run([cli, *args, "--out", out], capture_output=True, text=True, check=True)


def check_leftover_shards(cli, out):
    """A run with fewer shards removes the extra shard files of an earlier run; --check names them."""
    sharded = [cli, *SHARDED_ARGS[:-1]]
    subprocess.run([*sharded, "4", "--out", out], capture_output=True, text=True, check=True)
    def shard(k):
        return os.path.join(out, f"autocast_mini_sharded.shard{k}.cpp")
    assert all(os.path.exists(shard(k)) for k in (2, 3, 4))
    other = os.path.join(out, "autocast_mini_sharded.shard3.cpp.orig")  # not a shard's name: kept
    open(other, "w").close()
    check = subprocess.run([*sharded, "2", "--out", out, "--check"], capture_output=True, text=True)
    assert check.returncode == 1 and "shard3.cpp' is a shard of an earlier, larger --shards" in check.stderr, check
    assert os.path.exists(shard(3)), "--check must not remove anything"
    again = subprocess.run([*sharded, "2", "--out", out], capture_output=True, text=True, check=True)
    assert f"removed {shard(3)}" in again.stdout and f"removed {shard(4)}" in again.stdout, again.stdout
    assert not os.path.exists(shard(3)) and not os.path.exists(shard(4)) and os.path.exists(other)
    assert filecmp.cmp(shard(2), os.path.join(GOLDEN, "autocast_mini_sharded.shard2.cpp"), shallow=False)
    os.remove(other)


def main():
    cli = sys.argv[1]
    if "--update" in sys.argv:
        run(cli, "--out", GOLDEN)
        run_variants(cli, GOLDEN)
        print(f"refreshed {GOLDEN}")
        return 0
    with tempfile.TemporaryDirectory() as out:
        run(cli, "--out", out)
        run_variants(cli, out)
        failed = False
        for name in sorted(os.listdir(GOLDEN)):
            got, want = os.path.join(out, name), os.path.join(GOLDEN, name)
            if not os.path.exists(got) or not filecmp.cmp(got, want, shallow=False):
                failed = True
                got_lines = open(got).read().splitlines(True) if os.path.exists(got) else []
                sys.stdout.writelines(difflib.unified_diff(open(want).read().splitlines(True), got_lines, want, got))
        if sorted(os.listdir(out)) != sorted(os.listdir(GOLDEN)):
            failed = True
            print(f"files differ: generated {sorted(os.listdir(out))}, golden {sorted(os.listdir(GOLDEN))}")
        if failed:
            print("golden output is stale; if the change is intended, refresh it with:\n"
                  "  python3 tests/emit/check_golden.py build/bin/autocastgen --update")
            return 1
        # A second run writes nothing and leaves timestamps alone.
        stamps = {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in os.listdir(out)}
        time.sleep(0.01)
        second = run(cli, "--out", out)
        assert second.stdout == "", f"unchanged outputs were rewritten: {second.stdout!r}"
        assert stamps == {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in os.listdir(out)}
        # --check passes on fresh outputs, fails (and writes nothing) on stale ones.
        assert run(cli, "--out", out, "--check").returncode == 0
        cpp = os.path.join(out, "autocast_mini.cpp")
        with open(cpp, "a") as f:
            f.write("// edited\n")
        stale = run(cli, "--out", out, "--check", check=False)
        assert stale.returncode == 1 and "out of date" in stale.stderr, stale
        assert open(cpp).read().endswith("// edited\n"), "--check must not write"
        check_leftover_shards(cli, out)
    print("golden output, determinism, write-if-changed, --check and leftover shards: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
