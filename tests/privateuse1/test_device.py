"""The mydevice backend itself: registration, memory, copies, views, the CPU fallback, the kernels
PyTorch sends accelerators (convolutions, fused RNN cells), its own op under autocast, GradScaler.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from conftest import MYDEVICE_DIR
from exact import assert_exact

DEV = "mydevice"


@pytest.fixture(autouse=True)
def _device(mydevice_module):
    return mydevice_module


def test_import_registers_the_device() -> None:
    assert torch._C._get_privateuse1_backend_name() == DEV
    assert torch.mydevice.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.get_autocast_dtype(DEV) == torch.float16  # PyTorch's default for PrivateUse1
    assert torch.amp.is_autocast_available(DEV)
    x = torch.ones(2).mydevice()
    assert x.is_mydevice and x.device == torch.device("mydevice:0")


def test_built_from_the_installed_package() -> None:
    """The example was configured with find_package(autocastgen) against the installed tree, and
    the runtime library in this process is the installed one."""
    prefix = Path(os.environ.get("AUTOCASTGEN_INSTALL_PREFIX", MYDEVICE_DIR.parents[1] / "install")).resolve()
    cache = (MYDEVICE_DIR / "CMakeCache.txt").read_text()
    line = next(entry for entry in cache.splitlines() if entry.startswith("autocastgen_DIR:"))
    assert Path(line.split("=", 1)[1]).resolve().is_relative_to(prefix), line
    maps = Path("/proc/self/maps").read_text().splitlines()
    runtimes = {m.split()[-1] for m in maps if m.endswith("libautocastgen_runtime_torch.so")}
    assert runtimes == {str(prefix / "lib" / "libautocastgen_runtime_torch.so")}, runtimes


def test_memory_comes_from_the_device_allocator() -> None:
    before = torch.mydevice.memory_allocated()
    x = torch.empty(1000, dtype=torch.float32, device=DEV)
    assert torch.mydevice.memory_allocated() - before == 4000
    del x
    assert torch.mydevice.memory_allocated() == before


def test_copies_between_host_and_device() -> None:
    cpu = torch.randn(4, 6)
    dev = cpu.to(DEV)
    assert dev.device.type == DEV
    assert_exact(dev.cpu(), cpu)
    assert_exact(cpu.t().to(DEV).cpu(), cpu.t())  # non-contiguous
    assert_exact(dev.to(torch.float16).cpu(), cpu.to(torch.float16))  # with a dtype conversion
    row = torch.randn(1, 6)
    assert_exact(row.expand(4, 6).to(DEV).cpu(), row.expand(4, 6))  # stride 0
    assert_exact(dev.expand(2, 4, 6).cpu(), cpu.expand(2, 4, 6))
    into = torch.zeros(4, 6)
    into.copy_(dev)
    assert_exact(into, cpu)


def test_views_share_memory() -> None:
    base = torch.zeros(3, 4, device=DEV)
    base.view(12)[5] = 1.0
    base.t()[0, 2] = 2.0
    base[2].add_(3.0)
    base.unsqueeze(0).squeeze(0)[0, 0] = 4.0
    expected = torch.zeros(3, 4)
    expected.view(12)[5] = 1.0
    expected.t()[0, 2] = 2.0
    expected[2].add_(3.0)
    expected[0, 0] = 4.0
    assert_exact(base.cpu(), expected)


def test_fallback_runs_in_place_out_and_factory_ops() -> None:
    a, b = torch.randn(5), torch.randn(5)
    da, db = a.to(DEV), b.to(DEV)
    out = torch.empty(0, device=DEV)
    torch.add(da, db, out=out)  # out= with a resize
    assert_exact(out.cpu(), a + b)
    da.mul_(2)
    assert_exact(da.cpu(), a * 2)
    assert_exact(torch.arange(7, device=DEV).cpu(), torch.arange(7))
    assert_exact(torch.full((2, 2), 3.5, device=DEV).cpu(), torch.full((2, 2), 3.5))
    assert torch.zeros(3, device=DEV).device.type == DEV
    values, indices = torch.sort(db)
    assert_exact(values.cpu(), torch.sort(b).values)
    assert indices.device.type == DEV
    assert torch.equal(db, db) and db.sum().item() == pytest.approx(b.sum().item())  # ops run by the fallback


def test_autograd_matches_cpu() -> None:
    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(3, 2, requires_grad=True)
    xd = x.detach().to(DEV).requires_grad_()
    wd = w.detach().to(DEV).requires_grad_()
    (torch.tanh(x @ w).sum() * 2).backward()
    (torch.tanh(xd @ wd).sum() * 2).backward()
    assert xd.grad.device.type == DEV
    assert_exact((xd.grad.cpu(), wd.grad.cpu()), (x.grad, w.grad))


def test_convolution_forward_and_backward_match_cpu() -> None:
    conv = torch.nn.Conv2d(3, 5, 3, padding=1)
    conv_dev = torch.nn.Conv2d(3, 5, 3, padding=1).to(DEV)
    conv_dev.load_state_dict(conv.state_dict())
    x = torch.randn(2, 3, 8, 8)
    out, out_dev = conv(x), conv_dev(x.to(DEV))
    assert_exact(out_dev.cpu(), out)
    out.square().sum().backward()
    out_dev.square().sum().backward()
    for p, p_dev in zip(conv.parameters(), conv_dev.parameters(), strict=True):
        torch.testing.assert_close(p_dev.grad.cpu(), p.grad)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_fused_rnn_cells_forward_and_backward_match_cpu(kind: str) -> None:
    """nn.LSTM / nn.GRU take the fused-cell path on PrivateUse1 (mydevice's _thnn_fused_* kernels)."""
    torch.manual_seed(0)
    rnn = getattr(torch.nn, kind)(4, 6, num_layers=2)
    rnn_dev = getattr(torch.nn, kind)(4, 6, num_layers=2).to(DEV)
    rnn_dev.load_state_dict(rnn.state_dict())
    x = torch.randn(5, 3, 4)
    out, _ = rnn(x)
    out_dev, _ = rnn_dev(x.to(DEV))
    torch.testing.assert_close(out_dev.cpu(), out)
    out.sum().backward()
    out_dev.sum().backward()
    for (name, p), p_dev in zip(rnn.named_parameters(), rnn_dev.parameters(), strict=True):
        torch.testing.assert_close(p_dev.grad.cpu(), p.grad, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_own_op_runs_in_lower_precision_under_autocast(dtype: torch.dtype) -> None:
    x, w, b = torch.randn(4, 8), torch.randn(5, 8), torch.randn(5)
    with torch.autocast(DEV, dtype=dtype):
        y = torch.ops.mydevice.fused_linear_relu(x.to(DEV), w.to(DEV), b.to(DEV))
    assert y.dtype == dtype and y.device.type == DEV
    assert_exact(y.cpu(), torch.relu(torch.nn.functional.linear(x.to(dtype), w.to(dtype), b.to(dtype))))
    # Outside autocast it runs in the inputs' dtype.
    assert torch.ops.mydevice.fused_linear_relu(x.to(DEV), w.to(DEV), b.to(DEV)).dtype == torch.float32


def test_grad_scaler_skips_a_step_with_infinite_gradients() -> None:
    w = torch.nn.Parameter(torch.ones(3, device=DEV))
    optimizer = torch.optim.SGD([w], lr=1.0)
    scaler = torch.amp.GradScaler(DEV, init_scale=4.0)
    with torch.autocast(DEV, dtype=torch.float16):
        loss = (w * torch.tensor([1.0, float("inf"), 1.0], device=DEV)).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    assert_exact(w.detach().cpu(), torch.ones(3), "the step with inf gradients was skipped")
    assert scaler.get_scale() == 2.0
    optimizer.zero_grad()
    with torch.autocast(DEV, dtype=torch.float16):
        loss = (w * 2).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    assert_exact(w.detach().cpu(), torch.full((3,), -1.0), "a finite step is taken, unscaled")
