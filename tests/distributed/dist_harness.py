"""Runs a function on two ranks (spawned processes, gloo over 127.0.0.1) within a deadline.

The parent hosts the TCPStore on a socket it bound to a kernel-chosen loopback port, so no port is
raced for and nothing listens beyond 127.0.0.1; a rank that raises fails the test with its
traceback; a rank still running at the deadline is killed and the test fails saying so.
"""

from __future__ import annotations

import gc
import os
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", ROOT / "build"))


def setup_package_path() -> None:
    """The build tree's package first on sys.path (ctest sets AUTOCASTGEN_BUILD_DIR), and the tests'
    shared support modules (tests/python: exact.py); spawned ranks inherit the path."""
    if not (BUILD / "python" / "autocastgen" / "distributed" / "__init__.py").is_file():
        if "AUTOCASTGEN_BUILD_DIR" in os.environ:
            raise RuntimeError(f"{BUILD} has no python/autocastgen/distributed: build the autocastgen_python target")
        pytest.skip(f"{BUILD} is not built", allow_module_level=True)
    if str(BUILD / "python") not in sys.path:
        sys.path.insert(0, str(BUILD / "python"))
    if str(ROOT / "tests" / "python") not in sys.path:
        sys.path.append(str(ROOT / "tests" / "python"))
    os.environ.setdefault("AUTOCASTGEN_RUNTIME_TORCH_LIB", str(BUILD / "lib" / "libautocastgen_runtime_torch.so"))
    if not torch.distributed.is_available():
        pytest.skip("this torch has no torch.distributed", allow_module_level=True)
    # Verified with PyTorch 2.15 only (docs/distributed.md): FSDP2's public fully_shard and DTensor's
    # handler table differ in older releases, which the rotation's builds skip.
    if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 15):
        pytest.skip(f"the distributed tests are verified with PyTorch >= 2.15, not {torch.__version__}",
                    allow_module_level=True)


def init_rank(rank: int, world: int, port: int) -> None:
    """Joins the parent's store and makes the default gloo group on loopback."""
    import torch.distributed as dist

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(world)  # as torchrun sets them
    torch.set_num_threads(1)  # two ranks on a two-core machine
    store = dist.TCPStore("127.0.0.1", port, world, is_master=False, timeout=timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=60))


def _entry(rank: int, fn, world: int, port: int, args: tuple) -> None:
    import torch.distributed as dist

    init_rank(rank, world, port)
    try:
        fn(rank, world, *args)
        # Models in reference cycles (DDP, FSDP2) hold the group and tensors that gloo's threads
        # release; left to the interpreter's exit, a gloo thread took the GIL while Python was
        # finalizing and the rank died of std::terminate ("terminate called without an active
        # exception", about 1 run in 6 of test_dist_scaler). Collected here, before the group ends.
        gc.collect()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_ranks(fn, *args, world: int = 2, timeout: float = 90.0) -> None:
    """Runs ``fn(rank, world, *args)`` on ``world`` spawned ranks; ``fn`` must be a module-level function."""
    import torch.distributed as dist
    import torch.multiprocessing as mp

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    # The store takes the socket over (it closes it); the classic store takes a listening fd in
    # every release, libuv's only from 2.8.
    store = dist.TCPStore(  # noqa: F841 - served while the ranks run
        "127.0.0.1", port, world, is_master=True, wait_for_workers=False,
        timeout=timedelta(seconds=60), master_listen_fd=listener.detach(), use_libuv=False,
    )
    context = mp.start_processes(_entry, args=(fn, world, port, args), nprocs=world, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout
    try:
        while not context.join(timeout=max(0.1, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"ranks still running after {timeout:.0f} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
