"""The pip package: `pip install --no-build-isolation <clone>` into a fresh venv, used from outside the clone."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
from pipvenv import REPO
from pipvenv import run as _run


def test_installed_layout(venv):
    package = venv["package"]
    for relative in ("__init__.py", "__main__.py", "_build_info.py", "compile.py", "_build_library.py", "py.typed",
                     "bin/autocastgen",
                     "lib/libautocastgen_runtime_torch.so", "lib/libautocastgen_kernels.a",
                     "lib/cmake/autocastgen/autocastgenConfig.cmake", "lib/cmake/autocastgen/AutocastgenOps.cmake",
                     "share/autocastgen/policies/cpu.yaml", "share/autocastgen/policies/cuda.yaml",
                     "share/autocastgen/templates", "include/autocastgen"):
        assert (package / relative).exists(), f"{relative} missing from {package}"
    assert len(list(package.glob("_C.*.so"))) == 1, "autocastgen._C (Note [unscale from Python]) missing"
    assert REPO not in package.parents, package


def test_console_script_help(venv):
    done = _run([venv["script"], "--help"], cwd=venv["work"])
    assert "check" in done.stdout and "generate" in done.stdout, done.stdout


def test_module_runs_check_on_installed_policy(venv):
    policy = venv["package"] / "share" / "autocastgen" / "policies" / "cpu.yaml"
    done = _run([venv["python"], "-m", "autocastgen", "check", "--policy", policy], cwd=venv["work"])
    assert done.returncode == 0


def test_shipped_policy_and_import_refusal(venv):
    # The shipped policies by name (what docs use in place of a build tree's generated library), and
    # `import`, which the pip package leaves out, says what to do instead in one line.
    done = _run([venv["python"], "-c", "import autocastgen; print(autocastgen.shipped_policy('cpu'))"],
                cwd=venv["work"])
    assert Path(done.stdout.strip()) == venv["package"] / "share" / "autocastgen" / "policies" / "cpu.yaml"
    (venv["work"] / "x.cpp").write_text("")
    refused = _run([venv["script"], "import", "x.cpp"], cwd=venv["work"], check=False)
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1 and "which the pip package leaves out" in refused.stderr, refused.stderr


def test_script_and_module_agree_on_errors(venv):
    bad = venv["work"] / "bad.yaml"
    bad.write_text("autocast: {device: cpu}\nlists:\n  fp32: [aten::no_such_op_anywhere]\n")
    by_script = _run([venv["script"], "check", "--policy", bad], cwd=venv["work"], check=False)
    by_module = _run([venv["python"], "-m", "autocastgen", "check", "--policy", bad], cwd=venv["work"], check=False)
    assert by_script.returncode != 0
    assert (by_script.returncode, by_script.stdout, by_script.stderr) == \
        (by_module.returncode, by_module.stdout, by_module.stderr)
    assert "bad.yaml:3:" in by_script.stderr, by_script.stderr


def test_cmake_dir_and_find_package(venv, tmp_path):
    done = _run([venv["python"], "-m", "autocastgen", "--cmake-dir"], cwd=venv["work"])
    cmake_dir = Path(done.stdout.strip())
    assert (cmake_dir / "autocastgenConfig.cmake").is_file()
    assert venv["package"] in cmake_dir.parents
    # A consumer project finds the package (configure only: building is tests/consumer's business).
    project = tmp_path / "consumer"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(textwrap.dedent("""\
        cmake_minimum_required(VERSION 3.25)
        project(consumer LANGUAGES C CXX)
        find_package(autocastgen CONFIG REQUIRED)
        if(NOT TARGET autocastgen::autocastgen OR NOT TARGET autocastgen::runtime_torch OR NOT COMMAND add_autocast_ops)
          message(FATAL_ERROR "autocastgen's targets are missing")
        endif()
        message(STATUS "policies at ${AUTOCASTGEN_POLICY_DIR}")
        """))
    prefix = _run([venv["python"], "-m", "autocastgen", "--cmake-dir"], cwd=venv["work"]).stdout.strip()
    configured = _run(["cmake", "-S", project, "-B", tmp_path / "b", f"-DCMAKE_PREFIX_PATH={prefix}",
                       f"-DPython3_EXECUTABLE={venv['python']}"], cwd=venv["work"])
    assert f"policies at {venv['package']}/share/autocastgen/policies" in configured.stdout, configured.stdout


def test_import_loads_installed_runtime_and_load_policy(venv):
    script = textwrap.dedent("""\
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
        """)
    done = _run([venv["python"], "-c", script], cwd=venv["work"])
    lines = done.stdout.splitlines()
    assert Path(lines[0]) == venv["package"] / "lib" / "libautocastgen_runtime_torch.so", lines
    assert lines[1] == "1 torch.bfloat16", lines
    assert lines[2].startswith("error: t.yaml:3:"), lines
    assert lines[3] == "True [2.0, 2.0] 1.0", lines


def test_rpaths_are_relative_to_the_package(venv):
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf not installed")
    cli = _run([readelf, "-d", venv["package"] / "bin" / "autocastgen"], cwd=venv["work"]).stdout
    runtime_lib = venv["package"] / "lib" / "libautocastgen_runtime_torch.so"
    runtime = _run([readelf, "-d", runtime_lib], cwd=venv["work"]).stdout
    assert "$ORIGIN/../lib" in cli, cli
    assert ":$ORIGIN:$ORIGIN/../../torch/lib]" in runtime or "[$ORIGIN:$ORIGIN/../../torch/lib" in runtime, runtime
    assert str(REPO) not in cli + runtime, "an installed binary points into the build tree"


def test_consumer_example_builds_against_the_installed_package(venv, tmp_path):
    """examples/consumer (add_autocast_ops + the runtime) built and run with the pip package's CMake package."""
    prefix = _run([venv["python"], "-m", "autocastgen", "--cmake-dir"], cwd=venv["work"]).stdout.strip()
    build = tmp_path / "consumer"
    launcher = ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"] if shutil.which("ccache") else []
    _run(["cmake", "-S", REPO / "examples" / "consumer", "-B", build, f"-DCMAKE_PREFIX_PATH={prefix}",
          f"-DPython3_EXECUTABLE={venv['python']}", *launcher], cwd=venv["work"])
    _run(["cmake", "--build", build, "-j2"], cwd=venv["work"], timeout=1200)
    done = _run([build / "consumer_demo"], cwd=venv["work"])
    assert "consumer: ok" in done.stdout, done.stdout
