"""The wheel (scripts/wheel) installed as a user does (Note [the wheel as users install it] in pipvenv.py):
a fresh venv with torch alone, `pip install --no-index`, used from outside the clone with no build tools."""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
import zipfile
from pathlib import Path

from pipvenv import REPO, clean_env, user_env
from pipvenv import run as _run

from conftest import OTHER_PYTHON, OUTSIDE, RELEASES


def minor(release: str) -> str:
    return ".".join(release.split(".")[:2])


def runtime_folder(venv) -> Path:
    return venv["package"] / "_runtime" / f"torch-{minor(venv['release'])}"


def test_wheel_holds_one_runtime_per_release(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    # glibc 2.31 and GLIBCXX_3.4.28, Debian 11's (Note [linking for manylinux_2_31] in scripts/torch-releases).
    assert wheel.name.startswith("autocastgen-") and wheel.name.endswith("-py3-none-manylinux_2_31_x86_64.whl"), wheel.name
    for release in RELEASES:
        folder = f"autocastgen/_runtime/torch-{minor(release)}/"
        for part in ("libautocastgen_runtime_torch.so", "libautocastgen_kernels.a", "build_info.json"):
            assert folder + part in names, (folder + part, wheel.name)
        assert folder + "_C.abi3.so" in names, folder  # one for every CPython (Note [one _C for every CPython])
        assert f"autocastgen/lib/cmake/autocastgen/torch-{minor(release)}/autocastgenRuntimeTargets.cmake" in names
    # torch's and CUDA's libraries come with torch, never with us; no stand-in of them either.
    for name in names:
        assert not Path(name).name.startswith(("libtorch", "libc10", "libcudart")), name
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    # torch alone, in the range of the runtimes inside; the training frameworks only with their extras.
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "; extra ==" not in line]
    ordered = sorted(RELEASES, key=lambda r: tuple(map(int, r.split("."))))
    high = minor(ordered[-1])
    next_minor = f"{high.split('.')[0]}.{int(high.split('.')[1]) + 1}"
    assert requires == [f"Requires-Dist: torch>={minor(ordered[0])},<{next_minor}"], requires
    extras = {line.split('extra == "')[1].rstrip('"') for line in metadata.splitlines()
              if line.startswith("Requires-Dist:") and "; extra ==" in line}
    assert extras == {"transformers", "accelerate", "lightning"}, metadata


def test_installed_without_yaml_or_build_tools(venv):
    """The venv is what a user with torch alone has, and the install took no index and no compiler."""
    assert not (venv["python"].parent / "cmake").exists()
    done = _run([venv["python"], "-c", "import yaml"], cwd=venv["work"], check=False, env=user_env(venv))
    assert done.returncode != 0 and "No module named 'yaml'" in done.stderr, done.stderr
    for tool in ("c++", "g++", "cmake", "ninja"):
        found = _run([venv["python"], "-c", f"import shutil; print(shutil.which({tool!r}))"], cwd=venv["work"],
                     env=user_env(venv)).stdout.strip()
        assert found == "None", (tool, found)


def test_installed_layout(venv):
    package = venv["package"]
    for relative in ("__init__.py", "__main__.py", "_build_info.py", "compile.py", "_build_library.py", "py.typed",
                     "bin/autocastgen",
                     "lib/cmake/autocastgen/autocastgenConfig.cmake", "lib/cmake/autocastgen/AutocastgenOps.cmake",
                     "share/autocastgen/policies/cpu.yaml", "share/autocastgen/policies/cuda.yaml",
                     "share/autocastgen/templates", "include/autocastgen"):
        assert (package / relative).exists(), f"{relative} missing from {package}"
    folder = runtime_folder(venv)
    info = json.loads((folder / "build_info.json").read_text())
    assert minor(info["torch"]) == minor(venv["release"]), info
    # The CUDA version scripts/torch-releases records for the release's wheel is the installed one's.
    cuda = _run([venv["python"], "-c", "import torch; print(torch.version.cuda)"], cwd=venv["work"],
                env=user_env(venv)).stdout.strip().splitlines()[-1]
    assert info["cuda"] == cuda, (info, cuda)
    # The CUDA part where this machine's toolkit had the release's CUDA major (scripts/wheel).
    assert (folder / "libautocastgen_runtime_torch_cuda.so").exists() == info["cuda_part"], info
    assert REPO not in package.parents, package


# The integrations' modules import their training framework, which torch alone lacks: importing one
# says which extra installs it (docs/training.md).
NEEDS_EXTRA = {"autocastgen.integrations.lightning": "autocastgen[lightning]",
               "autocastgen.integrations.transformers": "autocastgen[transformers]"}


def test_every_module_imports_without_build_tools(venv):
    """Every module of the package imports with torch alone (the optional ONNX packages are asked for
    when used, docs/python.md), but the integrations' modules, which name the extra to install."""
    script = textwrap.dedent(f"""\
        import importlib, pkgutil, autocastgen
        names = [m.name for m in pkgutil.walk_packages(autocastgen.__path__, "autocastgen.")]
        for name in names:
            if name.endswith("__main__"):
                continue
            extra = {NEEDS_EXTRA!r}.get(name)
            try:
                importlib.import_module(name)
            except ImportError as error:
                if extra is None or f"pip install {{extra}}" not in str(error):
                    raise
                print("needs", extra)
            else:
                assert extra is None, name + " imported without its framework"
        print(len(names))
        """)
    done = _run([venv["python"], "-c", script], cwd=venv["work"], env=user_env(venv))
    lines = done.stdout.split()
    assert int(lines[-1]) > 40, done.stdout
    assert done.stdout.count("needs ") == len(NEEDS_EXTRA), done.stdout


def test_version_names_package_and_runtime(venv):
    for command in ([venv["python"], "-m", "autocastgen", "--version"], [venv["script"], "--version"]):
        done = _run(command, cwd=venv["work"], env=user_env(venv))
        first, second = done.stdout.splitlines()[:2]
        assert first.startswith("autocastgen 0.1.0; torch " + minor(venv["release"])), first
        assert str(runtime_folder(venv) / "libautocastgen_runtime_torch.so") in first, first
        assert "autocastgen" in second, second  # the CLI's own version line
    done = _run([venv["python"], "-c", "import autocastgen; print(autocastgen.__version__)"], cwd=venv["work"],
                env=user_env(venv))
    assert done.stdout.strip() == "0.1.0"


def test_release_outside_the_wheel_is_an_import_error(outside_venv):
    done = _run([outside_venv["python"], "-c", "import autocastgen"], cwd=outside_venv["work"], check=False,
                env=user_env(outside_venv))
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    held = ", ".join(minor(r) for r in sorted(RELEASES, key=lambda r: tuple(map(int, r.split(".")))))
    assert last.startswith("ImportError: autocastgen 0.1.0 has runtimes for torch"), last
    assert f"({held})" in last and f"torch {OUTSIDE}" in last, last
    assert "undefined symbol" not in done.stderr


def wheel_requires_torch(wheel: Path) -> list[str]:
    """The specifiers of the wheel's Requires-Dist on torch, sorted (['<2.16', '>=2.11'])."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    (requires,) = [line for line in metadata.splitlines() if line.startswith("Requires-Dist: torch")]
    return sorted(requires.removeprefix("Requires-Dist: torch").split(","))


def pip_beside_its_torch(venv, wheel: Path) -> tuple[str, subprocess.CompletedProcess]:
    """The venv's torch version, and pip's resolution of the wheel beside that torch kept as it is
    (`pip install --dry-run --no-index WHEEL torch==VERSION`, as a user who keeps their torch): the
    wheel's Requires-Dist judged against the installed torch, with nothing to fetch and nothing
    installed. (`--force-reinstall` would ask the index for torch too, which `--no-index` refuses in
    every venv, whatever the wheel requires.)"""
    version = _run([venv["python"], "-c", "import importlib.metadata as m; print(m.version('torch'))"],
                   cwd=venv["work"], env=user_env(venv)).stdout.strip()
    done = _run([venv["python"], "-m", "pip", "install", "--dry-run", "--no-index", "--disable-pip-version-check",
                 wheel, f"torch=={version}"], cwd=venv["work"], check=False, env=user_env(venv))
    return version, done


def test_pip_refuses_the_wheel_for_a_release_outside_it(outside_torch_alone, wheel):
    version, done = pip_beside_its_torch(outside_torch_alone, wheel)
    assert version.split("+")[0] == OUTSIDE, (version, OUTSIDE)
    assert done.returncode == 1, (done.stdout, done.stderr)
    # The refusal is the conflict of the wheel's range with this torch, not a torch that cannot be found.
    assert "ERROR: ResolutionImpossible" in done.stderr, done.stderr
    assert f"Cannot install autocastgen==0.1.0 and torch=={version} because these package versions have " \
        "conflicting dependencies." in done.stderr, done.stderr
    # What the conflict is caused by, which pip prints to stdout.
    lines = [line.strip() for line in done.stdout.splitlines()]
    assert f"The user requested torch=={version}" in lines, done.stdout
    (conflict,) = [line for line in lines if line.startswith("autocastgen 0.1.0 depends on torch")]
    assert sorted(conflict.removeprefix("autocastgen 0.1.0 depends on torch").split(" and ")) == \
        wheel_requires_torch(wheel), (conflict, wheel_requires_torch(wheel))


def test_pip_takes_the_wheel_for_a_release_in_it(venv, wheel):
    """The control of the refusal above: the same resolution beside a torch the wheel holds succeeds."""
    version, done = pip_beside_its_torch(venv, wheel)
    assert minor(version) == minor(venv["release"]), (version, venv["release"])
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "ResolutionImpossible" not in done.stderr and "conflicting dependencies" not in done.stderr, done.stderr
    # Installed already (by make_venv), or would be: pip judged the wheel's requirements either way.
    assert ("autocastgen is already installed with the same version as the provided wheel" in done.stdout
            or "Would install autocastgen-0.1.0" in done.stdout), done.stdout


def test_console_script_help(venv):
    done = _run([venv["script"], "--help"], cwd=venv["work"], env=user_env(venv))
    assert "check" in done.stdout and "generate" in done.stdout, done.stdout


def test_module_runs_check_on_installed_policy(venv):
    policy = venv["package"] / "share" / "autocastgen" / "policies" / "cpu.yaml"
    done = _run([venv["python"], "-m", "autocastgen", "check", "--policy", policy], cwd=venv["work"],
                env=user_env(venv))
    assert done.returncode == 0


def test_shipped_policy_and_import_refusal(venv):
    # The shipped policies by name (what docs use in place of a build tree's generated library), and
    # `import`, which the pip package leaves out, says what to do instead in one line.
    done = _run([venv["python"], "-c", "import autocastgen; print(autocastgen.shipped_policy('cpu'))"],
                cwd=venv["work"], env=user_env(venv))
    assert Path(done.stdout.strip()) == venv["package"] / "share" / "autocastgen" / "policies" / "cpu.yaml"
    (venv["work"] / "x.cpp").write_text("")
    refused = _run([venv["script"], "import", "x.cpp"], cwd=venv["work"], check=False, env=user_env(venv))
    assert refused.returncode == 1
    # Its last line; torch may warn before it (no numpy in a torch-alone venv).
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("autocastgen: error:") and "which the pip package leaves out" in last, refused.stderr


def test_script_and_module_agree_on_errors(venv):
    bad = venv["work"] / "bad.yaml"
    bad.write_text("autocast: {device: cpu}\nlists:\n  fp32: [aten::no_such_op_anywhere]\n")
    by_script = _run([venv["script"], "check", "--policy", bad], cwd=venv["work"], check=False, env=user_env(venv))
    by_module = _run([venv["python"], "-m", "autocastgen", "check", "--policy", bad], cwd=venv["work"], check=False,
                     env=user_env(venv))
    assert by_script.returncode != 0
    assert (by_script.returncode, by_script.stdout, by_script.stderr) == \
        (by_module.returncode, by_module.stdout, by_module.stderr)
    assert "bad.yaml:3:" in by_script.stderr, by_script.stderr


IMPORT_AND_UNSCALE = textwrap.dedent("""\
    import torch, autocastgen
    print(autocastgen.load_runtime())
    lib = torch.library.Library("piptest", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CPU")
    n = autocastgen.load_policy("autocast: {device: cpu}\\nlists:\\n  lower_precision_fp: [piptest::twice]\\n")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.ops.piptest.twice(torch.ones(3))
    print(n, y.dtype)
    try:
        autocastgen.load_policy("autocast: {device: cpu}\\nlists:\\n  fp32: [piptest::missing]\\n", name="t.yaml")
    except autocastgen.PolicyError as e:
        print("error:", str(e).splitlines()[0])
    from autocastgen import grad_scaler
    grads, found = [torch.full((2,), 4.0), torch.tensor([1.0, float("inf")])], torch.zeros(1)
    grad_scaler.non_finite_check_and_unscale_(grads, found, torch.full((1,), 0.5))
    print(grad_scaler._C is not None, grads[0].tolist(), found.item())
    scaler = autocastgen.GradScaler("cpu", init_scale=8.0)
    w = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([w], lr=1.0)
    scaler.scale((w * 2).sum()).backward()
    scaler.step(opt)
    scaler.update()
    print(w.tolist(), scaler.get_scale())
""")


def check_import_and_unscale(venv) -> None:
    done = _run([venv["python"], "-c", IMPORT_AND_UNSCALE], cwd=venv["work"], env=user_env(venv))
    lines = done.stdout.splitlines()
    assert Path(lines[0]) == runtime_folder(venv) / "libautocastgen_runtime_torch.so", lines
    assert lines[1] == "1 torch.bfloat16", lines
    assert lines[2].startswith("error: t.yaml:3:"), lines
    assert lines[3] == "True [2.0, 2.0] 1.0", lines
    assert lines[4] == "[-1.0, -1.0] 8.0", lines  # w - lr * 2; the scale grows after 2000 good steps


def test_import_loads_the_releases_runtime_and_load_policy(venv):
    check_import_and_unscale(venv)


def test_another_cpython_loads_the_same_runtime_and_C(other_python_venv):
    # autocastgen._C is one build for every CPython (Note [one _C for every CPython]): under a second
    # CPython, the wheel's _C.abi3.so of the release is the GradScaler's entry, as under the builder's.
    venv = other_python_venv
    check_import_and_unscale(venv)
    version = _run([venv["python"], "-m", "autocastgen", "--version"], cwd=venv["work"], env=user_env(venv)).stdout
    assert f"_C: {runtime_folder(venv) / '_C.abi3.so'} (CPython {OTHER_PYTHON})" in version, version


def test_statistics_and_report_without_build_tools(venv):
    script = textwrap.dedent("""\
        import torch, autocastgen
        autocastgen.load_policy(autocastgen.shipped_policy("cpu"))
        with autocastgen.stats("run.json"), torch.autocast("cpu", dtype=torch.bfloat16):
            torch.mm(torch.ones(4, 4), torch.ones(4, 4))
        autocastgen.report("run.json", output="run.html")
        """)
    _run([venv["python"], "-c", script], cwd=venv["work"], env=user_env(venv))
    assert "aten::mm" in (venv["work"] / "run.json").read_text()
    assert (venv["work"] / "run.html").stat().st_size > 10_000
    done = _run([venv["script"], "stats", "run.json"], cwd=venv["work"], env=user_env(venv))
    assert "aten::mm" in done.stdout, done.stdout


def test_compile_policy_without_a_compiler_says_what_it_needs(venv):
    script = textwrap.dedent("""\
        import autocastgen
        try:
            autocastgen.compile_policy(autocastgen.shipped_policy("cpu"))
        except Exception as error:
            print(type(error).__name__, "|", str(error))
        """)
    done = _run([venv["python"], "-c", script], cwd=venv["work"], env=user_env(venv))
    kind, _, message = done.stdout.strip().partition(" | ")
    assert kind == "CompileError" and "\n" not in message and "needs a C++ compiler" in message, done.stdout


def test_cmake_dir_and_find_package(venv, tmp_path):
    done = _run([venv["python"], "-m", "autocastgen", "--cmake-dir"], cwd=venv["work"], env=user_env(venv))
    cmake_dir = Path(done.stdout.strip())
    assert (cmake_dir / "autocastgenConfig.cmake").is_file()
    assert venv["package"] in cmake_dir.parents
    # A consumer project finds the package (configure only: building is tests/consumer's business),
    # with the runtime of its torch's release.
    project = tmp_path / "consumer"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(textwrap.dedent("""\
        cmake_minimum_required(VERSION 3.25)
        project(consumer LANGUAGES C CXX)
        find_package(autocastgen CONFIG REQUIRED)
        if(NOT TARGET autocastgen::autocastgen OR NOT TARGET autocastgen::runtime_torch OR NOT COMMAND add_autocast_ops)
          message(FATAL_ERROR "autocastgen's targets are missing")
        endif()
        get_target_property(runtime autocastgen::runtime_torch LOCATION)
        message(STATUS "policies at ${AUTOCASTGEN_POLICY_DIR}")
        message(STATUS "runtime at ${runtime}")
        """))
    configured = _run(["cmake", "-S", project, "-B", tmp_path / "b", f"-DCMAKE_PREFIX_PATH={cmake_dir}",
                       f"-DPython3_EXECUTABLE={venv['python']}"], cwd=venv["work"], env=clean_env())
    assert f"policies at {venv['package']}/share/autocastgen/policies" in configured.stdout, configured.stdout
    assert f"runtime at {runtime_folder(venv)}/libautocastgen_runtime_torch.so" in configured.stdout, configured.stdout


def test_rpaths_are_relative_to_the_package(venv):
    readelf = shutil.which("readelf")
    assert readelf is not None, "readelf is not on PATH (binutils, which the build's linker comes with)"
    cli = _run([readelf, "-d", venv["package"] / "bin" / "autocastgen"], cwd=venv["work"]).stdout
    runtime = _run([readelf, "-d", runtime_folder(venv) / "libautocastgen_runtime_torch.so"], cwd=venv["work"]).stdout
    assert "$ORIGIN" in cli, cli
    assert "$ORIGIN/../../../torch/lib" in runtime, runtime
    for needed in ("libtorch.so", "libtorch_cpu.so", "libc10.so"):
        assert f"[{needed}]" in runtime, (needed, runtime)
    assert str(REPO) not in cli + runtime, "an installed binary points into the build tree"
    # Nothing of the machine that built the wheel: each search path of each binary is the package's own.
    for binary in [venv["package"] / "bin" / "autocastgen", *sorted(runtime_folder(venv).glob("*.so"))]:
        dynamic = _run([readelf, "-d", binary], cwd=venv["work"]).stdout
        for line in dynamic.splitlines():
            if "(RUNPATH)" in line or "(RPATH)" in line:
                paths = line.split("[", 1)[1].rstrip("]").split(":")
                assert all(path.startswith("$ORIGIN") for path in paths), (binary.name, paths)


def test_consumer_example_builds_against_the_installed_package(venv, tmp_path):
    """examples/consumer (add_autocast_ops + the runtime) built and run with the wheel's CMake package."""
    prefix = _run([venv["python"], "-m", "autocastgen", "--cmake-dir"], cwd=venv["work"]).stdout.strip()
    build = tmp_path / "consumer"
    launcher = ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"] if shutil.which("ccache") else []
    _run(["cmake", "-S", REPO / "examples" / "consumer", "-B", build, f"-DCMAKE_PREFIX_PATH={prefix}",
          f"-DPython3_EXECUTABLE={venv['python']}", *launcher], cwd=venv["work"])
    _run(["cmake", "--build", build, "-j2"], cwd=venv["work"], timeout=1200)
    done = _run([build / "consumer_demo"], cwd=venv["work"])
    assert "consumer: ok" in done.stdout, done.stdout
