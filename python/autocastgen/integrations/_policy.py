"""A policy in force for a framework's training run: loaded once in each process that trains, the
model attached where the policy scopes rules to modules (Note [a policy per process]).

Note [a policy per process]
``load_policy`` registers kernels in the process that calls it, and frameworks train in processes of
their own: Lightning's ``ddp_spawn`` unpickles the plugin in each child, ``accelerate launch`` and
``torchrun`` start the script once per rank. So an integration loads its policy at the first hook
that runs in the training process (and again in a process that unpickled it), never in its
constructor alone; pickling drops what belongs to one process (the loaded mark, the attachment).
The model is attached, for the policy's ``modules:`` rules and for statistics by module, before the
framework wraps it (DDP), so that paths are ``named_modules()``'s of the user's model. A loaded
policy stays loaded after the run, as ``load_policy``'s does: ``clear_runtime_policies()`` would drop
the user's other policies too.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from ..advisor import base_autocast
from ..places import Attachment, attach, registered_patterns
from ..policy import load_policy

__all__ = ["PolicyRun"]

Source = str | os.PathLike[str] | None


def _source(policy: Source) -> str | None:
    """A path made absolute (a framework may change the working folder, a child process starts
    elsewhere), or YAML text as ``load_policy`` takes it (a ``str`` with a line break)."""
    if policy is None:
        return None
    if isinstance(policy, str) and "\n" in policy:
        return policy
    return os.path.abspath(os.fspath(policy))


class PolicyRun:
    """``policy`` (a path, YAML text, or None: the policies loaded already) for one training run."""

    def __init__(self, policy: Source, attach_model: bool | None) -> None:
        self.source = _source(policy)
        self.attach_model = attach_model
        self._loaded_in: int | None = None
        self.attachment: Attachment | None = None

    @property
    def is_file(self) -> bool:
        return self.source is not None and "\n" not in self.source

    def load(self) -> None:
        """Loads the policy unless this process has (a PolicyError names the file's errors)."""
        if self._loaded_in == os.getpid():
            return
        if self.source is not None:
            load_policy(self.source)
        self._loaded_in = os.getpid()

    def device(self) -> str | None:
        """The device of a policy file's ``autocast:`` (through ``extends:``), once loaded; None for text."""
        self.load()
        return base_autocast(self.source)[0] if self.is_file and self.source is not None else None

    def check_device(self, device: str, who: str) -> None:
        """A ValueError when a policy file is for another device than the one autocast runs on."""
        policy_device = self.device()
        if policy_device is not None and policy_device != torch.device(device).type:
            raise ValueError(f"{who}: the policy {self.source} is for {policy_device}, but autocast runs on "
                             f"{torch.device(device).type}: pass the policy's device, or a policy for {device}")

    def start(self, model: torch.nn.Module) -> None:
        """Loads the policy and attaches ``model`` when asked, or (``attach_model`` None) when rules
        loaded now scope to modules."""
        self.load()
        wanted = bool(registered_patterns()) if self.attach_model is None else self.attach_model
        if wanted and (self.attachment is None or self.attachment.model is not model):
            self.stop()
            self.attachment = attach(model)

    def stop(self) -> None:
        """Removes the attachment (the policy stays loaded)."""
        if self.attachment is not None:
            self.attachment.remove()
            self.attachment = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_loaded_in"], state["attachment"] = None, None
        return state
