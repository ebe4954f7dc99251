#!/usr/bin/env python3
"""Prove the shipped policies for one PyTorch release: `check_release.py --release 2.9`.

1. Header lists (every release with cached headers): device_neutral_lists.cpp expands that
   release's AT_FORALL_* lists from its own ATen/autocast_mode.h into AutocastPrivateUse1
   registrations; `autocastgen import` reads them back as policy YAML, and its overloads and
   policies must equal generic.yaml resolved for the release (`autocastgen check --format json
   --torch-version`).  The banned binary_cross_entropy is registered outside the header lists, so
   steps 2 and 3 prove it.
2. Recorded registrations (every release with a record in registrations/<release>.json, taken
   once from that release's own torch by record_registrations.py): cpu.yaml, cuda.yaml and
   generic.yaml resolved for the release (`autocastgen check`) list exactly the overloads that
   torch registers on AutocastCPU, AutocastCUDA (less its hand-written kernels) and each of
   AutocastXPU/MTIA/MAIA.
3. Live registrations (the installed releases: `scripts/torch-releases list --installed`, where
   that release's venv exists or it is this interpreter's torch): the release's own torch runs
   tests/python/policy/test_shipped_policies.py (less the fake-device behaviour tests), which compares
   cpu.yaml, cuda.yaml and generic.yaml with what its dispatcher registers on AutocastCPU,
   AutocastCUDA and AutocastXPU/MTIA/MAIA, and runs every cpu.yaml op under CPU autocast. scripts/test
   makes the venv of one installed release per run (a rotation); the full build against a release
   runs that whole test file anyway, and scripts/test-all-releases makes every venv.

All three read the release cache (scripts/torch-releases) and never download: a missing release is a
failure that names the command to run.
"""
from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from policy_keys import HANDWRITTEN, POLICY_KEYS

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
HARNESS = HERE / "device_neutral_lists.cpp"
RECORDS = HERE / "registrations"
POLICIES = ROOT / "schemas" / "policies"
GENERIC = POLICIES / "generic.yaml"
PARITY_TEST = ROOT / "tests" / "python" / "policy" / "test_shipped_policies.py"
# Which of its tests run under an older torch: all but the behaviour tests on fake cuda/xpu/mtia
# tensors, which lean on what each release's fake tensors support (docs/policies.md); the CPU
# behaviour tests run for real and prove each cpu.yaml entry's policy for that release.
PARITY_SELECTION = "not test_behaviour or cpu"



def load_releases_script():
    loader = importlib.machinery.SourceFileLoader("torch_releases", str(ROOT / "scripts" / "torch-releases"))
    spec = importlib.util.spec_from_loader("torch_releases", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


RELEASES = load_releases_script()


class Failure(Exception):
    pass


def cached_release(version: str) -> Path:
    folder = RELEASES.cache_root() / version
    if not (folder / "torchgen").is_dir() or not (folder / "include" / "ATen" / "autocast_mode.h").exists():
        raise Failure(f"PyTorch {version} is not in the release cache ({folder}): "
                      f"run scripts/torch-releases fetch {version}")
    return folder


def run(command: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})})


def import_header_lists(cli: str, release: str, folder: Path, schemas: Path, scratch: Path) -> dict:
    major, minor = release.split(".")
    out = scratch / "imported"
    base = [cli, "import", str(HARNESS), "-o", str(out), "--schemas", str(schemas), "--torch-version", release,
            "--", f"-DACG_EXPECT_MAJOR={major}", f"-DACG_EXPECT_MINOR={minor}"]
    # The release's headers, not the installed torch's.
    env = {"AUTOCASTGEN_TORCH_DIR": str(folder)}
    proc = run(base, env)
    if proc.returncode != 0:
        raise Failure(f"autocastgen import of {HARNESS.name} against PyTorch {release}'s headers failed:\n"
                      f"{proc.stdout}{proc.stderr}")
    print(proc.stdout.strip())
    imported = yaml.safe_load((out / "privateuseone.yaml").read_text())
    found = {}
    for policy, entries in (imported.get("lists") or {}).items():
        for entry in entries or []:
            entry = entry if isinstance(entry, dict) else {"op": entry}
            found[entry["op"]] = (policy, entry.get("redispatch"))
    return found


def resolve(cli: str, release: str, schemas: Path, policy: Path) -> dict:
    """`autocastgen check --format json` of a policy for the release."""
    proc = run([cli, "check", "--format", "json", "--policy", str(policy), "--schemas", str(schemas),
                "--torch-version", release])
    if proc.returncode != 0:
        raise Failure(f"autocastgen check of {policy.name} for PyTorch {release} failed:\n{proc.stdout}{proc.stderr}")
    report = json.loads(proc.stdout)
    if not report["torch_version"].startswith(release):
        raise Failure(f"check resolved for PyTorch {report['torch_version']}, not {release}")
    return report


def resolve_generic(cli: str, release: str, schemas: Path) -> tuple[dict, list]:
    report = resolve(cli, release, schemas, GENERIC)
    resolved = {e["op"]: (e["policy"], e.get("redispatch")) for e in report["entries"] if e["policy"] != "banned"}
    return resolved, report.get("skipped") or []


def compare(release: str, header: dict, policy: dict) -> list[str]:
    problems = []
    for op in sorted(header.keys() - policy.keys()):
        problems.append(f"  {op}: in PyTorch {release}'s {header[op][0]} list, not in generic.yaml")
    for op in sorted(policy.keys() - header.keys()):
        problems.append(f"  {op}: in generic.yaml ({policy[op][0]}), not in PyTorch {release}'s header lists")
    for op in sorted(header.keys() & policy.keys()):
        if header[op] != policy[op]:
            problems.append(f"  {op}: PyTorch {release} has {header[op]}, generic.yaml {policy[op]}")
    return problems


def check_headers(cli: str, release: str, folder: Path, schemas: Path, scratch: Path) -> None:
    header = import_header_lists(cli, release, folder, schemas, scratch)
    policy, skipped = resolve_generic(cli, release, schemas)
    problems = compare(release, header, policy)
    if problems:
        raise Failure(f"generic.yaml resolved for PyTorch {release} differs from that release's "
                      "ATen/autocast_mode.h lists:\n" + "\n".join(problems))
    print(f"header lists of PyTorch {release}: {len(header)} overloads, equal to generic.yaml "
          f"({len(skipped)} entries skipped by release gates)")


def check_record(cli: str, release: str, schemas: Path) -> bool:
    """False when no record exists for the release."""
    record_file = RECORDS / f"{release}.json"
    if not record_file.exists():
        return False
    record = json.loads(record_file.read_text())
    problems, checked = [], []
    for filename, keys in sorted(POLICY_KEYS.items()):
        listed = {e["op"] for e in resolve(cli, release, schemas, POLICIES / filename)["entries"]}
        usable = [key for key in keys if record["keys"].get(key)]
        if not usable:
            problems.append(f"{filename}: none of {', '.join(keys)} has registrations in the record")
        for key in usable:
            registered = set(record["keys"][key])
            handwritten = set(HANDWRITTEN.get(key, {}))
            for op in sorted(registered - listed - handwritten):
                problems.append(f"  {key} registers {op}, {filename} does not list it")
            for op in sorted(listed - registered):
                problems.append(f"  {filename} lists {op}, {key} does not register it")
            for op in sorted(handwritten - registered):
                problems.append(f"  {op} is in HANDWRITTEN for {key}, which no longer registers it")
            checked.append(f"{filename} = {key} ({len(registered)})")
    if problems:
        raise Failure(f"the shipped policies resolved for PyTorch {release} differ from the registrations "
                      f"recorded from torch {record['torch']} ({record_file.relative_to(ROOT)}):\n" + "\n".join(problems))
    print(f"recorded registrations of torch {record['torch']}: " + "; ".join(checked))
    return True


def torch_python(version: str) -> Path | None:
    """The venv of `version`, else this interpreter when its torch is that release (the pinned one)."""
    venv = RELEASES.cache_root() / "venv" / version
    if (venv / ".complete").exists():
        return venv / "bin" / "python"
    mine = run([sys.executable, "-c", "import torch; print(torch.__version__)"])
    if mine.returncode == 0 and mine.stdout.strip().split("+")[0] == version:
        return Path(sys.executable)
    return None


def check_registrations(python: Path, version: str) -> None:
    proc = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", PARITY_SELECTION,
                           str(PARITY_TEST)], cwd=ROOT, capture_output=True, text=True)
    print(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr.strip())
    if proc.returncode != 0:
        raise Failure(f"registration parity against PyTorch {version}'s dispatcher failed:\n{proc.stdout}{proc.stderr}")
    print(f"PyTorch {version} ({python}): cpu.yaml, cuda.yaml, generic.yaml match its registrations; "
          "cpu.yaml's ops behave as listed")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--autocastgen", required=True)
    parser.add_argument("--release", required=True, help="X.Y")
    options = parser.parse_args()
    version = RELEASES.resolve(options.release)
    release = ".".join(version.split(".")[:2])
    installed = "installed" in RELEASES.RELEASES[version]
    try:
        if "headers" not in RELEASES.RELEASES[version]:
            raise Failure(f"PyTorch {version} is not a headers release (scripts/torch-releases list --headers)")
        folder = cached_release(version)
        with tempfile.TemporaryDirectory(prefix=f"release-{release}-") as tmp:
            scratch = Path(tmp)
            schemas = folder / "torchgen" / "packaged" / "ATen" / "native" / "native_functions.yaml"
            check_headers(options.autocastgen, release, folder, schemas, scratch)
            recorded = check_record(options.autocastgen, release, schemas)
        python = torch_python(version) if installed else None
        if not recorded and python is None:
            venv = " (or make its venv: scripts/torch-releases venv " + release + ")" if installed else ""
            raise Failure(f"no registrations recorded for PyTorch {release}: run "
                          f"tests/release_policies/record_registrations.py with that torch's python{venv}")
        if python is not None:
            check_registrations(python, version)
        elif installed:
            print(f"live registrations of PyTorch {version}: not checked in this run, it has no venv here "
                  f"(scripts/torch-releases venv {release}); its recorded registrations were checked above")
    except Failure as failure:
        print(f"FAIL: {failure}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
