"""A small regression model trained on mydevice in float32, and under float16 and bfloat16 autocast
(torch.autocast("mydevice") + torch.amp.GradScaler("mydevice")), through the autocast kernels
autocastgen generated for AutocastPrivateUse1.

    PYTHONPATH=build/examples/privateuse1 python3 examples/privateuse1/train.py [--steps N] [--json]

Every run starts from the same weights and sees the same batches. Exits 1 when a run does not
learn, when a mixed-precision run's final loss is more than 25% away from the float32 run's, or
when autocast did not run the model's hidden layers in the lower-precision dtype.
"""

from __future__ import annotations

import argparse
import json
import sys

import mydevice  # noqa: F401 - registers the device
import torch

DEVICE = "mydevice"


class Model(torch.nn.Module):
    """Two hidden layers; the first is the backend's own op, mydevice::fused_linear_relu."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden1 = torch.nn.Linear(16, 64)
        self.hidden2 = torch.nn.Linear(64, 64)
        self.out = torch.nn.Linear(64, 1)
        self.seen_dtypes: set[torch.dtype] = set()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.ops.mydevice.fused_linear_relu(x, self.hidden1.weight, self.hidden1.bias)
        h = torch.relu(self.hidden2(h))
        self.seen_dtypes.add(h.dtype)
        return self.out(h)


def make_data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(1024, 16, generator=generator)
    w = torch.randn(16, 1, generator=generator)
    y = torch.sin(x @ w) + 0.1 * x[:, :1] ** 2
    return x.to(DEVICE), y.to(DEVICE)


def train(dtype: torch.dtype | None, steps: int) -> dict[str, object]:
    """Trains a fresh model; dtype None is plain float32."""
    torch.manual_seed(0)
    model = Model().to(DEVICE)
    x, y = make_data(1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    # The learning rate decays to zero, so the runs end settled and their final losses compare.
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 - step / steps)
    scaler = torch.amp.GradScaler(DEVICE, init_scale=2.0**14, enabled=dtype is not None)
    losses = []
    batch = 128
    for step in range(steps):
        start = (step * batch) % x.shape[0]
        xb, yb = x[start : start + batch], y[start : start + batch]
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(DEVICE, dtype=dtype or torch.float16, enabled=dtype is not None):
            loss = torch.nn.functional.mse_loss(model(xb), yb)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        schedule.step()
        losses.append(loss.item())
    hidden_dtypes = sorted(str(d).removeprefix("torch.") for d in model.seen_dtypes)
    with torch.no_grad():
        final = torch.nn.functional.mse_loss(model(x), y).item()
    on_device = all(p.device.type == DEVICE and p.dtype == torch.float32 for p in model.parameters())
    return {
        "dtype": str(dtype or torch.float32).removeprefix("torch."),
        "first_loss": losses[0],
        "last_loss": sum(losses[-10:]) / min(10, len(losses)),
        "final_full_batch_loss": final,
        "hidden_dtypes": hidden_dtypes,
        "params_fp32_on_device": on_device,
        "scale": scaler.get_scale() if dtype is not None else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()

    runs = [train(dtype, args.steps) for dtype in (None, torch.float16, torch.bfloat16)]
    reference = runs[0]["final_full_batch_loss"]
    problems = []
    for run in runs:
        run["vs_fp32"] = run["final_full_batch_loss"] / reference
        expected_hidden = ["float32"] if run["dtype"] == "float32" else [run["dtype"]]
        if run["hidden_dtypes"] != expected_hidden:
            problems.append(f"{run['dtype']}: hidden activations were {run['hidden_dtypes']}, not {expected_hidden}")
        if not run["params_fp32_on_device"]:
            problems.append(f"{run['dtype']}: parameters left mydevice or float32")
        if not run["final_full_batch_loss"] < 0.5 * run["first_loss"]:
            problems.append(f"{run['dtype']}: did not learn "
                            f"({run['first_loss']:.4f} -> {run['final_full_batch_loss']:.4f})")
        if not 0.8 < run["vs_fp32"] < 1.25:
            problems.append(f"{run['dtype']}: final loss {run['vs_fp32']:.2f}x the float32 run's")

    if args.json:
        print(json.dumps({"runs": runs, "problems": problems}, indent=2))
    else:
        print(f"mydevice: {args.steps} steps of SGD on a 16-64-64-1 MLP (first layer: mydevice::fused_linear_relu)")
        print(f"{'run':<10}{'first loss':>12}{'last 10':>12}{'final':>12}{'vs fp32':>9}  hidden dtype   scale")
        for run in runs:
            scale = "-" if run["scale"] is None else f"{run['scale']:g}"
            print(
                f"{run['dtype']:<10}{run['first_loss']:>12.5f}{run['last_loss']:>12.5f}"
                f"{run['final_full_batch_loss']:>12.5f}{run['vs_fp32']:>9.3f}  "
                f"{','.join(run['hidden_dtypes']):<14} {scale}"
            )
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
