#!/usr/bin/env python3
"""The C++ importer end to end (two Clang runs, the slow part of the audit tests):
1. tests/audit/fixtures/two_keys.cpp (KERNEL_CPU / KERNEL_CUDA, a banned kernel, a fallthrough, a
   hand-written kernel) imports to the hand-written policies in fixtures/expected/;
2. import(generate(policy)) has the same resolved entries, device and key as the policy, for
   every shipped policy (generic, cuda, cpu) — all three generated files in one import run;
3. the same for wrappers generated with `--state autocastgen`, read by `audit diff` directly
   (policy file against the generated C++ file): the importer knows both states;
4. the precision-rules recipe (examples/recipes/precision_rules.yaml) in both states: the rules
   are read back from the wrappers' conditions and marked arguments;
5. cpu generated with `--shards 3`: `import` of the three files gives the policy back (the
   importer merges the registrations of all files it reads; `audit diff` takes one file per side,
   so a sharded library is compared through its manifest or through the policy `import` writes);
6. precision by place (tests/data/policies/mini_modules.yaml): entries scoped to modules
   (`k<Wrapper>Modules<N>.match()`), a plain entry ending a chain after them, and the `modules:`
   section (rt::ModuleSections) read back, directly and through the policy `import` writes;
7. a backend's per-dtype wrapper template (fixtures/per_dtype.cpp: two cast policies, one for
   bfloat16 and one for float16, `fallthrough`, one half fp32) imports as entries with `dtypes:`,
   and its own op, from the schema file given with --extra-schemas, which the written policy names;
8. a list written for PyTorch 2.4 (fixtures/torch_2_4.cpp: ops and signatures later releases
   dropped) imports as written with --torch-version 2.4: 2.4's headers and schemas, from the
   release cache that `scripts/torch-releases fetch` fills.
Comparisons go through `autocastgen audit diff --fail-on added,removed,changed`."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = "tests/audit/fixtures"
SHIPPED = {"generic": "privateuseone", "cuda": "cuda", "cpu": "cpu"}


def run(cli: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([cli, *args], cwd=ROOT, capture_output=True, text=True)


def same_policy(cli: str, expected: str, imported: Path, failures: list[str], *options: str) -> None:
    out = run(cli, "audit", "diff", expected, str(imported), "--format", "json", "--fail-on", "added,removed,changed", *options)
    if out.returncode != 0:
        failures.append(f"{imported} differs from {expected} (status {out.returncode}):\n{out.stdout}{out.stderr}")
        return
    header = json.loads(out.stdout)["header"]
    if header:
        failures.append(f"{imported}: device/key differ from {expected}: {header}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--autocastgen", required=True)
    options = parser.parse_args()
    cli = str(Path(options.autocastgen).resolve())
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = Path(tmp)

        # 1. The fixture.
        start = time.monotonic()
        fixture = run(cli, "import", f"{FIXTURES}/two_keys.cpp", "-o", str(out_dir / "fixture"))
        print(f"import fixture: {time.monotonic() - start:.1f} s")
        if fixture.returncode != 0:
            print(fixture.stdout + fixture.stderr)
            return 1
        for device in ("cpu", "cuda"):
            same_policy(cli, f"{FIXTURES}/expected/{device}.yaml", out_dir / "fixture" / f"{device}.yaml", failures)
        if sorted(p.name for p in (out_dir / "fixture").iterdir()) != ["cpu.yaml", "cuda.yaml"]:
            failures.append(f"fixture: expected cpu.yaml and cuda.yaml, got {sorted((out_dir / 'fixture').iterdir())}")
        # The hand-written kernel is named, with its place; the fallthrough is not an entry.
        warning = ("two_keys.cpp:50:10: warning: 'dropout': 'fixture::handwritten_dropout' is a hand-written kernel "
                   "that no list policy describes; left out of the imported policy")
        if warning not in fixture.stderr:
            failures.append(f"fixture: missing the hand-written kernel warning; stderr was:\n{fixture.stderr}")
        if "relu" in (out_dir / "fixture" / "cpu.yaml").read_text():
            failures.append("fixture: the fallthrough for relu was imported as an entry")

        # 2. Round trip of the shipped policies.
        generated = []
        for name in SHIPPED:
            gen = run(cli, "generate", "--policy", f"schemas/policies/{name}.yaml", "--out", str(out_dir / "gen"))
            if gen.returncode != 0:
                print(gen.stdout + gen.stderr)
                return 1
            generated.append(str(out_dir / "gen" / f"autocast_{name}.cpp"))
        start = time.monotonic()
        back = run(cli, "import", *generated, "-o", str(out_dir / "back"))
        print(f"import 3 generated files: {time.monotonic() - start:.1f} s")
        if back.returncode != 0 or back.stderr:
            failures.append(f"importing the generated files: status {back.returncode}\n{back.stdout}{back.stderr}")
        else:
            for name, device in SHIPPED.items():
                same_policy(cli, f"schemas/policies/{name}.yaml", out_dir / "back" / f"{device}.yaml", failures)

        # 3. Wrappers of the other state, compared by audit diff straight from the C++ file.
        own = run(cli, "generate", "--policy", "schemas/policies/cpu.yaml", "--state", "autocastgen", "--name",
                  "cpu_own_state", "--out", str(out_dir / "own"))
        if own.returncode != 0:
            print(own.stdout + own.stderr)
            return 1
        start = time.monotonic()
        same_policy(cli, "schemas/policies/cpu.yaml", out_dir / "own" / "autocast_cpu_own_state.cpp", failures)
        print(f"audit diff of the --state autocastgen file: {time.monotonic() - start:.1f} s")

        # 4. Precision rules (per-dtype entries, conditions, per-argument casts) read back from the
        # wrappers generated for them, in both states, and written out by `import` as a policy.
        rules = "examples/recipes/precision_rules.yaml"
        for state in ("torch", "autocastgen"):
            gen = run(cli, "generate", "--policy", rules, "--state", state, "--name", f"rules_{state}", "--out",
                      str(out_dir / "rules"))
            if gen.returncode != 0:
                print(gen.stdout + gen.stderr)
                return 1
            same_policy(cli, rules, out_dir / "rules" / f"autocast_rules_{state}.cpp", failures)
        back = run(cli, "import", str(out_dir / "rules" / "autocast_rules_torch.cpp"), "-o", str(out_dir / "rules_back"))
        if back.returncode != 0 or back.stderr:
            failures.append(f"importing the rules wrappers: status {back.returncode}\n{back.stdout}{back.stderr}")
        else:
            same_policy(cli, rules, out_dir / "rules_back" / "cpu.yaml", failures)

        # 5. Sharded output: every shard's registrations, read together.
        gen = run(cli, "generate", "--policy", "schemas/policies/cpu.yaml", "--shards", "3", "--out", str(out_dir / "sharded"))
        if gen.returncode != 0:
            print(gen.stdout + gen.stderr)
            return 1
        shards = [str(out_dir / "sharded" / name) for name in ("autocast_cpu.cpp", "autocast_cpu.shard2.cpp", "autocast_cpu.shard3.cpp")]
        start = time.monotonic()
        back = run(cli, "import", *shards, "-o", str(out_dir / "sharded_back"))
        print(f"import 3 shards of cpu: {time.monotonic() - start:.1f} s")
        if back.returncode != 0 or back.stderr:
            failures.append(f"importing the shards: status {back.returncode}\n{back.stdout}{back.stderr}")
        else:
            same_policy(cli, "schemas/policies/cpu.yaml", out_dir / "sharded_back" / "cpu.yaml", failures)
        same_policy(cli, "schemas/policies/cpu.yaml", out_dir / "sharded" / "autocast_cpu.manifest.json", failures)

        # 6. Precision by place.
        modules = "tests/data/policies/mini_modules.yaml"
        gen = run(cli, "generate", "--policy", modules, "--out", str(out_dir / "modules"))
        if gen.returncode != 0:
            print(gen.stdout + gen.stderr)
            return 1
        same_policy(cli, modules, out_dir / "modules" / "autocast_mini_modules.cpp", failures)
        back = run(cli, "import", str(out_dir / "modules" / "autocast_mini_modules.cpp"), "-o", str(out_dir / "modules_back"))
        if back.returncode != 0 or back.stderr:
            failures.append(f"importing the module rules: status {back.returncode}\n{back.stdout}{back.stderr}")
        else:
            same_policy(cli, modules, out_dir / "modules_back" / "cpu.yaml", failures)
            written = (out_dir / "modules_back" / "cpu.yaml").read_text()
            for line in ("    - {op: softmax.int, modules: [layers.*.attn]}\n", "modules:\n  lm_head: fp32\n", "  layers.2: float16\n"):
                if line not in written:
                    failures.append(f"the imported module rules lack {line!r}:\n{written}")

        # 7. Per-dtype wrapper templates, and a backend's own op.
        extra = f"{FIXTURES}/per_dtype_ops.yaml"
        start = time.monotonic()
        back = run(cli, "import", f"{FIXTURES}/per_dtype.cpp", "--extra-schemas", extra, "-o", str(out_dir / "per_dtype"))
        print(f"import per-dtype fixture: {time.monotonic() - start:.1f} s")
        if back.returncode != 0 or back.stderr:
            failures.append(f"importing the per-dtype fixture: status {back.returncode}\n{back.stdout}{back.stderr}")
        else:
            same_policy(cli, f"{FIXTURES}/expected/per_dtype/cpu.yaml", out_dir / "per_dtype" / "cpu.yaml", failures,
                        "--extra-schemas", extra)
            written = (out_dir / "per_dtype" / "cpu.yaml").read_text()
            if f"# Op schemas it needs besides PyTorch's: {extra} " not in written:
                failures.append(f"the per-dtype policy does not name the schema file its own op needs:\n{written}")
            if "relu" in written:
                failures.append("per-dtype: relu (fallthrough in both dtypes) was imported as an entry")

        # 8. A list written for PyTorch 2.4, against 2.4's headers and schemas.
        start = time.monotonic()
        back = run(cli, "import", f"{FIXTURES}/torch_2_4.cpp", "--torch-version", "2.4", "-o", str(out_dir / "torch_2_4"))
        print(f"import the 2.4 fixture with --torch-version 2.4: {time.monotonic() - start:.1f} s")
        if back.returncode != 0 or back.stderr:
            failures.append(f"importing the 2.4 fixture with --torch-version 2.4 (scripts/torch-releases fetch fills the "
                            f"release cache): status {back.returncode}\n{back.stdout}{back.stderr}")
        else:
            same_policy(cli, f"{FIXTURES}/expected/torch_2_4/cpu.yaml", out_dir / "torch_2_4" / "cpu.yaml", failures,
                        "--torch-version", "2.4")
            written = (out_dir / "torch_2_4" / "cpu.yaml").read_text()
            if "# Read with PyTorch 2.4's headers and schemas: check and audit it with --torch-version 2.4.\n" not in written:
                failures.append(f"the 2.4 policy does not say which release it was read for:\n{written}")

    for f in failures:
        print("FAIL", f)
    if not failures:
        print("fixture imports to the expected policies; import(generate(p)) == p for generic, cuda, cpu, "
              "for cpu generated with --state autocastgen, for the precision-rules recipe in both states, for "
              "cpu in three shards, and for module rules; per-dtype wrapper templates and a 2.4 list import as written")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
