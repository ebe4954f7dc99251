"""The wheel on the oldest system its tag admits: manylinux_2_31 is glibc 2.31 and GCC 10's libstdc++,
Debian 11's (Note [linking for manylinux_2_31] in scripts/torch-releases). auditwheel reads the symbol
versions the wheel's libraries ask for; these tests run them there, in a root of Debian 11's own
packages (chroot): its C library, loader and libstdc++ are the only ones the CLI and a runtime can
find. The CLI generates what it generates on this machine, byte for byte; each release's runtime
and CUDA part load beside that release's torch from PyPI with every symbol bound at once, and the
runtime answers a call. Debian 11's Python (3.9) is older than the package's requires-python (3.10),
so the Python side runs in the other pip tests' venvs, not here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pipvenv import REPO, TORCH_CLOSURE, clean_env, run, torch_releases


def link_tree(source: Path, target: Path) -> None:
    """A copy of ``source`` at ``target`` made of hard links (instant, no space; the release cache and
    the test's folder share a file system here), files copied where they cannot be linked."""

    def link_or_copy(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, target, symlinks=True, copy_function=link_or_copy)


# coreutils' chroot, found on this process's PATH (the commands in the root get the root's own).
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"


def in_root(root: Path, *args: object, check: bool = True) -> subprocess.CompletedProcess:
    """Runs ``args`` (paths inside the root) in the root, which it sees as /."""
    return run([CHROOT, root, *args], cwd=root, check=check, env=clean_env(PATH="/usr/bin:/bin"))


@pytest.fixture(scope="module")
def manylinux() -> Path:
    """scripts/torch-releases manylinux: the Debian 11 packages the wheel is linked with, unpacked."""
    return Path(torch_releases("manylinux"))


@pytest.fixture(scope="module")
def debian11(manylinux, tmp_path_factory) -> Path:
    """A Debian 11 root: libc6, libstdc++6, libgcc-s1 and what they need, nothing of this machine."""
    root = tmp_path_factory.mktemp("debian11") / "root"
    link_tree(manylinux / "root", root)
    (root / "tmp").mkdir(exist_ok=True)
    return root


def install_into(root: Path, wheel: Path, folder: str) -> Path:
    """The wheel as pip lays it out, at /opt/<folder> of the root (pip --target, no index, no deps)."""
    site = root / "opt" / folder
    run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--disable-pip-version-check",
         "--quiet", "--target", site, wheel], cwd=root)
    return site


def test_cli_in_a_debian_11_root_writes_what_it_writes_here(wheel, debian11):
    site = install_into(debian11, wheel, "cli")
    cli = site / "autocastgen" / "bin" / "autocastgen"
    inputs = debian11 / "tmp" / "in"
    inputs.mkdir()
    for policy in (REPO / "schemas" / "policies").glob("*.yaml"):
        shutil.copy(policy, inputs)
    native = Path(torch_releases("path", "2.15")) / "torchgen" / "packaged" / "ATen" / "native"
    for name in ("native_functions.yaml", "tags.yaml"):
        shutil.copy(native / name, inputs)
    # The same relative paths in both runs (the generated header names its inputs): from / inside
    # the root, from the root's folder here.
    generate = ["generate", "--policy", "tmp/in/cuda.yaml", "--schemas", "tmp/in/native_functions.yaml",
                "--torch-version", "2.15"]
    there = in_root(debian11, "/opt/cli/autocastgen/bin/autocastgen", *generate, "--out", "tmp/there")
    here = run([cli, *generate, "--out", debian11 / "tmp" / "here"], cwd=debian11)
    assert there.stdout.replace("tmp/there", "OUT") == here.stdout.replace(str(debian11 / "tmp" / "here"), "OUT")
    produced = sorted(p.name for p in (debian11 / "tmp" / "there").iterdir())
    assert produced == ["autocast_cuda.cpp", "autocast_cuda.manifest.json"], produced
    for name in produced:
        assert (debian11 / "tmp" / "there" / name).read_bytes() == (debian11 / "tmp" / "here" / name).read_bytes(), name
    version = in_root(debian11, "/opt/cli/autocastgen/bin/autocastgen", "--version").stdout
    assert version == run([cli, "--version"], cwd=debian11).stdout, version
    # A diagnostic, through yaml-cpp and fmt as they are linked into the wheel.
    (inputs / "bad.yaml").write_text("ops:\n  - [\n")
    bad = in_root(debian11, "/opt/cli/autocastgen/bin/autocastgen", "check", "--policy", "tmp/in/bad.yaml",
                  "--schemas", "tmp/in/native_functions.yaml", check=False)
    assert bad.returncode != 0 and bad.stderr.startswith("tmp/in/bad.yaml:"), (bad.returncode, bad.stderr)


def test_runtime_loads_in_a_debian_11_root_beside_its_torch(venv, wheel, manylinux, debian11):
    release = venv["release"]
    site = debian11 / "opt" / f"torch-{release}"
    install_into(debian11, wheel, f"torch-{release}")
    # That release's torch from PyPI and what it requires (the NVIDIA libraries libtorch_cuda finds
    # through its RPATH: nvidia/..., and cusparselt/ beside it for 2.7), laid out as in site-packages;
    # of torch itself its libraries.
    closure = json.loads(run([venv["python"], "-c", TORCH_CLOSURE], cwd=venv["work"]).stdout)
    for top in map(Path, closure["paths"]):
        real = top.resolve()
        if real.is_dir():
            link_tree(real / "lib" if top.name == "torch" else real,
                      site / top.name / "lib" if top.name == "torch" else site / top.name)
    folder = f"autocastgen/_runtime/torch-{'.'.join(release.split('.')[:2])}"
    build_info = json.loads((site / folder / "build_info.json").read_text())
    loader = debian11 / "opt" / f"load-{release}"
    options = (manylinux / "link" / "options.txt").read_text().split()
    run(["g++", "-O2", "-std=c++20", f"-D_GLIBCXX_USE_CXX11_ABI={build_info['cxx11_abi']}",
         REPO / "tests" / "pip" / "load_runtime.cpp", "-o", loader, *options, "-ldl"], cwd=debian11)
    libraries = [f"/opt/torch-{release}/{folder}/libautocastgen_runtime_torch.so"]
    assert build_info["cuda_part"], build_info
    libraries.append(f"/opt/torch-{release}/{folder}/libautocastgen_runtime_torch_cuda.so")
    there = in_root(debian11, f"/opt/load-{release}", *libraries).stdout.splitlines()
    assert there[:2] == [f"loaded {library}" for library in libraries], there
    assert json.loads(there[2]) == {"version": 1, "ops": []}, there
