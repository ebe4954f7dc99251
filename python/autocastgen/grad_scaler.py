"""autocastgen.GradScaler: torch.amp.GradScaler's interface on autocastgen's fused scaler ops.

Written from torch.amp.GradScaler's documented behaviour (docs/python.md lists what matches and
what is added); the unscale and the scale update run through ``torch.ops.autocastgen``, so
bfloat16 gradients are unscaled on CUDA too, and the hysteresis and min/max-scale options of the
C++ ``autocastgen::GradScaler`` (docs/scaler.md) are available.
"""

from __future__ import annotations

import enum
import inspect
import math
import warnings
from collections.abc import Iterable
from typing import Any, TypeVar, overload

import torch

from . import distributed
from ._core.runtime import cuda_kernels_missing, load_runtime, python_extension

# None where it was not built (no interpreter headers at build time, python/CMakeLists.txt); the
# wheel's is the one of this torch's release (Note [one runtime per release]).
_C = python_extension()

__all__ = ["GradScaler"]


_told_pytorch_kernels = False


def pytorch_kernels_instead(device: torch.device) -> bool:
    """Whether the scaler ops of ``device`` are PyTorch's, autocastgen's CUDA kernels being unable to run
    there (Note [PyTorch's kernels where ours cannot run] in _core/runtime.py); says why, once a process."""
    global _told_pytorch_kernels
    if device.type != "cuda":
        return False
    why = cuda_kernels_missing(device.index if device.index is not None else torch.cuda.current_device())
    if why is not None and not _told_pytorch_kernels:
        _told_pytorch_kernels = True
        warnings.warn(f"autocastgen.GradScaler: {why}: PyTorch's own scaler kernels run on {device} instead "
                      "(the same results)", stacklevel=3)
    return why is not None


def non_finite_check_and_unscale_(grads: list[torch.Tensor], found_inf: torch.Tensor, inv_scale: torch.Tensor) -> None:
    """``torch.ops.autocastgen.non_finite_check_and_unscale_``, called through ``autocastgen._C`` where
    that is the same call and cheaper (Note [unscale from Python]: eager, no torch function mode, a
    list of plain tensors), or PyTorch's kernel where ours cannot run (pytorch_kernels_instead); the
    runtime library must be loaded."""
    if pytorch_kernels_instead(found_inf.device):
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
        return
    if (
        _C is None
        or torch.compiler.is_compiling()
        or torch._C._is_torch_function_mode_enabled()
        or not _C.non_finite_check_and_unscale_(grads, found_inf, inv_scale)
    ):
        torch.ops.autocastgen.non_finite_check_and_unscale_(grads, found_inf, inv_scale)

T = TypeVar("T")


class _Stage(enum.Enum):
    """Where one optimizer is in the current iteration (between two update() calls)."""

    READY = 0
    UNSCALED = 1
    STEPPED = 2


class _PerDevice:
    """One copy of a tensor per device, made on first use (a list's outputs may span devices)."""

    def __init__(self, master: torch.Tensor) -> None:
        self.master = master
        self.copies: dict[torch.device, torch.Tensor] = {}

    def get(self, device: torch.device) -> torch.Tensor:
        copy = self.copies.get(device)
        if copy is None:
            copy = self.copies[device] = self.master.to(device=device, non_blocking=True)
        return copy


class _MisuseError(RuntimeError, AssertionError):
    """Misuse PyTorch's scaler reports with AssertionError: a RuntimeError here, and still an
    AssertionError, so code written against torch.amp.GradScaler catches it as before."""


class _BadValueError(ValueError, AssertionError):
    """A bad value PyTorch's scaler reports with AssertionError: a ValueError, and an AssertionError."""


def _fresh_state() -> dict[str, Any]:
    return {"stage": _Stage.READY, "found_inf_per_device": {}}


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"autocastgen.GradScaler: {name} must be a number, not {type(value).__name__}")
    return float(value)


def _integer(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"autocastgen.GradScaler: {name} must be an int, not {type(value).__name__}")
    return value


def _check_factors(growth_factor: float, backoff_factor: float, growth_interval: int) -> None:
    if not growth_factor > 1.0:
        raise _BadValueError(f"autocastgen.GradScaler: growth_factor must be > 1.0, got {growth_factor}")
    if not 0.0 < backoff_factor < 1.0:
        raise _BadValueError(f"autocastgen.GradScaler: backoff_factor must be in (0, 1), got {backoff_factor}")
    if growth_interval < 1:
        raise ValueError(f"autocastgen.GradScaler: growth_interval must be >= 1, got {growth_interval}")


def _check_extras(hysteresis: int, min_scale: float, max_scale: float) -> None:
    # The same rules as the update_scale_hysteresis_ op (ops::apply_update_extras), checked here
    # so that a bad value fails at construction rather than at the first update().
    if hysteresis < 1 or hysteresis > 2**31 - 1:
        raise ValueError(
            f"autocastgen.GradScaler: hysteresis must be an integer >= 1 (1 turns it off), got {hysteresis}"
        )
    if math.isnan(min_scale) or math.isnan(max_scale) or not 0.0 <= min_scale <= max_scale:
        raise ValueError(
            f"autocastgen.GradScaler: need 0 <= min_scale <= max_scale, got min_scale={min_scale} max_scale={max_scale}"
        )


class GradScaler:
    """Dynamic loss scaling, a drop-in for ``torch.amp.GradScaler``.

    The constructor arguments, methods, errors and state dict are those of
    ``torch.amp.GradScaler``; with the default keyword-only extras every scale and every
    parameter comes out bit for bit as with PyTorch's scaler (tests/python/grad_scaler/test_grad_scaler_dropin.py).
    The differences:

    * the unscale runs ``torch.ops.autocastgen.non_finite_check_and_unscale_``, which accepts
      bfloat16 gradients on CUDA (PyTorch's CUDA op refuses them), and one call per device
      handles every dtype;
    * errors have autocastgen's wording; where PyTorch raises ``AssertionError`` (bad factors,
      no scale yet, no inf checks recorded, a bad ``new_scale``, pickling mid-iteration) the
      error is a ``RuntimeError`` or ``ValueError`` that is also an ``AssertionError``; other bad
      arguments raise ``ValueError``/``TypeError``;
    * the keyword-only extras below (the C++ ``autocastgen::GradScaler``'s, docs/scaler.md).

    Args:
        device: the device type of the scale and the gradients, ``"cuda"`` by default as in
            PyTorch. With ``"cuda"`` and no CUDA, the scaler warns and disables itself.
        init_scale: the first scale.
        growth_factor: the scale is multiplied by it after ``growth_interval`` clean steps (> 1).
        backoff_factor: the scale is multiplied by it on a step with inf/NaN gradients (in (0, 1)).
        growth_interval: clean steps between two growths.
        enabled: ``False`` makes every method a no-op (``step`` just steps).
        hysteresis: keyword-only. The N-th overflow since the last growth (or the start) backs the
            scale off; the N-1 before it only skip their steps. 1 (the default) is PyTorch's rule.
        min_scale: keyword-only. A backoff never takes the scale below this (default 0: no floor).
        max_scale: keyword-only. A growth never takes the scale above this (default ``None``: no
            cap); with a cap, a growth that would overflow lands on it.

    With any extra set, ``update()`` runs ``torch.ops.autocastgen.update_scale_hysteresis_`` and
    ``state_dict()`` adds the keys ``hysteresis``, ``_hysteresis_tracker``, ``min_scale`` and
    ``max_scale`` (the C++ scaler's); ``torch.amp.GradScaler.load_state_dict`` ignores them.
    """

    def __init__(
        self,
        device: str = "cuda",
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
        *,
        hysteresis: int = 1,
        min_scale: float = 0.0,
        max_scale: float | None = None,
    ) -> None:
        if not isinstance(device, str):
            raise TypeError(f"autocastgen.GradScaler: device must be a device type name such as 'cuda', not {device!r}")
        load_runtime()
        self._device = device
        self._enabled = bool(enabled)
        if self._enabled and device == "cuda" and not torch.cuda.is_available():
            warnings.warn(
                "autocastgen.GradScaler is enabled for 'cuda', but CUDA is not available; the scaler is disabled.",
                stacklevel=2,
            )
            self._enabled = False
        self._init_scale = _number("init_scale", init_scale)
        self._growth_factor = _number("growth_factor", growth_factor)
        self._backoff_factor = _number("backoff_factor", backoff_factor)
        self._growth_interval = _integer("growth_interval", growth_interval)
        self._hysteresis = _integer("hysteresis", hysteresis)
        self._min_scale = _number("min_scale", min_scale)
        self._max_scale = math.inf if max_scale is None else _number("max_scale", max_scale)
        if self._enabled:
            _check_factors(self._growth_factor, self._backoff_factor, self._growth_interval)
            _check_extras(self._hysteresis, self._min_scale, self._max_scale)
        self._init_growth_tracker = 0
        self._init_hysteresis_tracker = self._hysteresis
        self._scale: torch.Tensor | None = None
        self._growth_tracker: torch.Tensor | None = None
        self._hysteresis_tracker: torch.Tensor | None = None
        self._per_optimizer_states: dict[int, dict[str, Any]] = {}

    # -- the scale -------------------------------------------------------------------------------

    def _extras(self) -> bool:
        return self._hysteresis != 1 or self._min_scale != 0.0 or not math.isinf(self._max_scale)

    def _lazy_init(self, device: torch.device) -> None:
        self._scale = torch.full((), self._init_scale, dtype=torch.float32, device=device)
        self._growth_tracker = torch.full((), self._init_growth_tracker, dtype=torch.int32, device=device)
        self._hysteresis_tracker = torch.full((), self._init_hysteresis_tracker, dtype=torch.int32, device=device)

    def _initialized(self, function: str) -> torch.Tensor:
        if self._scale is None or self._growth_tracker is None:
            raise _MisuseError(
                f"autocastgen.GradScaler.{function}: the scale is not initialized; call scale(loss or outputs) "
                "earlier in the iteration"
            )
        return self._scale

    def _state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        return self._per_optimizer_states.setdefault(id(optimizer), _fresh_state())

    @overload
    def scale(self, outputs: torch.Tensor) -> torch.Tensor: ...

    @overload
    def scale(self, outputs: list[torch.Tensor]) -> list[torch.Tensor]: ...

    @overload
    def scale(self, outputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]: ...

    @overload
    def scale(self, outputs: Iterable[torch.Tensor]) -> Iterable[torch.Tensor]: ...

    def scale(self, outputs: Any) -> Any:
        """``outputs`` (a tensor, or lists/tuples/iterables of them, nested) times the scale.

        The scale is created on the first tensor's device; other devices get a copy. Disabled:
        ``outputs`` unchanged.
        """
        if not self._enabled:
            return outputs
        if isinstance(outputs, torch.Tensor):
            if self._scale is None:
                self._lazy_init(outputs.device)
            assert self._scale is not None
            return outputs * self._scale.to(device=outputs.device, non_blocking=True)

        replicas: list[_PerDevice] = []

        def apply(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                if not replicas:
                    if self._scale is None:
                        self._lazy_init(value.device)
                    assert self._scale is not None
                    replicas.append(_PerDevice(self._scale))
                return value * replicas[0].get(value.device)
            if isinstance(value, (list, tuple)):
                return type(value)(apply(v) for v in value)
            if isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
                return map(apply, value)
            raise ValueError(
                f"autocastgen.GradScaler.scale: outputs must be a Tensor or an iterable of Tensors, "
                f"not {type(value).__name__}"
            )

        return apply(outputs)

    # -- unscale, step, update -------------------------------------------------------------------

    def _unscale_grads(
        self, optimizer: torch.optim.Optimizer, inv_scale: torch.Tensor, found_inf: torch.Tensor, allow_fp16: bool
    ) -> dict[torch.device, torch.Tensor]:
        """Unscales the optimizer's gradients in place, one op call per device; returns found_inf per device."""
        inv_per_device = _PerDevice(inv_scale)
        found_per_device = _PerDevice(found_inf)
        by_device: dict[torch.device, list[torch.Tensor]] = {}
        with torch.no_grad():
            for group in optimizer.param_groups:
                for param in group["params"]:
                    if not isinstance(param, torch.Tensor):
                        raise TypeError(
                            f"autocastgen.GradScaler: optimizer parameters must be Tensors, not {type(param).__name__}"
                        )
                    grad = param.grad
                    if grad is None:
                        continue
                    if not allow_fp16 and grad.dtype == torch.float16:
                        raise ValueError(
                            "autocastgen.GradScaler: cannot unscale float16 gradients; keep the optimizer's "
                            "parameters in float32 (autocast casts them for the forward pass)"
                        )
                    if grad.is_sparse:
                        # A sparse float16 gradient may hold duplicate indices whose sum overflows
                        # only once coalesced: check the coalesced values, as PyTorch does.
                        if grad.dtype == torch.float16:
                            param.grad = grad = grad.coalesce()
                        grad = grad._values()
                    elif distributed.is_dtensor(grad):
                        distributed.register_dtensor_ops()  # Note [found_inf under DTensor]
                    by_device.setdefault(grad.device, []).append(grad)
            for device, grads in by_device.items():
                non_finite_check_and_unscale_(grads, found_per_device.get(device), inv_per_device.get(device))
        return found_per_device.copies

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Divides ``optimizer``'s gradients by the scale in place and records whether any had inf/NaN.

        At most once per optimizer between two ``update()`` calls, and not after ``step()``:
        call it before gradient clipping. Float16 gradients raise ``ValueError``; bfloat16,
        float32, float64 and sparse ones are unscaled. Disabled: does nothing.
        """
        if not self._enabled:
            return
        scale = self._initialized("unscale_")
        state = self._state(optimizer)
        if state["stage"] is _Stage.UNSCALED:
            raise RuntimeError(
                "autocastgen.GradScaler.unscale_: already called for this optimizer since the last update()"
            )
        if state["stage"] is _Stage.STEPPED:
            raise RuntimeError(
                "autocastgen.GradScaler.unscale_: called after step() for this optimizer; call update() first"
            )
        # The reciprocal in double, rounded once to float.
        inv_scale = scale.double().reciprocal().float()
        found_inf = torch.full((), 0.0, dtype=torch.float32, device=scale.device)
        state["found_inf_per_device"] = self._unscale_grads(optimizer, inv_scale, found_inf, allow_fp16=False)
        state["stage"] = _Stage.UNSCALED

    def _check_inf_per_device(self, optimizer: torch.optim.Optimizer) -> dict[torch.device, torch.Tensor]:
        """Checks the gradients without unscaling them (for optimizers that unscale themselves)."""
        scale = self._initialized("step")
        one = torch.full((), 1.0, dtype=torch.float32, device=scale.device)
        found_inf = torch.full((), 0.0, dtype=torch.float32, device=scale.device)
        found = self._unscale_grads(optimizer, one, found_inf, allow_fp16=True)
        self._state(optimizer)["found_inf_per_device"] = found
        return found

    def step(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        """Unscales (unless ``unscale_`` did) and calls ``optimizer.step(*args, **kwargs)`` unless a
        gradient had inf/NaN; returns what it returned, or ``None`` when skipped.

        Closures are refused. Optimizers with ``_step_supports_amp_scaling`` (PyTorch's fused
        ones) get the scale and found_inf as ``optimizer.grad_scale`` / ``optimizer.found_inf``
        and unscale and skip themselves. Disabled: just ``optimizer.step(*args, **kwargs)``.
        """
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("autocastgen.GradScaler.step: closures are not supported while the scaler is enabled")
        scale = self._initialized("step")
        state = self._state(optimizer)
        if state["stage"] is _Stage.STEPPED:
            raise RuntimeError("autocastgen.GradScaler.step: already called for this optimizer since the last update()")

        if getattr(optimizer, "_step_supports_amp_scaling", False):
            # The optimizer unscales and skips by itself (PyTorch's fused optimizers).
            if "grad_scaler" in inspect.signature(optimizer.step).parameters:
                # The older protocol, which PyTorch deprecates: the optimizer is handed the scaler.
                warnings.warn(
                    "autocastgen.GradScaler: passing the scaler to optimizer.step(grad_scaler=...) is deprecated "
                    "(as in PyTorch); the optimizer should read optimizer.grad_scale and optimizer.found_inf",
                    FutureWarning,
                    stacklevel=2,
                )
                kwargs["grad_scaler"] = self
                result = optimizer.step(*args, **kwargs)
                state["stage"] = _Stage.STEPPED
                return result
            if state["stage"] is _Stage.READY:
                self._check_inf_per_device(optimizer)
            found_inf = torch.zeros((), dtype=torch.float32, device=scale.device)
            for found in state["found_inf_per_device"].values():
                found_inf = found_inf + found.to(scale.device, non_blocking=True)
            # Unscaled already: the optimizer must not unscale again (a grad_scale the user set stays).
            if state["stage"] is _Stage.UNSCALED:
                optimizer.grad_scale = getattr(optimizer, "grad_scale", None)  # type: ignore[attr-defined]
            else:
                optimizer.grad_scale = scale * getattr(optimizer, "grad_scale", 1)  # type: ignore[attr-defined]
            optimizer.found_inf = found_inf  # type: ignore[attr-defined]
            result = optimizer.step(*args, **kwargs)
            state["stage"] = _Stage.STEPPED
            del optimizer.grad_scale  # type: ignore[attr-defined]
            del optimizer.found_inf  # type: ignore[attr-defined]
            return result

        if state["stage"] is _Stage.READY:
            self.unscale_(optimizer)
        if not state["found_inf_per_device"]:
            raise _MisuseError(
                "autocastgen.GradScaler.step: no inf checks were recorded for this optimizer "
                "(none of its parameters has a gradient)"
            )
        result = None
        if not sum(v.item() for v in state["found_inf_per_device"].values()):  # a host sync, as in PyTorch
            result = optimizer.step(*args, **kwargs)
        state["stage"] = _Stage.STEPPED
        return result

    def update(self, new_scale: float | torch.Tensor | None = None) -> None:
        """Ends the iteration: updates the scale from the inf checks of every optimizer, or sets it.

        Without ``new_scale``: backs off if any optimizer saw inf/NaN, else counts a clean step
        and grows after ``growth_interval`` of them (with the extras: hysteresis, min/max).
        ``new_scale`` (a float, or a one-element float32 tensor on the scaler's device type with
        ``requires_grad=False``) replaces the scale instead. Disabled: does nothing.
        """
        if not self._enabled:
            return
        scale = self._initialized("update")
        assert self._growth_tracker is not None and self._hysteresis_tracker is not None
        if new_scale is not None:
            if isinstance(new_scale, torch.Tensor):
                if new_scale.device.type != self._device or new_scale.numel() != 1 or new_scale.requires_grad:
                    raise _BadValueError(
                        "autocastgen.GradScaler.update: new_scale must be a float or a 1-element "
                        f"{self._device} tensor with requires_grad=False"
                    )
                scale.copy_(new_scale.reshape(()))
            else:
                scale.fill_(_number("new_scale", new_scale))
        else:
            found_infs = [
                found.to(device=scale.device, non_blocking=True)
                for state in self._per_optimizer_states.values()
                for found in state["found_inf_per_device"].values()
            ]
            if not found_infs:
                raise _MisuseError(
                    "autocastgen.GradScaler.update: no inf checks were recorded in this iteration; "
                    "call step() or unscale_() before update()"
                )
            combined = found_infs[0].clone()
            for found in found_infs[1:]:
                combined += found
            ops = torch.ops.autocastgen
            pytorch_kernels = pytorch_kernels_instead(scale.device)
            if self._extras():
                # PyTorch has no hysteresis or clamps: where our CUDA kernel cannot run, our CPU kernel
                # updates copies of the state (a host sync, on such a device only).
                on = torch.device("cpu") if pytorch_kernels else scale.device
                kept = (scale, self._growth_tracker, self._hysteresis_tracker)
                state = [t.to(on) for t in (*kept, combined)]
                ops.update_scale_hysteresis_(
                    *state, self._growth_factor, self._backoff_factor, self._growth_interval, self._hysteresis,
                    self._min_scale, None if math.isinf(self._max_scale) else self._max_scale,
                )
                for original, updated in zip(kept, state):  # state has found_inf last
                    if updated is not original:
                        original.copy_(updated)
            elif pytorch_kernels:
                torch._amp_update_scale_(
                    scale, self._growth_tracker, combined, self._growth_factor, self._backoff_factor,
                    self._growth_interval,
                )
            else:
                ops.update_scale_(
                    scale, self._growth_tracker, combined, self._growth_factor, self._backoff_factor,
                    self._growth_interval,
                )
        self._per_optimizer_states = {}

    # -- queries and settings --------------------------------------------------------------------

    def _get_scale_async(self) -> torch.Tensor | None:
        """The scale tensor itself (no host sync); ``None`` before the first ``scale()``."""
        return self._scale

    def get_scale(self) -> float:
        """The current scale as a Python float (a host sync); 1.0 when disabled."""
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else float(self._scale.item())

    def _get_growth_tracker(self) -> int:
        if not self._enabled:
            return 0
        return self._init_growth_tracker if self._growth_tracker is None else int(self._growth_tracker.item())

    def _get_hysteresis_tracker(self) -> int:
        if not self._enabled:
            return 0
        if self._hysteresis_tracker is None:
            return self._init_hysteresis_tracker
        return int(self._hysteresis_tracker.item())

    def get_growth_factor(self) -> float:
        """The factor the scale grows by."""
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        """Sets the factor the scale grows by (not checked, as in PyTorch)."""
        self._growth_factor = _number("growth_factor", new_factor)

    def get_backoff_factor(self) -> float:
        """The factor the scale backs off by."""
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        """Sets the factor the scale backs off by (not checked, as in PyTorch)."""
        self._backoff_factor = _number("backoff_factor", new_factor)

    def get_growth_interval(self) -> int:
        """The number of clean steps between two growths."""
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        """Sets the number of clean steps between two growths."""
        self._growth_interval = _integer("growth_interval", new_interval)

    def get_hysteresis(self) -> int:
        """The hysteresis (1: off)."""
        return self._hysteresis

    def get_min_scale(self) -> float:
        """The floor of backoffs (0: none)."""
        return self._min_scale

    def get_max_scale(self) -> float | None:
        """The cap of growths (``None``: none)."""
        return None if math.isinf(self._max_scale) else self._max_scale

    def is_enabled(self) -> bool:
        """Whether the scaler is on."""
        return self._enabled

    # -- state dict, pickling --------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The scaler's state with ``torch.amp.GradScaler``'s keys (empty when disabled).

        ``scale``, ``growth_factor``, ``backoff_factor`` (floats), ``growth_interval``,
        ``_growth_tracker`` (ints); with an extra set also ``hysteresis``,
        ``_hysteresis_tracker`` (ints), ``min_scale``, ``max_scale`` (floats; no cap is inf).
        Either scaler loads the other's.
        """
        if not self._enabled:
            return {}
        state: dict[str, Any] = {
            "scale": self.get_scale(),
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._get_growth_tracker(),
        }
        if self._extras():
            state.update(
                hysteresis=self._hysteresis,
                _hysteresis_tracker=self._get_hysteresis_tracker(),
                min_scale=self._min_scale,
                max_scale=self._max_scale,
            )
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores a ``state_dict()`` of this class or of ``torch.amp.GradScaler``.

        Keys the dict lacks among the extras take their defaults (a dict of PyTorch's scaler
        turns the extras off). Everything is checked before anything changes. Disabled: does
        nothing.
        """
        if not self._enabled:
            return
        if not isinstance(state_dict, dict):
            raise TypeError(f"autocastgen.GradScaler.load_state_dict: needs a dict, not {type(state_dict).__name__}")
        if len(state_dict) == 0:
            raise RuntimeError(
                "autocastgen.GradScaler.load_state_dict: the state dict is empty (was it saved from a disabled scaler?)"
            )

        def get(key: str, convert: Any) -> Any:
            if key not in state_dict:
                raise KeyError(f"autocastgen.GradScaler.load_state_dict: the state dict has no key '{key}'")
            return convert(key, state_dict[key])

        scale = get("scale", _number)
        growth_factor = get("growth_factor", _number)
        backoff_factor = get("backoff_factor", _number)
        growth_interval = get("growth_interval", _integer)
        growth_tracker = get("_growth_tracker", _integer)
        hysteresis = get("hysteresis", _integer) if "hysteresis" in state_dict else 1
        min_scale = get("min_scale", _number) if "min_scale" in state_dict else 0.0
        max_scale = get("max_scale", _number) if "max_scale" in state_dict else math.inf
        hysteresis_tracker = get("_hysteresis_tracker", _integer) if "_hysteresis_tracker" in state_dict else hysteresis
        _check_extras(hysteresis, min_scale, max_scale)

        self._init_scale = scale
        self._growth_factor = growth_factor
        self._backoff_factor = backoff_factor
        self._growth_interval = growth_interval
        self._init_growth_tracker = growth_tracker
        self._hysteresis, self._min_scale, self._max_scale = hysteresis, min_scale, max_scale
        self._init_hysteresis_tracker = hysteresis_tracker
        if self._scale is not None:
            self._scale.fill_(scale)
        if self._growth_tracker is not None:
            self._growth_tracker.fill_(growth_tracker)
        if self._hysteresis_tracker is not None:
            self._hysteresis_tracker.fill_(hysteresis_tracker)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if self._enabled:
            if self._per_optimizer_states:
                raise _MisuseError(
                    "autocastgen.GradScaler: pickle it before scale() or after update(), not inside an iteration"
                )
            # The tensors are made again, on the first scale(), from the values they hold now.
            state["_init_scale"] = self.get_scale()
            state["_init_growth_tracker"] = self._get_growth_tracker()
            state["_init_hysteresis_tracker"] = self._get_hysteresis_tracker()
            state["_scale"] = state["_growth_tracker"] = state["_hysteresis_tracker"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        extras = ""
        if self._extras():
            extras = f", hysteresis={self._hysteresis}, min_scale={self._min_scale}, max_scale={self.get_max_scale()}"
        return (
            f"autocastgen.GradScaler(device={self._device!r}, scale={self.get_scale()}, "
            f"growth_factor={self._growth_factor}, backoff_factor={self._backoff_factor}, "
            f"growth_interval={self._growth_interval}, enabled={self._enabled}{extras})"
        )
