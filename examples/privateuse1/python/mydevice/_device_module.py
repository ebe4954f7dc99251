"""torch.mydevice: what PyTorch looks up on a PrivateUse1 backend's device module.

torch.autocast reads get_amp_supported_dtype; torch.manual_seed calls _is_in_bad_fork and
manual_seed_all; Tensor.mydevice() and friends call current_device; torch.random.fork_rng and
checkpointing call device_count, get_rng_state and set_rng_state.
"""

from __future__ import annotations

import torch


def is_available() -> bool:
    """mydevice is host memory: always there."""
    return True


def is_initialized() -> bool:
    return True


def _lazy_init() -> None:
    """Nothing to initialise: the library did it when it loaded."""


def device_count() -> int:
    """One device, mydevice:0."""
    return 1


def current_device() -> int:
    return 0


def set_device(device: int | str | torch.device) -> None:
    index = torch.device(device).index if not isinstance(device, int) else device
    if index not in (None, 0):
        raise RuntimeError(f"mydevice: there is one device, mydevice:0, not {device}")


def synchronize(device: int | str | torch.device | None = None) -> None:
    """Kernels run synchronously: nothing to wait for."""


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The lower-precision dtypes torch.autocast("mydevice", dtype=...) accepts."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported() -> bool:
    return True


# Random numbers: the fallback runs random ops with the CPU kernels, which draw from the CPU
# generator, so mydevice's RNG is the CPU's (torch.manual_seed seeds it already).
def _is_in_bad_fork() -> bool:
    return False


def manual_seed(seed: int) -> None:
    torch.manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    """Called by torch.manual_seed, which has seeded the CPU generator mydevice uses."""


def get_rng_state(device: int | str | torch.device = "mydevice") -> torch.Tensor:
    return torch.get_rng_state()


def set_rng_state(new_state: torch.Tensor, device: int | str | torch.device = "mydevice") -> None:
    torch.set_rng_state(new_state)


def memory_allocated(device: int | str | torch.device | None = None) -> int:
    """Bytes the mydevice allocator holds now."""
    return int(torch.ops.mydevice.memory_allocated())
