"""Timing helpers shared by the GPU benchmarks: per-call medians (CUDA events on a GPU, the host
clock on the CPU, where the scripts run only as a quick try with --device cpu --small)."""
from __future__ import annotations

import statistics
import time

import torch


def synchronize(device):
    if device == "cuda":
        torch.cuda.synchronize()


def device_ms(fn, device="cuda", warmup=3, iters=10):
    """Median time of one call of fn in milliseconds: on a GPU from CUDA events around each call."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(iters):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def wall_us(fn, device="cuda", warmup=20, iters=200, repeats=5):
    """Median over `repeats` of the host wall time per call in microseconds, `iters` calls back to
    back and then one synchronize (what an eager training loop sees when the GPU keeps up)."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        synchronize(device)
        samples.append((time.perf_counter() - t0) / iters * 1e6)
    return statistics.median(samples)


def device_name(device):
    return torch.cuda.get_device_name() if device == "cuda" else "cpu"


def add_device_argument(parser):
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                        help="cuda (the measurement); cpu only to try the script with --small")
