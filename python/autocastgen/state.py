"""autocastgen's own autocast state from Python: scopes, queries and worker-thread capture.

The state is the C++ one of ``autocastgen/runtime/state.h`` (per device type and per thread),
read by wrappers generated with ``--state autocastgen`` (``add_autocast_ops(... STATE
autocastgen)``, ``libautocastgen_torch_cpu_own_state.so``) and by runtime policies. PyTorch's
``torch.autocast`` does not change it, and these functions do not change PyTorch's.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

import torch

from ._core import traced
from ._core.runtime import load_runtime

F = TypeVar("F", bound=Callable[..., Any])

_LOWER_PRECISION = (torch.float16, torch.bfloat16)


def _ops() -> Any:
    load_runtime()
    return torch.ops.autocastgen


def _check_device_type(device_type: object) -> str:
    if not isinstance(device_type, str):
        raise TypeError(f"autocastgen: device_type must be a str such as 'cpu', not {type(device_type).__name__}")
    return device_type


class _Frames:
    """The depths this object opened, per thread (Note [Python frames] in python_state_ops.cpp)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def _stack(self) -> list[int]:
        stack: list[int] | None = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def push(self, depth: int) -> None:
        self._stack().append(depth)

    def close_innermost(self) -> None:
        """Closes the frame this object opened last on this thread; it stays open if that fails."""
        stack = self._stack()
        if not stack:
            raise RuntimeError("autocastgen: __exit__ without a matching __enter__ on this thread")
        _ops().autocast_exit(stack[-1])
        stack.pop()


class _Scope:
    """What autocast and state_guard share: leaving closes the innermost frame this object opened
    on this thread; as a decorator, each call runs in a fresh scope of the same arguments."""

    _frames: _Frames | None

    def _same_scope(self) -> _Scope:
        raise NotImplementedError

    def __enter__(self) -> Any:  # autocast's and state_guard's
        raise NotImplementedError

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if torch.compiler.is_compiling():
            traced.prepare()
            traced.exit_frame()
            return
        self._own_frames().close_innermost()

    def _own_frames(self) -> _Frames:
        # Made here when the object was made inside a compiled function (no threading.local there).
        if self._frames is None:
            self._frames = _Frames()
        return self._frames

    def __call__(self, func: F) -> F:
        if not callable(func):
            raise TypeError(f"autocastgen.{type(self).__name__}(...)(func) needs a callable, not {type(func).__name__}")

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self._same_scope():
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


class autocast(_Scope):  # noqa: N801 - named like torch.autocast, which it mirrors
    """Turns autocastgen's autocast state on (or off) for one device type on this thread.

    The equivalent of the C++ ``autocastgen::AutocastScope``: usable as a context manager or as a
    decorator, nestable, and restoring the previous state on every exit path. When a device's
    outermost scope on the thread closes, that thread's cast cache for the device is cleared.

    Args:
        device_type: a device type name: ``"cpu"``, ``"cuda"``, a renamed PrivateUse1 backend...
        dtype: the lower-precision dtype, ``torch.float16`` or ``torch.bfloat16``; ``None`` keeps
            the enclosing scope's, else the device's default (bfloat16 on CPU, float16 on most
            others). A disabled scope accepts any dtype, as ``torch.autocast`` does, and then
            keeps the enclosing one.
        enabled: ``False`` turns autocast off inside the block.
        cache_enabled: whether casts of weights are cached inside the block.

    Raises:
        RuntimeError: on entry, for a device type without an autocast dispatch key or an enabled
            scope whose dtype is not float16 or bfloat16; nothing changes then. On exit, when
            scopes are closed out of order on one thread.
    """

    def __init__(
        self,
        device_type: str,
        dtype: torch.dtype | None = None,
        enabled: bool = True,
        cache_enabled: bool = True,
    ) -> None:
        self.device_type = _check_device_type(device_type)
        if not enabled and dtype not in _LOWER_PRECISION:
            dtype = None
        self.dtype = dtype
        self.enabled = bool(enabled)
        self.cache_enabled = bool(cache_enabled)
        self._frames = None if torch.compiler.is_compiling() else _Frames()

    def __enter__(self) -> autocast:
        if torch.compiler.is_compiling():  # Note [scopes under torch.compile] in traced.py
            traced.prepare()
            traced.enter_scope(self.device_type, self.dtype, self.enabled, self.cache_enabled)
            return self
        depth = _ops().autocast_enter(self.device_type, self.dtype, self.enabled, self.cache_enabled)
        self._own_frames().push(depth)
        return self

    def _same_scope(self) -> autocast:
        return autocast(self.device_type, self.dtype, self.enabled, self.cache_enabled)

    def __repr__(self) -> str:
        return (
            f"autocastgen.autocast({self.device_type!r}, dtype={self.dtype}, enabled={self.enabled}, "
            f"cache_enabled={self.cache_enabled})"
        )


@dataclass(frozen=True)
class AutocastState:
    """A copy of one thread's autocastgen state for every device type (``capture_state()``).

    Opaque: install it on another thread with ``state_guard(state)``. It holds no resources and
    may be kept, copied, pickled, and installed any number of times.
    """

    encoded: tuple[int, ...]


def capture_state() -> AutocastState:
    """This thread's autocastgen state, to carry to a worker thread (C++ ``capture_autocast_state``)."""
    if torch.compiler.is_compiling():
        return AutocastState(traced.read("autocast_state_capture"))
    return AutocastState(tuple(_ops().autocast_state_capture()))


class state_guard(_Scope):  # noqa: N801 - a context manager, named like one
    """Installs a captured state on the current thread for the block (C++ ``AutocastStateGuard``).

    Inside, this thread has exactly the captured state (every device type: enabled, dtype,
    nesting, cache flag). On exit the thread's own state comes back, and casts cached under the
    borrowed state are dropped unless the thread has scopes of its own open. Also a decorator.
    """

    def __init__(self, state: AutocastState) -> None:
        if not isinstance(state, AutocastState):
            raise TypeError(f"autocastgen.state_guard needs an AutocastState, not {type(state).__name__}")
        self.state = state
        self._frames = None if torch.compiler.is_compiling() else _Frames()

    def __enter__(self) -> AutocastState:
        if torch.compiler.is_compiling():
            traced.prepare()
            traced.enter_state(self.state.encoded)
            return self.state
        self._own_frames().push(_ops().autocast_state_enter(list(self.state.encoded)))
        return self.state

    def _same_scope(self) -> state_guard:
        return state_guard(self.state)


def with_state(func: F) -> F:
    """``func`` wrapped to run under the state captured now, on whichever thread calls it.

    The C++ ``with_autocast_state``: ``executor.submit(autocastgen.with_state(block), x)``.
    """
    return state_guard(capture_state())(func)


def _query(op_name: str, device_type: str) -> Any:
    device_type = _check_device_type(device_type)
    if torch.compiler.is_compiling():  # a constant of the trace, guarded (traced.py)
        return traced.read(op_name, device_type)
    return getattr(_ops(), op_name)(device_type)


def is_enabled(device_type: str) -> bool:
    """Whether autocastgen's autocast is on for ``device_type`` on this thread."""
    return bool(_query("autocast_is_enabled", device_type))


_DTYPES = {"Half": torch.float16, "BFloat16": torch.bfloat16}


def get_dtype(device_type: str) -> torch.dtype:
    """The lower-precision dtype autocastgen uses for ``device_type`` on this thread."""
    name = _query("autocast_dtype", device_type)
    return _DTYPES[name]


def is_cache_enabled(device_type: str) -> bool:
    """Whether casts are cached for ``device_type`` on this thread."""
    return bool(_query("autocast_is_cache_enabled", device_type))


def nesting(device_type: str) -> int:
    """How many autocastgen scopes for ``device_type`` are open on this thread."""
    return int(_query("autocast_nesting", device_type))
