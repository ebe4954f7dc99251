"""autocastgen.autocast's dtype and enabled flag hold for every op, whoever's kernel runs under the
autocast key (Note [own scopes and PyTorch's state] in runtime/torch/state/state.cpp).

The same checks run in one child process per configuration, since loading a library or a policy
replaces kernels for the whole process: nothing loaded but the package (PyTorch's own kernels
run), a runtime policy, the generated own-state library, the generated `--state torch` library.
Each checks float16 and bfloat16, a nested `enabled=False`, sequences of scopes, a worker thread
with a captured state, and that PyTorch's state reads as documented inside and after the scopes.
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

from built_tree import require_built

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import child_process  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
BUILD = Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", ROOT / "build"))
require_built(BUILD, "python/autocastgen/__init__.py")

CHECKS = textwrap.dedent(
    """
    import threading
    import torch
    import autocastgen

    lin = torch.nn.Linear(8, 8)
    x = torch.randn(4, 8)
    F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32

    def ran_in():
        return lin(x).dtype, torch.mm(x, x.t()).dtype

    def check(got, want, what):
        assert got == want, f"{what}: {got}, expected {want}"

    torch_before = (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"),
                    torch.is_autocast_cache_enabled())
    check(ran_in(), (F32, F32), "outside any scope")
    for dtype in (F16, BF16, F16):  # a sequence of scopes, the default dtype's last
        with autocastgen.autocast("cpu", dtype=dtype):
            check(ran_in(), (dtype, dtype), f"autocast(dtype={dtype})")
            check(torch.is_autocast_enabled("cpu"), True, "PyTorch's autocast inside an enabled scope")
            check(torch.get_autocast_dtype("cpu"), dtype, "PyTorch's dtype inside the scope")
            with autocastgen.autocast("cpu", enabled=False):
                check(ran_in(), (F32, F32), "a nested enabled=False")
                check(torch.is_autocast_enabled("cpu"), False, "PyTorch's autocast inside enabled=False")
                with autocastgen.autocast("cpu", dtype=BF16):
                    check(ran_in(), (BF16, BF16), "enabled again inside enabled=False")
                check(ran_in(), (F32, F32), "back in enabled=False")
            check(ran_in(), (dtype, dtype), "back in the enabled scope")
            with autocastgen.autocast("cpu"):  # an inner scope without a dtype keeps the outer one
                check(ran_in(), (dtype, dtype), "an inner scope without a dtype")
        check(ran_in(), (F32, F32), "after the scope")
        check((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), torch.is_autocast_cache_enabled()),
              torch_before, "PyTorch's state after the scope")
    with autocastgen.autocast("cpu"):
        check(ran_in(), (BF16, BF16), "the device's default dtype")

    # A worker thread: its own state first, then the captured one.
    with autocastgen.autocast("cpu", dtype=F16):
        state = autocastgen.capture_state()
    seen = {}

    def work():
        seen["own"] = ran_in()
        with autocastgen.state_guard(state):
            seen["captured"] = ran_in()
        seen["after"] = ran_in()

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    check(seen, {"own": (F32, F32), "captured": (F16, F16), "after": (F32, F32)}, "a worker thread")

    # Inside torch.autocast, a disabled scope of ours leaves PyTorch's scope on (it still needs the key).
    with torch.autocast("cpu", dtype=BF16):
        with autocastgen.autocast("cpu", enabled=False):
            check(torch.is_autocast_enabled("cpu"), True, "torch.autocast around a disabled scope")
    print("ok")
    """
)


def run(prelude: str = "", env: dict[str, str] | None = None) -> None:
    result = child_process.run_child(BUILD, "", prelude + CHECKS, env)
    assert result.stdout.strip().endswith("ok"), result.stdout + result.stderr


def test_nothing_loaded_pytorchs_kernels_follow_the_scope():
    run()


def test_runtime_policy():
    run(textwrap.dedent(
        """
        import autocastgen
        autocastgen.load_policy('''
        autocast: {device: cpu}
        lists:
          lower_precision_fp: [mm, linear]
        ''')
        """
    ))


def test_generated_own_state_library():
    library = BUILD / "lib" / "libautocastgen_torch_cpu_own_state.so"
    run(f"import torch\ntorch.ops.load_library({str(library)!r})\n")


def test_generated_torch_state_library():
    library = BUILD / "lib" / "libautocastgen_torch_cpu.so"
    run(f"import torch\ntorch.ops.load_library({str(library)!r})\n")
