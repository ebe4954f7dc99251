"""autocastgen's own autocast state from Python (the autocastgen package, build/python/autocastgen).

1. The package: autocast() as context manager and decorator, nesting, restoring on errors,
   refusals that change nothing, worker-thread capture (capture_state, state_guard, with_state).
2. PyTorch's CPU autocast lists (torch.testing._internal.autocast_test_lists.AutocastCPUTestLists,
   the lists of PyTorch's test/test_autocast.py) and the other CPU cases of that file, driven
   through autocastgen.autocast with libautocastgen_torch_cpu_own_state.so loaded: dtypes as
   PyTorch's lists expect, values bit for bit those of the op run on inputs cast by hand.
3. With AUTOCASTGEN_TORCH_TEST_AUTOCAST=<a copy of PyTorch's test/test_autocast.py>, that file
   itself, through the own_state_torch_autocast plugin (skipped otherwise).

ctest sets AUTOCASTGEN_BUILD_DIR; run by hand, build/ is used.
"""

from __future__ import annotations

import collections.abc
import concurrent.futures
import os
import pickle
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from built_tree import require_built

ROOT = Path(__file__).resolve().parents[3]
BUILD = Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", ROOT / "build"))
OWN_STATE_LIB = BUILD / "lib" / "libautocastgen_torch_cpu_own_state.so"
require_built(BUILD, "python/autocastgen/__init__.py", OWN_STATE_LIB)

import autocastgen  # noqa: E402
from exact import assert_exact  # noqa: E402

torch.ops.load_library(str(OWN_STATE_LIB))


@pytest.fixture(autouse=True)
def _no_scope_left_open():
    yield
    assert torch.ops.autocastgen.autocast_depth() == 0, "a test left an autocastgen scope open"
    assert not autocastgen.is_enabled("cpu")


def mm_dtype() -> torch.dtype:
    return torch.mm(torch.randn(2, 2), torch.randn(2, 2)).dtype


# --- 1. the package -------------------------------------------------------------------------------


def test_scope_turns_autocast_on_and_restores() -> None:
    assert mm_dtype() == torch.float32
    with autocastgen.autocast("cpu") as scope:
        assert isinstance(scope, autocastgen.autocast)
        assert autocastgen.is_enabled("cpu") and autocastgen.nesting("cpu") == 1
        assert autocastgen.get_dtype("cpu") == torch.bfloat16  # the CPU default
        assert mm_dtype() == torch.bfloat16
        with autocastgen.autocast("cpu", dtype=torch.float16, cache_enabled=False):
            assert mm_dtype() == torch.float16 and not autocastgen.is_cache_enabled("cpu")
            with autocastgen.autocast("cpu", enabled=False):
                assert mm_dtype() == torch.float32 and autocastgen.nesting("cpu") == 3
            with autocastgen.autocast("cpu"):
                assert autocastgen.get_dtype("cpu") == torch.float16, "an inner scope keeps the outer dtype"
        assert autocastgen.get_dtype("cpu") == torch.bfloat16 and autocastgen.is_cache_enabled("cpu")
    assert mm_dtype() == torch.float32 and autocastgen.nesting("cpu") == 0


def test_torch_autocast_alone_moves_nothing() -> None:
    """The own-state library reads autocastgen's state only (docs/runtime.md)."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert mm_dtype() == torch.float32


def test_decorator_opens_a_scope_per_call() -> None:
    @autocastgen.autocast("cpu", dtype=torch.float16)
    def run() -> tuple[torch.dtype, int]:
        return mm_dtype(), autocastgen.nesting("cpu")

    assert run() == (torch.float16, 1)
    assert run.__name__ == "run"
    with autocastgen.autocast("cpu"):
        assert run() == (torch.float16, 2)
    with pytest.raises(TypeError, match="needs a callable"):
        autocastgen.autocast("cpu")(torch.ones(1))


def test_state_comes_back_after_an_exception() -> None:
    with pytest.raises(ValueError):
        with autocastgen.autocast("cpu"):
            raise ValueError("inside")
    assert not autocastgen.is_enabled("cpu")


def test_refusals_change_nothing() -> None:
    with pytest.raises(RuntimeError, match="must be bfloat16 or float16"):
        autocastgen.autocast("cpu", dtype=torch.float32).__enter__()
    with pytest.raises(RuntimeError, match="not a real device|device type"):
        autocastgen.autocast("not a real device").__enter__()
    with pytest.raises(TypeError, match="must be a str"):
        autocastgen.autocast(torch.device("cpu"))  # type: ignore[arg-type]
    assert torch.ops.autocastgen.autocast_depth() == 0
    # Disabled, any dtype goes, as with torch.autocast.
    with autocastgen.autocast("cpu", dtype=torch.float32, enabled=False):
        assert mm_dtype() == torch.float32


def test_scopes_close_innermost_first() -> None:
    outer, inner = autocastgen.autocast("cpu"), autocastgen.autocast("cpu", dtype=torch.float16)
    outer.__enter__()
    inner.__enter__()
    with pytest.raises(RuntimeError, match="innermost first"):
        outer.__exit__(None, None, None)
    assert autocastgen.get_dtype("cpu") == torch.float16, "a refused exit changes nothing"
    inner.__exit__(None, None, None)
    outer.__exit__(None, None, None)


def test_threads_start_with_their_own_state() -> None:
    seen: list[torch.dtype] = []
    with autocastgen.autocast("cpu", dtype=torch.float16):
        worker = threading.Thread(target=lambda: seen.append(mm_dtype()))
        worker.start()
        worker.join()
    assert seen == [torch.float32]


def test_captured_state_in_a_worker_thread() -> None:
    seen: list[Any] = []

    def work() -> None:
        seen.append((mm_dtype(), autocastgen.nesting("cpu")))

    with autocastgen.autocast("cpu", dtype=torch.float16):
        state = autocastgen.capture_state()
        worker = threading.Thread(target=autocastgen.state_guard(state)(work))
        worker.start()
        worker.join()
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            pool.submit(autocastgen.with_state(work)).result()
    assert seen == [(torch.float16, 1), (torch.float16, 1)]

    # Installed on a thread with a state of its own: exactly the captured one, then its own again.
    with autocastgen.autocast("cpu", dtype=torch.bfloat16, enabled=False):
        with autocastgen.state_guard(state) as installed:
            assert installed is state and mm_dtype() == torch.float16
        assert mm_dtype() == torch.float32 and autocastgen.nesting("cpu") == 1
    assert pickle.loads(pickle.dumps(state)) == state


def test_a_state_that_was_not_captured_is_refused() -> None:
    with pytest.raises(RuntimeError, match="not an autocast state captured by this build"):
        autocastgen.state_guard(autocastgen.AutocastState((1, 2, 3))).__enter__()
    with pytest.raises(TypeError, match="needs an AutocastState"):
        autocastgen.state_guard((1, 2, 3))  # type: ignore[arg-type]


# --- 2. PyTorch's CPU autocast cases through autocastgen.autocast ----------------------------------


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, (str, bytes)):
        return value
    if isinstance(value, collections.abc.Iterable):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _run(op: str, args: tuple, run_as: torch.dtype, amp_dtype: torch.dtype, module: Any = torch,
         out_type: torch.dtype | None = None, kwargs: dict | None = None) -> None:
    """PyTorch's _run_autocast_outofplace, with autocastgen.autocast in place of torch.autocast."""
    kwargs = kwargs or {}
    out_type = out_type or run_as
    outputs = []
    with autocastgen.autocast("cpu", dtype=amp_dtype):
        assert autocastgen.is_enabled("cpu")
        if module is not None and hasattr(module, op):
            outputs.append(getattr(module, op)(*args, **kwargs))
        if hasattr(torch.Tensor, op):
            outputs.append(getattr(args[0], op)(*args[1:], **kwargs))
        assert outputs, f"{op} not found"
        for output in outputs:
            if isinstance(output, torch.Tensor):
                assert output.dtype == out_type, f"{op} under {amp_dtype} produced {output.dtype}, not {out_type}"
        if len(outputs) == 2:
            assert_exact(outputs[0], outputs[1], f"torch.{op} and Tensor.{op} differ")
        with autocastgen.autocast("cpu", enabled=False):
            assert not autocastgen.is_enabled("cpu")
            if module is not None and hasattr(module, op):
                control = getattr(module, op)(*_cast(args, run_as), **kwargs)
            else:
                control = getattr(args[0].to(run_as), op)(*_cast(args[1:], run_as), **kwargs)
        assert_exact(outputs[0], control, f"{op} under {amp_dtype} differs from the control")


def _lists():
    from torch.testing._internal.autocast_test_lists import AutocastCPUTestLists

    return AutocastCPUTestLists(torch.device("cpu"))


def _with_kwargs(entry: tuple) -> tuple[str, tuple, dict]:
    return (entry[0], entry[1], entry[2]) if len(entry) == 3 else (entry[0], entry[1], {})


def test_cpu_lists_builtin_promote() -> None:
    lists = _lists()
    for module, entries in ((torch, lists.torch_expect_builtin_promote), (None, lists.methods_expect_builtin_promote)):
        for op, args_bf16, args_fp16, out_type in entries:
            _run(op, args_bf16, torch.float32, torch.bfloat16, module, out_type)
            _run(op, args_fp16, torch.float32, torch.float16, module, out_type)


@pytest.mark.parametrize("amp_dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_cpu_lists_lower_precision(amp_dtype: torch.dtype) -> None:
    lists = _lists()
    for module, entries in ((torch, lists.torch_16), (torch._C._nn, lists.nn_16)):
        for entry in entries:
            op, args, kwargs = _with_kwargs(entry)
            _run(op, args, amp_dtype, amp_dtype, module, kwargs=kwargs)


@pytest.mark.parametrize("amp_dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_cpu_lists_fp32(amp_dtype: torch.dtype) -> None:
    lists = _lists()
    for module, entries in ((torch, lists.torch_fp32), (torch._C._nn, lists.nn_fp32)):
        for entry in entries:
            op, args, kwargs = _with_kwargs(entry)
            _run(op, args, torch.float32, amp_dtype, module, kwargs=kwargs)


def test_cpu_lists_promote() -> None:
    for op, args_bf16, args_fp16 in _lists().torch_need_autocast_promote:
        _run(op, args_bf16, torch.float32, torch.bfloat16)
        _run(op, args_fp16, torch.float32, torch.float16)


def test_bfloat16_lstm_runs_under_autocast() -> None:
    if not (torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()):
        pytest.skip("no mkldnn bfloat16 on this machine")
    x, hx, cx = torch.randn(1, 2, 1), torch.randn(2, 2, 1), torch.randn(2, 2, 1)
    lstm = torch.nn.LSTM(1, 1, 2).to(torch.bfloat16)
    # The message changed across releases (2.7: "input must have the type ...").
    with pytest.raises(ValueError, match=r"RNN input dtype .* does not match weight dtype|input must have the type"):
        lstm(x, (hx, cx))
    with autocastgen.autocast("cpu"):
        lstm(x, (hx, cx))


@pytest.mark.parametrize("amp_dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_grad_contexts_inside_a_scope(amp_dtype: torch.dtype) -> None:
    """no_grad, inference_mode and repeated calls inside a scope (pytorch #158232 and its kin)."""
    model = torch.nn.Linear(2, 2)
    inp = torch.randn(8, 2)
    with autocastgen.autocast("cpu", dtype=amp_dtype):
        with torch.no_grad():
            assert not model(inp).requires_grad
        out = model(inp)
        assert out.requires_grad and out.grad_fn is not None and out.dtype == amp_dtype
        with torch.inference_mode():
            inferred = model(inp)
            assert not inferred.requires_grad and inferred.dtype == amp_dtype
        outs = [model(inp) for _ in range(3)]
        (out.mean() + sum(o.mean() for o in outs)).backward()
    assert model.weight.grad is not None and model.bias.grad is not None
    with torch.inference_mode():
        with autocastgen.autocast("cpu", dtype=amp_dtype):
            assert model(inp).dtype == amp_dtype


# --- 3. PyTorch's own test file, when a copy is given ---------------------------------------------


def test_pytorchs_test_autocast_file() -> None:
    path = os.environ.get("AUTOCASTGEN_TORCH_TEST_AUTOCAST")
    if not path:
        pytest.skip("set AUTOCASTGEN_TORCH_TEST_AUTOCAST to a copy of PyTorch's test/test_autocast.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(BUILD / "python"), str(Path(__file__).resolve().parents[1])]),
               AUTOCASTGEN_OWN_STATE_LIB=str(OWN_STATE_LIB))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                           "own_state_torch_autocast", path], env=env, capture_output=True, text=True, timeout=900)
    print(done.stdout[-2000:])
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
