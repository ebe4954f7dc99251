"""Statistics, the non-finite watch and record-only mode in compiled code (docs/compile.md).

N compiled calls count as N eager calls in `calls`, `ran_in` and `input_dtypes`, marked as compiled
(`compiled_calls`, the cache fields `eager_only`); the watch raises and warns in compiled code
with eager's message (op and user's line); record-only mode records compiled calls; switching any
of them on after compiling traces again at the next call, and with everything off the graph holds
no op of ours. Through the generated CPU library under torch.autocast, backend aot_eager.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import pytest
import torch

from built_tree import require_built

# Verified with PyTorch 2.4, 2.7, 2.11 and 2.15 (docs/compile.md); two limits of 2.4 are gated below.
TORCH = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])

ROOT = Path(__file__).resolve().parents[3]
BUILD = Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", ROOT / "build"))
CPU_LIB = BUILD / "lib" / "libautocastgen_torch_cpu.so"
require_built(BUILD, "python/autocastgen/__init__.py", CPU_LIB)

from torch._dynamo.backends.common import aot_autograd  # noqa: E402
from torch._dynamo.testing import CompileCounterWithBackend  # noqa: E402

import autocastgen  # noqa: E402

torch.ops.load_library(str(CPU_LIB))


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    autocastgen.insight.reset()
    yield
    torch._dynamo.reset()


def make_model(overflow: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    if overflow:
        with torch.no_grad():
            model[0].weight.fill_(0.5)  # 8 inputs of 60000: 240000, above float16's 65504
    return model


def step_of(model: torch.nn.Module, dtype: torch.dtype):
    target = torch.arange(32) % 4

    def step(x):
        with torch.autocast("cpu", dtype=dtype):
            return torch.nn.functional.cross_entropy(model(x), target)  # linear: lower, loss: fp32

    return step


X = torch.randn(32, 8)
BIG = torch.full((32, 8), 60000.0)


def by_op(table):
    return {e["op"]: e for e in table["ops"]}


def test_statistics_of_compiled_calls_equal_eager_calls() -> None:
    step = step_of(make_model(), torch.bfloat16)
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    compiled(X)  # traced with statistics off: the next call traces again
    with autocastgen.stats() as eager:
        for _ in range(3):
            step(X)
    with autocastgen.stats() as comp:
        for _ in range(3):
            compiled(X)
    eager_ops, comp_ops = by_op(eager.table), by_op(comp.table)
    assert set(eager_ops) == set(comp_ops) == {"aten::linear", "aten::cross_entropy_loss"}
    for op, want in eager_ops.items():
        got = comp_ops[op]
        for field in ("policy", "calls", "ran_in", "input_dtypes", "casts", "cast_bytes"):
            assert got[field] == want[field], (op, field)  # casts too: each call opens its own scope
        assert got["compiled_calls"] == got["calls"]
        assert got["eager_only"] == ["cache_hits", "cache_misses", "cache_evictions"]
        assert "compiled_calls" not in want and "eager_only" not in want
    assert comp_ops["aten::linear"]["calls"] == 6 and comp_ops["aten::linear"]["ran_in"] == {"bfloat16": 6}
    with autocastgen.stats() as again:  # a block's table: its own compiled calls, or none
        step(X)
    assert "compiled_calls" not in by_op(again.table)["aten::linear"]


def graphs_of(step):
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm.code)
        return gm

    counter = CompileCounterWithBackend(aot_autograd(fw_compiler=keep))
    return torch.compile(step, backend=counter, fullgraph=True), counter, graphs


def test_switching_on_traces_again_and_off_adds_no_nodes() -> None:
    compiled, counter, graphs = graphs_of(step_of(make_model(), torch.bfloat16))
    compiled(X)
    assert "autocastgen" not in graphs[-1]  # everything off: casts and the ops, nothing of ours
    with autocastgen.stats() as s:
        compiled(X)
    assert counter.frame_count == 2
    assert "autocastgen.stats_traced_call" in graphs[-1]
    assert by_op(s.table)["aten::linear"]["calls"] == 2
    compiled(X)  # off again: the first graph, no new trace
    assert counter.frame_count == 2
    with autocastgen.watch("record"):
        compiled(X)
    assert counter.frame_count == 3
    assert "autocastgen.observe_traced" in graphs[-1]


def eager_and_compiled_errors(step):
    messages = []
    for fn in (step, torch.compile(step, backend="aot_eager", fullgraph=True)):
        with autocastgen.watch("raise"), pytest.raises(RuntimeError) as error:
            fn(BIG)
        messages.append(str(error.value).splitlines()[0])
    return messages


def test_the_watch_raises_in_compiled_code_with_eagers_message() -> None:
    step = step_of(make_model(overflow=True), torch.float16)
    eager, compiled = eager_and_compiled_errors(step)
    assert eager.startswith("autocastgen: non-finite output: aten::linear (rule lower_precision_fp, ran in float16)")
    assert f"called from {__file__}:" in eager  # the line of model(x) in step
    assert compiled == eager


def test_the_watch_warns_in_compiled_code_and_counts() -> None:
    step = step_of(make_model(overflow=True), torch.float16)
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    with warnings.catch_warnings(record=True) as caught, autocastgen.stats() as s:
        warnings.simplefilter("always")
        with autocastgen.watch("warn"):
            compiled(BIG)
    messages = [str(w.message) for w in caught if "non-finite output" in str(w.message)]
    assert messages and "aten::linear" in messages[0] and f"called from {__file__}:" in messages[0]
    linear = by_op(s.table)["aten::linear"]
    assert linear["outputs_checked"] == 2 and linear["nonfinite"] >= 1


def test_record_only_records_compiled_calls_as_eager() -> None:
    step = step_of(make_model(overflow=True), torch.float16)
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    with autocastgen.record() as eager:
        step(BIG)
    with autocastgen.record() as comp:
        compiled(BIG)
    for op, want in by_op(eager.table).items():
        got = by_op(comp.table)[op]
        assert got["calls"] == want["calls"] and got["ran_in"] == want["ran_in"]
        assert list(got["ran_in"]) == ["float32"]  # nothing cast
        assert got["ranges"]["float16_overflow"] == want["ranges"]["float16_overflow"]
        assert got["ranges"]["output_max_abs"] == want["ranges"]["output_max_abs"]


@pytest.mark.skipif(TORCH < (2, 7), reason=f"Dynamo {torch.__version__} stops at `with` on the block itself "
                    "(BEFORE_WITH UserDefinedObjectVariable), with its own message, before our refusal runs; verified from 2.7")
@pytest.mark.parametrize("block", [lambda: autocastgen.stats(), lambda: autocastgen.watch("raise"),
                                   lambda: autocastgen.record()], ids=["stats", "watch", "record"])
def test_switching_inside_a_compiled_function_fails_at_trace_time(block) -> None:
    model = make_model()

    def step(x):
        with block():
            return model(x)

    with pytest.raises(Exception, match="inside a function torch.compile traces: switch statistics"):
        torch.compile(step, backend="aot_eager", fullgraph=True)(X)
    assert autocastgen.insight.finite_mode() == "off" and not autocastgen.insight.enabled()


def inductor_forward():
    # Inductor compiles its own kernels around our ops (observe_traced must keep the buffers it
    # reads alive for the kernels after it: Note [insight in compiled code]). Forward only, to keep
    # the C++ compile short.
    model = make_model(overflow=True)

    def forward(x):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
            return torch.relu(model(x)).sum(dim=1)

    return forward, torch.compile(forward, backend="inductor", fullgraph=True)


@pytest.mark.skipif(TORCH < (2, 7), reason=f"Inductor {torch.__version__} constant-folds the with_effects nodes of an "
                    "inference graph, running stats_traced_call once while it compiles (one call too many); "
                    "2.7 skips higher-order ops there (docs/compile.md)")
def test_inductor_counts_as_eager() -> None:
    forward, compiled = inductor_forward()
    with autocastgen.stats() as eager:
        forward(X)
        forward(X)
    with autocastgen.stats() as comp:
        compiled(X)
        compiled(X)
    assert [(e["op"], e["calls"], e["ran_in"]) for e in comp.table["ops"]] == [
        (e["op"], e["calls"], e["ran_in"]) for e in eager.table["ops"]]


class EmbedNormLinear(torch.nn.Module):
    """A Llama's first steps: an embedding, an RMSNorm and a linear (counted) that Inductor fuses around."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embedding = torch.nn.Embedding(100, 16)
        self.norm_weight = torch.nn.Parameter(torch.ones(16))
        self.linear = torch.nn.Linear(16, 16)

    def forward(self, ids):
        h = self.embedding(ids)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm_weight
        return self.linear(h).float().square().mean()


@pytest.mark.skipif(TORCH < (2, 11), reason=f"Inductor {torch.__version__} fuses across the statistics' ordered "
                    "effect and frees an input the fused kernel reads: a limit there (docs/compile.md, Releases (5))")
def test_inductor_trains_with_statistics_on_as_eager() -> None:
    # Inductor 2.15 freed the embedding's weight after the linear's statistics op, before the fused
    # embedding + RMSNorm kernel read it (Note [statistics first in Inductor's graphs]).
    ids = torch.randint(0, 100, (2, 8))
    eager_model, compiled_model = EmbedNormLinear(), EmbedNormLinear()

    def loss_of(model):
        def loss(ids):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return model(ids)

        return loss

    tables = []
    for _model, forward in ((eager_model, loss_of(eager_model)),
                           (compiled_model, torch.compile(loss_of(compiled_model), backend="inductor", fullgraph=True))):
        with autocastgen.stats() as counted:
            for _ in range(2):
                forward(ids).backward()
        tables.append([(e["op"], e["calls"], e["ran_in"]) for e in counted.table["ops"]])
    assert tables[1] == tables[0] and ("aten::linear", 2, {"bfloat16": 2}) in tables[0]
    for ours, theirs in zip(compiled_model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=2e-2, atol=2e-2)


STATS_CHILD = """
    import json, torch, autocastgen
    torch.ops.load_library(CPU_LIB)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))

    def loss(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return model(x).float().square().mean()

    compiled = torch.compile(loss, backend="inductor", fullgraph=True)
    with autocastgen.stats() as counted:
        compiled(torch.randn(32, 8)).backward()
    print(json.dumps([(e["op"], e["calls"]) for e in counted.table["ops"]]))
"""


@pytest.mark.skipif(TORCH < (2, 7), reason="as test_inductor_counts_as_eager")
def test_a_graph_with_statistics_is_not_served_to_another_process(tmp_path: Path) -> None:
    # Its statistics ops name this process's records (Note [insight in compiled code]); from
    # AOTAutograd's cache a second process got a graph whose records it never made.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import child_process

    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "TORCHINDUCTOR_FX_GRAPH_CACHE": "1"}
    runs = [child_process.last_json(child_process.run_child(BUILD, f"CPU_LIB = {str(CPU_LIB)!r}\n", STATS_CHILD, env))
            for _ in range(2)]
    assert runs[0] == runs[1] == [["aten::linear", 2]]


def test_inductor_raises_as_eager() -> None:
    forward, compiled = inductor_forward()
    torch.testing.assert_close(compiled(X), forward(X), rtol=1e-2, atol=1e-2)
    with autocastgen.watch("raise"), pytest.raises(RuntimeError, match="non-finite output: aten::linear") as error:
        compiled(BIG)
    assert f"called from {__file__}:" in str(error.value)
