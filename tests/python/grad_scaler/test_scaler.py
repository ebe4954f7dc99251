"""torch.ops.autocastgen scaler ops against PyTorch's own ops and torch.amp.GradScaler (pytest or unittest)."""
import glob
import math
import os
import sys
import unittest
from unittest import mock

import torch

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
# The shared support modules (exact.py): tests/python/conftest.py puts them on sys.path under pytest.
if os.path.join(_REPO, "tests", "python") not in sys.path:
    sys.path.append(os.path.join(_REPO, "tests", "python"))
from exact import assert_exact, exact  # noqa: E402


def _library_path():
    # ctest passes the built library; by hand, the newest build-*/lib copy is used.
    path = os.environ.get("AUTOCASTGEN_RUNTIME_TORCH_LIB")
    if path:
        return path
    found = glob.glob(os.path.join(_REPO, "build*", "lib", "libautocastgen_runtime_torch.so"))
    return max(found, key=os.path.getmtime) if found else None


def setUpModule():
    path = _library_path()
    if path is None:
        raise unittest.SkipTest("libautocastgen_runtime_torch.so is not built (set AUTOCASTGEN_RUNTIME_TORCH_LIB)")
    torch.ops.load_library(path)
    cuda_part = os.path.join(os.path.dirname(path), "libautocastgen_runtime_torch_cuda.so")
    if torch.version.cuda and os.path.exists(cuda_part):  # the CUDA kernels (Note [the CUDA part of the runtime])
        torch.ops.load_library(cuda_part)


def _one_nan(t):
    """`t` with every NaN the same NaN: the unscale checks compare a NaN as NaN, not its payload."""
    return torch.where(t.isnan(), math.nan, t)


def _grads(gen, dtype, sizes, device="cpu"):
    out = []
    for n in sizes:
        mant = torch.rand(n, generator=gen, dtype=torch.float64) * 2 - 1
        exp = torch.randint(-20, 16, (n,), generator=gen).to(torch.float64)
        out.append((mant * torch.pow(2.0, exp)).to(dtype).to(device))
    return out


class OpsMatchPyTorch(unittest.TestCase):
    def check_unscale(self, grads, inv, device="cpu"):
        ours = [g.clone() for g in grads]
        theirs = [g.clone() for g in grads]
        f_ours = torch.zeros((), device=device)
        f_theirs = torch.zeros((), device=device)
        inv_t = torch.full((), inv, device=device)
        torch.ops.autocastgen.non_finite_check_and_unscale_(ours, f_ours, inv_t)
        torch._amp_foreach_non_finite_check_and_unscale_(theirs, f_theirs, inv_t)
        assert_exact(f_ours, f_theirs)
        assert_exact([_one_nan(t) for t in ours], [_one_nan(t) for t in theirs])

    def test_unscale_random_lists_every_dtype(self):
        gen = torch.Generator().manual_seed(0)
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
            sizes = torch.randint(0, 5000, (20,), generator=gen).tolist()
            for inv in (2.0**-16, 1 / 3, 1.0):
                grads = _grads(gen, dtype, sizes)
                self.check_unscale(grads, inv)
                grads[3].view(-1)[-1] = math.inf if grads[3].numel() else 0
                grads[7].view(-1)[0:1] = math.nan
                self.check_unscale(grads, inv)

    def test_float64_outside_the_float_range_is_finite(self):
        # Pinned on purpose: a double gradient that float cannot hold (1e39, 1e300) is finite, so it
        # sets no found_inf, in PyTorch's CPU op (checked here) and in ours on CPU and CUDA (the
        # element logic is shared: kernels/common). Only inf and NaN are non-finite.
        for inv in (1.0, 0.5, 2.0**-16):
            for value in (1e39, -1e39, 1e300, 3.4028235677973366e38, 1e-320):
                grads = [torch.tensor([value, 1.0], dtype=torch.float64), torch.ones(3, dtype=torch.float64)]
                self.check_unscale(grads, inv)
                found = torch.zeros(())
                torch.ops.autocastgen.non_finite_check_and_unscale_(grads, found, torch.full((), inv))
                self.assertEqual(found.item(), 0.0, (value, inv))
        grads = [torch.tensor([1e39, math.inf], dtype=torch.float64)]
        self.check_unscale(grads, 0.5)

    def test_unscale_strided_and_empty(self):
        base = torch.randn(8, 9)
        self.check_unscale([base[:, ::2], base.t(), torch.empty(0)], 0.25)
        f = torch.zeros(())
        torch.ops.autocastgen.non_finite_check_and_unscale_([], f, torch.ones(()))
        self.assertEqual(f.item(), 0.0)

    def test_update_scale_matches_over_many_steps(self):
        gen = torch.Generator().manual_seed(1)
        ours = (torch.full((), 65536.0), torch.zeros((), dtype=torch.int32))
        theirs = (torch.full((), 65536.0), torch.zeros((), dtype=torch.int32))
        for _ in range(3000):
            found = (torch.rand((), generator=gen) < 0.15).float()
            torch.ops.autocastgen.update_scale_(*ours, found, 1.1, 0.7, 4)
            torch._amp_update_scale_(*theirs, found, 1.1, 0.7, 4)
            assert_exact(ours, theirs)

    def test_errors_name_the_op_and_the_argument(self):
        with self.assertRaisesRegex(RuntimeError, "found_inf must be a 1-element tensor, got 2 elements"):
            torch.ops.autocastgen.non_finite_check_and_unscale_([torch.ones(2)], torch.zeros(2), torch.ones(()))
        with self.assertRaisesRegex(RuntimeError, "hysteresis must be an integer >= 1"):
            torch.ops.autocastgen.update_scale_hysteresis_(
                torch.ones(()), torch.zeros((), dtype=torch.int32), torch.ones((), dtype=torch.int32),
                torch.zeros(()), 2.0, 0.5, 10, 0)

    def test_hysteresis_op_defaults_are_pytorchs_rule(self):
        s, t, h = torch.full((), 8.0), torch.zeros((), dtype=torch.int32), torch.ones((), dtype=torch.int32)
        torch.ops.autocastgen.update_scale_hysteresis_(s, t, h, torch.ones(()), 2.0, 0.5, 10)
        self.assertEqual(s.item(), 4.0)

    def test_autograd_behaviour_is_pytorchs(self):
        # The ops are fallthrough at the Autograd key (Note [autograd fallthrough] in
        # runtime/torch/scaler/scaler_ops.cpp); PyTorch's _amp_ ops behave the same: a leaf that requires
        # grad is accepted, a non-leaf keeps its grad_fn, and no version counter moves.
        inv = torch.full((), 0.5)
        seen = {}
        for name, op in (("ours", torch.ops.autocastgen.non_finite_check_and_unscale_),
                         ("torch", torch._amp_foreach_non_finite_check_and_unscale_)):
            leaf = torch.ones(3, requires_grad=True)
            x = torch.ones(3, requires_grad=True)
            non_leaf = x * 2
            found = torch.zeros(())
            op([leaf, non_leaf], found, inv)
            seen[name] = (leaf._version, non_leaf._version, found._version, type(non_leaf.grad_fn).__name__,
                          leaf.tolist(), non_leaf.tolist())
        self.assertEqual(seen["ours"], seen["torch"])
        scale, tracker = torch.full((), 4.0, requires_grad=True), torch.zeros((), dtype=torch.int32)
        torch.ops.autocastgen.update_scale_(scale, tracker, torch.zeros(()), 2.0, 0.5, 1)
        self.assertEqual(scale.item(), 8.0)

    @unittest.skipUnless(torch.cuda.is_available(), "no CUDA device")
    def test_cuda_matches_pytorch_cuda(self):
        gen = torch.Generator().manual_seed(2)
        for dtype in (torch.float32, torch.float16):
            grads = _grads(gen, dtype, [100000, 3, 0, 70000], "cuda")
            grads[1][2] = math.inf
            self.check_unscale(grads, 1 / 3, "cuda")


class GradScalerParity(unittest.TestCase):
    """torch.amp.GradScaler itself, once with its stock ops and once with ours patched in."""

    def run_loop(self, patched, steps=1500):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**14, growth_interval=20)
        gen = torch.Generator().manual_seed(5)
        trajectory = []
        patches = []
        if patched:
            patches = [
                mock.patch.object(torch, "_amp_foreach_non_finite_check_and_unscale_",
                                  torch.ops.autocastgen.non_finite_check_and_unscale_),
                mock.patch.object(torch, "_amp_update_scale_", torch.ops.autocastgen.update_scale_),
            ]
        for p in patches:
            p.start()
        try:
            for _ in range(steps):
                x = torch.randn(8, 16, generator=gen)
                loss = model(x).pow(2).mean()
                opt.zero_grad()
                scaler.scale(loss).backward()
                if torch.rand((), generator=gen) < 0.05:  # inject an overflow into one gradient
                    model[0].weight.grad[0, 0] = math.inf
                before = [p.detach().clone() for p in model.parameters()]
                scaler.step(opt)
                skipped = exact(before, [p.detach() for p in model.parameters()])
                scaler.update()
                trajectory.append((scaler.get_scale(), scaler._get_growth_tracker(), skipped))
        finally:
            for p in patches:
                p.stop()
        return trajectory, [p.detach().clone() for p in model.parameters()]

    def test_same_trajectory_and_parameters_as_torch_amp(self):
        theirs, params_theirs = self.run_loop(patched=False)
        ours, params_ours = self.run_loop(patched=True)
        self.assertEqual(ours, theirs)
        assert_exact(params_ours, params_theirs)
        self.assertGreater(sum(1 for _, _, skipped in ours if skipped), 20)
        self.assertGreater(len({scale for scale, _, _ in ours}), 3)


if __name__ == "__main__":
    unittest.main()
