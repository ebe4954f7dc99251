"""Which GEMMs of an fp8 list run in fp8: the recipe's ``select:`` (docs/fp8.md, "Where fp8 pays";
Note [fp8 selection] in runtime/torch/fp8/select.cpp). The measured decisions, the auto rule, and the
op through which every rank of a process group takes the same measured decision."""

from __future__ import annotations

from typing import Any

import torch

from .._core.runtime import load_runtime


def _agree(times: torch.Tensor) -> torch.Tensor:
    # Both times summed over the default group's ranks: every rank compares the same two sums.
    out = times.clone()
    distributed = torch.distributed
    if distributed.is_available() and distributed.is_initialized():
        distributed.all_reduce(out)
    return out


def _agree_fake(times: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(times)


def _define() -> torch.library.Library:
    library = torch.library.Library("autocastgen", "FRAGMENT")
    library.define("fp8_select_agree(Tensor times) -> Tensor")
    library.impl("fp8_select_agree", _agree, "CompositeExplicitAutograd")
    torch.library.register_fake("autocastgen::fp8_select_agree", _agree_fake, lib=library)
    return library


# Kept for the life of the module (dropping the library unregisters the op); a reload keeps it.
_library = globals().get("_library") or _define()


def fp8_selections() -> list[dict[str, Any]]:
    """This process's measured fp8 decisions (``select: measured``), in the order they were made:
    ``{"device", "granularity", "dtype", "m", "k", "n", "backward", "fp8_ms", "lower_ms", "fp8",
    "source"}`` per shape class (``m`` rounded up to a power of two; times in ms per forward and
    backward, summed over the ranks of the default process group when one is up; ``source`` is
    ``"measured"`` or ``"file"``)."""
    load_runtime()
    rows = []
    for line in torch.ops.autocastgen.fp8_selection_table().splitlines():
        key, fp8_ms, lower_ms, choice, source = line.split("\t")
        device, granularity, dtype, m, k, n, direction = key.split("|")
        rows.append({"device": device, "granularity": granularity, "dtype": dtype, "m": int(m[1:]),
                     "k": int(k[1:]), "n": int(n[1:]), "backward": direction == "backward",
                     "fp8_ms": float(fp8_ms), "lower_ms": float(lower_ms), "fp8": choice == "fp8",
                     "source": source})
    return rows


def forget_fp8_selections(file: bool = False) -> None:
    """Forgets this process's measured decisions; with ``file=True`` also deletes the cache files
    they were read from or written to, so the next GEMMs are measured again. Compiled graphs hold
    the decisions they were traced with: every compiled function traces again at its next call."""
    load_runtime()
    torch.ops.autocastgen.fp8_forget_selections(file)


def fp8_selection_file(device: str | torch.device = "cuda") -> str:
    """The file that keeps a device's measured decisions (per device and PyTorch release):
    ``$AUTOCASTGEN_FP8_SELECT_CACHE``, else ``~/.cache/autocastgen/fp8-select``."""
    load_runtime()
    file: str = torch.ops.autocastgen.fp8_selection_file(torch.device(device))
    return file


def fp8_auto_rule(device: str | torch.device, m: int, k: int, n: int, granularity: str = "tensorwise",
                  backward: bool = True) -> tuple[bool, str]:
    """``select: auto``'s decision for a GEMM [m, k] x [k, n] on a device class: (fp8?, reason)."""
    load_runtime()
    return tuple(torch.ops.autocastgen.fp8_auto_rule(torch.device(device), granularity, m, k, n, backward))
