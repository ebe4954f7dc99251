"""autocastgen's own state under torch.compile: scopes that Dynamo records, and guards on what a
traced graph read (docs/compile.md).

Note [scopes under torch.compile]
Dynamo cannot trace the eager scopes (a per-thread frame stack in ``threading.local``, ops that
return a depth), and the state must be in effect while the graph is traced, not while it runs:
AOTAutograd replays Dynamo's graph, and the wrappers it reaches then put their casts into the
graph. So inside a compiled function a scope calls :func:`enter_scope` / :func:`enter_state` and
:func:`exit_frame` instead. They are ``allow_in_graph``: Dynamo records them as calls in its graph
and runs them while it traces (with fake tensors), AOTAutograd runs them again while it replays
that graph; they change the C++ state for real, past the active dispatch modes (a mode's dispatch
restores the thread's dispatch keys when it returns, which would undo the scope). make_fx records
only dispatcher ops, so the compiled graph holds the casts and no scope: at run time the state is
not touched, and with fullgraph the frame's scopes are balanced. Frames a failed or restarted
trace leaves open are closed by a Dynamo cleanup hook.

Note [guards on the own state]
Every driver call made while tracing calls the op ``autocastgen::trace_note_read`` (Note [reads
while tracing] in runtime/torch/state/traced.cpp), as do the queries below. It adds one guard to the
frame being traced: ``autocast_trace_key()`` at a later call must equal its value at the frame's
entry (recorded before the frame's first scope), so a graph traced outside a scope, inside one,
with another dtype, disabled, or with other insight switches is not reused: Dynamo traces again.
"""

from __future__ import annotations

import functools
import hashlib
import sys
import threading
import weakref
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from . import runtime
from .paths import PACKAGE
from .runtime import load_runtime

_local = threading.local()
_entry_keys: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_guarded: weakref.WeakSet[Any] = weakref.WeakSet()


def _ops() -> Any:
    return torch.ops.autocastgen


def trace_key() -> str:
    """What a traced graph may depend on (Note [trace key] in runtime/torch/state/traced.cpp)."""
    with _disable_current_modes():
        return str(_ops().autocast_trace_key())


def _tracing_context() -> Any:
    return torch._guards.TracingContext.try_get()


def _install_guard(expected: str, builder: Any, guard: Any) -> None:
    key = _ops().autocast_trace_key.default

    def check(_: object) -> bool:
        return bool(key() == expected)

    parts = [f"autocastgen.autocast_trace_key() == {expected!r}"]
    root = builder.guard_manager.root
    try:
        root.add_lambda_guard(check, parts, None)  # 2.11, 2.15: and the user's stack, or None
    except TypeError:
        root.add_lambda_guard(check, parts)  # 2.4 to 2.7


def note_read() -> int:
    """Guards the frame being traced on the state at its entry (Note [guards on the own state]).

    Returns 0 when torch.compile is not tracing, 1 when it is (the runtime then counts and observes
    the call through ops in the graph: Note [insight in compiled code] in
    runtime/torch/state/traced.cpp), 2 when the call belongs to a backward traced inside the
    forward's autocast scope, which eager never autocasts (the driver leaves it untouched: Note
    [the backward a trace puts in the forward's scope] there).
    """
    context = _tracing_context()
    if context is None:
        return 0
    if _is_exporting():
        _warn_export_drops_the_scope()
    if _backward_in_the_forward_scope():
        return 2
    if context in _guarded:
        return 1
    _guarded.add(context)
    _key_the_compile_caches()
    expected = _entry_keys.get(context)
    if expected is None:
        expected = trace_key()
    from torch._dynamo.source import GlobalStateSource

    context.guards_context.dynamo_guards.add(
        torch._guards.Guard(GlobalStateSource(), functools.partial(_install_guard, expected))
    )
    return 1


def _backward_in_the_forward_scope() -> bool:
    """Whether AOTAutograd is tracing a backward in the forward's autocast state: its backward tag
    (2.15), or an autograd node running (releases without the tag), with
    ``backward_pass_autocast`` at its default (a list there asks for autocast in the backward)."""
    config = getattr(torch._functorch.config, "backward_pass_autocast", "same_as_forward")
    if config != "same_as_forward":
        return False
    meta = getattr(torch.fx.traceback, "current_meta", None) or {}
    return meta.get("partitioner_tag") == "is_backward" or torch._C._current_autograd_node() is not None


# Note [torch.export under our scopes]
# torch.export.export records no scope around it (the program has no casts), and a scope inside
# forward becomes PyTorch's wrap_with_autocast, which holds a device and a dtype, no policy: it is
# decided again by whatever autocast kernels are loaded when the program is decomposed. A driver
# reached while export traces means one of the two lost a policy of ours, so the first one says so
# once per process. autocastgen.export's own float32 export runs with ``exporting_quietly`` set.
_warned_about_export = False
exporting_quietly = threading.local()


def _is_exporting() -> bool:
    """torch.compiler.is_exporting(), which PyTorch 2.4 lacks (nor can it bake programs: docs/export.md)."""
    is_exporting = getattr(torch.compiler, "is_exporting", None)
    return bool(is_exporting()) if is_exporting is not None else False


def _warn_export_drops_the_scope() -> None:
    global _warned_about_export
    if _warned_about_export or getattr(exporting_quietly, "on", False):
        return
    _warned_about_export = True
    import warnings

    warnings.warn(
        "autocastgen: torch.export.export traced an op that an autocastgen policy decides inside an autocast "
        "scope, but the program does not carry the policy: a scope around the export call (autocastgen.autocast, "
        "torch.autocast) is not exported, and one inside forward is exported as torch's wrap_with_autocast, "
        "decided again by whatever autocast kernels are loaded when it is decomposed. "
        "autocastgen.export(model, args, device=..., dtype=...) puts the policy's casts into the program "
        "(docs/export.md)",
        UserWarning,
        stacklevel=2,
    )


def forget_compiled_graphs() -> bool:
    """The op ``autocastgen::forget_compiled_graphs``, which the runtime calls whenever a policy is
    installed or cleared, a generated library loads, or fp8's measured decisions are forgotten:
    drops the code Dynamo compiled in this process.

    Note [policies in the trace key] (runtime/torch/state/traced.cpp): a graph holds the casts of the
    policies in force when it was traced. Graphs that reached a wrapper are guarded on them; those
    that reached none (PyTorch's kernels, or ops a new policy now takes over) are not, so every
    compiled frame traces again at its next call. Before torch._dynamo is imported nothing was
    compiled (the package does not import it).
    """
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:
        dynamo.reset_code_caches()
    return True


def _frames() -> list[tuple[int, int, str]]:
    """This thread's frames opened while tracing: (trace context id, depth, the op that closes it)."""
    frames: list[tuple[int, int, str]] | None = getattr(_local, "frames", None)
    if frames is None:
        frames = _local.frames = []
    return frames


def _close_frames_of(context_id: int, output: Any) -> None:
    """Dynamo's cleanup hook of a traced frame: closes the scopes its trace left open.

    Open scopes in a graph Dynamo compiled mean the graph ends inside one: a graph break split the
    scope over two graphs, whose scopes would not be the same (Note [scopes under torch.compile]).
    That is refused here, at trace time. A trace that failed before compiling says why itself.
    """
    frames = _frames()
    left_open = 0
    with _disable_current_modes():
        while frames and frames[-1][0] == context_id:
            _, depth, exit_op = frames.pop()
            getattr(_ops(), exit_op)(depth)
            left_open += 1
    if left_open and getattr(output, "compile_subgraph_reason", None) is not None:
        raise RuntimeError(
            "autocastgen.autocast / state_guard under torch.compile: the graph ends inside an autocastgen "
            "scope (a graph break in the scope's body, or a scope entered and not left). Compile the scope's "
            "body without graph breaks (fullgraph=True shows where it breaks), or open the scope outside the "
            "compiled function."
        )


def _frames_closed_on_cleanup(context_id: int) -> None:
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        tx = InstructionTranslator.current_tx()
    except Exception:  # noqa: BLE001 - not inside Dynamo (make_fx alone): nothing to hook
        return
    tx.output.add_cleanup_hook(functools.partial(_close_frames_of, context_id, tx.output))


def _record_entry() -> None:
    context = _tracing_context()
    if context is not None and context not in _entry_keys:
        _entry_keys[context] = trace_key()


def enter_scope(device_type: str, dtype: torch.dtype | None, enabled: bool, cache_enabled: bool) -> None:
    """autocast.__enter__ inside a compiled function (Note [scopes under torch.compile])."""
    _record_entry_then_open(lambda: _ops().autocast_enter(device_type, dtype, enabled, cache_enabled))


def enter_state(encoded: tuple[int, ...]) -> None:
    """state_guard.__enter__ inside a compiled function."""
    _record_entry_then_open(lambda: _ops().autocast_state_enter(list(encoded)))


def enter_module(path: str) -> None:
    """attach()'s pre-hook inside a compiled function: the module's frame (Note [modules under
    torch.compile] in places.py)."""
    _record_entry_then_open(lambda: _ops().module_enter(path), exit_op="module_exit")


def exit_module() -> None:
    """attach()'s post-hook inside a compiled function."""
    frames = _frames()
    if not frames or frames[-1][2] != "module_exit":
        raise RuntimeError("autocastgen.attach under torch.compile: a module's frame closed out of order")
    with _disable_current_modes():
        _ops().module_exit(frames[-1][1])
    frames.pop()


def _record_entry_then_open(enter: Any, exit_op: str = "autocast_exit") -> None:
    context = _tracing_context()
    first = context is not None and context not in _entry_keys
    _record_entry()
    with _disable_current_modes():
        depth = int(enter())
    if first:
        _frames_closed_on_cleanup(id(context))
    _frames().append((id(context), depth, exit_op))


def exit_frame() -> None:
    """The __exit__ of a scope or state entered inside a compiled function."""
    frames = _frames()
    if not frames or frames[-1][2] != "autocast_exit":
        raise RuntimeError("autocastgen: __exit__ without a matching __enter__ in this compiled function")
    with _disable_current_modes():
        _ops().autocast_exit(frames[-1][1])
    frames.pop()


def refuse(message: str) -> None:
    """Fails the trace with `message`: Dynamo runs this while tracing and reports its error (a
    raise in traced code would only say "Observed exception")."""
    raise RuntimeError(message)


def read(op_name: str, *args: Any) -> Any:
    """A state query or capture inside a compiled function: a constant of the trace, guarded."""
    note_read()
    with _disable_current_modes():
        value = getattr(_ops(), op_name)(*args)
    return tuple(value) if isinstance(value, list) else value


def prepare() -> bool:
    """Marks the functions above for Dynamo; call it in traced code before them.

    Dynamo runs it for real while tracing (a constant result, like read), so the package does not
    import torch._dynamo (a second) when it is imported: only a trace, which has imported it, does.
    """
    global _prepared
    if not _prepared:
        for fn in (enter_scope, enter_state, exit_frame, enter_module, exit_module, refuse):
            torch._dynamo.allow_in_graph(fn)
        _prepared = True
    return True


_prepared = False
# What torch._dynamo.assume_constant_result sets, without importing torch._dynamo.
prepare._dynamo_marked_constant = True  # type: ignore[attr-defined]
read._dynamo_marked_constant = True  # type: ignore[attr-defined]


def _define_ops() -> torch.library.Library:
    load_runtime()  # the ops below are the runtime's
    library = torch.library.Library("autocastgen", "FRAGMENT")
    library.define("trace_note_read() -> int")
    library.impl("trace_note_read", note_read, "CPU")
    library.define("forget_compiled_graphs() -> bool")
    library.impl("forget_compiled_graphs", forget_compiled_graphs, "CPU")
    # The ops a traced driver call puts into the graph (Note [insight in compiled code] in
    # runtime/torch/state/traced.cpp): they act when the graph runs, so tracing sees nothing, and they
    # must stay in the graph.
    for name in ("stats_traced_call", "observe_traced"):
        torch.library.register_fake(f"autocastgen::{name}", lambda *args: None, lib=library)
    try:
        from torch._library.effects import EffectType

        register_effect = torch.library._register_effectful_op
    except ImportError:  # 2.4, 2.7: the same registry, private to AOTAutograd's effects
        from torch._higher_order_ops.effects import _EffectType as EffectType

        # The older registry's signature (no HigherOrderOperator, returns None): called alike below.
        from torch._higher_order_ops.effects import (  # type: ignore[assignment]
            _register_effectful_op as register_effect,
        )
    # Kept by dead-code elimination, not ordered: the statistics move to the graph's start in
    # Inductor (Note [statistics first in Inductor's graphs]), the watch runs once its tensors exist.
    torch.fx.node.has_side_effect(torch.ops.autocastgen.stats_traced_call.default)
    torch.fx.node.has_side_effect(torch.ops.autocastgen.observe_traced.default)
    from torch._library import utils as library_utils

    if not hasattr(library_utils, "is_impure"):
        # 2.4, 2.7: dead-code elimination sees only the functions marked here, so Inductor would
        # remove an inference graph's with_effects nodes (their token reaches only _sink_tokens,
        # which returns nothing) and the statistics they replay; 2.11 and later keep every
        # effectful call (torch._library.utils.is_impure).
        torch.fx.node.has_side_effect(torch.ops.higher_order.with_effects)
        # And their Inductor keeps an op of no output only if it mutates or is effectful: there both
        # are ordered effects (Note [insight in compiled code]).
        register_effect(torch.ops.autocastgen.stats_traced_call.default, EffectType.ORDERED)
        register_effect(torch.ops.autocastgen.observe_traced.default, EffectType.ORDERED)
    return library


@functools.cache
def _code_key() -> str:
    """This autocastgen's code, for the compile cache keys: the package's Python files (they trace
    the fp8 route's decompositions into graphs) and the runtime library, by name, size and time of
    change. PyTorch's on-disk caches outlive an upgrade or a rebuild; a graph another version of
    autocastgen traced must not be served from them."""
    files = sorted(PACKAGE.rglob("*.py"))  # every subpackage's too
    if runtime._loaded_from and Path(runtime._loaded_from).is_file():
        files.append(Path(runtime._loaded_from))
    digest = hashlib.sha256()
    for path in files:
        status = path.stat()
        name = path.relative_to(PACKAGE).as_posix() if PACKAGE in path.parents else path.name
        digest.update(f"{name}:{status.st_size}:{status.st_mtime_ns};".encode())
    return digest.hexdigest()[:16]


def _key_the_compile_caches() -> None:
    """Note [the state in compile cache keys]: Dynamo's guards keep a graph of one state from
    running in another, but PyTorch's compile caches look graphs up by a key of their own:
    AOTAutograd's by Dynamo's graph and PyTorch's autocast state, which a graph compiled around an
    own scope (or with statistics on) shares with one compiled without. Inductor puts the uuid() of
    its custom graph passes into both caches' keys, so a pass that changes nothing adds the calling
    thread's trace key (and the code's, _code_key) to them. Installed by the first traced read
    (Dynamo's, before AOTAutograd computes its key), not at import: torch._inductor takes a second to
    import."""
    global _cache_key_installed
    if _cache_key_installed:
        return
    _cache_key_installed = True
    import torch._inductor.config as inductor_config

    try:
        from torch._inductor.custom_graph_pass import CustomGraphPass
    except ImportError:
        # PyTorch 2.4: no AOTAutograd cache, and Inductor's FX graph cache (off by default) keys on
        # the graph AOTAutograd made, which holds the casts of the state: nothing to add.
        return

    # One pass wraps whatever was installed before: PyTorch 2.7 and 2.11 take a single pass
    # here (2.15 also a list), and runs it unchanged.
    before = inductor_config.post_grad_custom_post_pass
    earlier = [] if before is None else list(before) if isinstance(before, (list, tuple)) else [before]

    class StateInCacheKey(CustomGraphPass):
        def __call__(self, graph: torch.fx.graph.Graph) -> None:
            _statistics_first(graph)
            for earlier_pass in earlier:
                earlier_pass(graph)

        def uuid(self) -> str | None:
            keys = [earlier_pass.uuid() if hasattr(earlier_pass, "uuid") else None for earlier_pass in earlier]
            if any(key is None for key in keys):
                return None  # an earlier pass without a key: Inductor then does not cache, as without us
            return f"autocastgen:{_code_key()}:" + trace_key() + "".join(f";{key}" for key in keys)

    inductor_config.post_grad_custom_post_pass = StateInCacheKey()


_cache_key_installed = False


def _statistics_first(graph: torch.fx.graph.Graph) -> None:
    """Note [statistics first in Inductor's graphs]: Inductor (PyTorch 2.15) frees a graph input
    right after an op of no output that stands between two nodes it fuses into one kernel, before
    that kernel reads the input (UnboundLocalError in the generated code: a Llama's embedding and
    RMSNorm around a linear's statistics). stats_traced_call reads only its record's id and counts
    the same wherever the graph runs it, so every one moves to the graph's start, after the
    inputs: no kernel is fused across it. Where it is an ordered effect (2.4, 2.7: a with_effects
    node threading a token) it is not a plain call and stays."""
    target = torch.ops.autocastgen.stats_traced_call.default
    calls = [node for node in graph.nodes if node.op == "call_function" and node.target is target]
    inputs = [node for node in graph.nodes if node.op == "placeholder"]
    for node in calls:
        if inputs:
            inputs[-1].append(node)
        else:
            next(iter(graph.nodes)).prepend(node)
        inputs.append(node)  # the next one goes after this one: their order is kept


# Kept for the life of the module: dropping the library unregisters the ops' registrations. A
# reload of this module keeps the first (its globals survive the reload).
if "_library" not in globals():
    _library = _define_ops()
