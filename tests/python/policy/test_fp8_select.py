"""The fp8 recipe's `select:` (Note [fp8 selection] in runtime/torch/fp8/select.cpp, docs/fp8.md
"Where fp8 pays"): a GEMM the selection does not choose runs exactly as the lower precision does
(bit for bit, forward and gradients), the statistics say why, measured decisions are timed once per
shape class, kept in a file per device and PyTorch release, and the same eager and compiled.

The times a measurement would take can be given (AUTOCASTGEN_FP8_SELECT_TIMES=FP8_MS,LOWER_MS), so
both decisions are tested on a CPU where fp8 is always slower; one test times for real."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from built_tree import require_built

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import child_process  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
BUILD = Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", ROOT / "build"))
require_built(BUILD, "python/autocastgen/policy/_fp8.py")
if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_scaled_mm", "CPU"):
    pytest.skip(f"torch {torch.__version__} has no CPU _scaled_mm kernel", allow_module_level=True)

import autocastgen  # noqa: E402
from exact import assert_exact, exact  # noqa: E402

POLICY = """\
autocast:
  device: cpu
  lower_precision: [bfloat16]
  fp8: {{scaling: current, granularity: tensorwise, forward: float8_e4m3fn, backward: float8_e5m2, select: {select}}}
lists:
  fp8: [linear, mm, addmm]
"""
TIMES = "AUTOCASTGEN_FP8_SELECT_TIMES"


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    """No policy, no decisions, a cache folder of the test's own, no forced times."""
    monkeypatch.setenv("AUTOCASTGEN_FP8_SELECT_CACHE", str(tmp_path / "select"))
    monkeypatch.delenv(TIMES, raising=False)
    autocastgen.clear_runtime_policies()
    autocastgen.forget_fp8_selections()
    torch.ops.autocastgen.fp8_clear_weight_cache("cpu")
    yield
    autocastgen.clear_runtime_policies()
    autocastgen.forget_fp8_selections()


def load(select):
    autocastgen.clear_runtime_policies()
    autocastgen.load_policy(POLICY.format(select=select))


class Model(torch.nn.Module):
    """A linear, an mm and an addmm, every dimension a multiple of 16 (fp8 can run them all)."""

    def __init__(self):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.linear = torch.nn.Linear(64, 48)
        with torch.no_grad():
            self.linear.weight.copy_(torch.randn(48, 64, generator=generator) / 8)
            self.linear.bias.copy_(torch.randn(48, generator=generator))
        self.mat = torch.nn.Parameter(torch.randn(48, 32, generator=generator) / 7)
        self.bias = torch.nn.Parameter(torch.randn(32, generator=generator))

    def forward(self, x):
        h = self.linear(x)
        return torch.addmm(self.bias, torch.mm(h, self.mat), torch.eye(32))


def run(model_fn=None):
    """Forward and every gradient of a fresh model under torch.autocast("cpu", bfloat16)."""
    model = Model()
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(1), requires_grad=True)
    forward = model_fn(model) if model_fn else model
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = forward(x)
    y.float().square().mean().backward()
    return [y.detach(), x.grad, *(p.grad for p in model.parameters())]


@pytest.fixture(scope="module")
def lower_precision_result():
    autocastgen.clear_runtime_policies()
    return run()  # PyTorch's own CPU autocast: linear, mm, addmm in bfloat16


@pytest.fixture(scope="module")
def fp8_result():
    load("all")
    try:
        return run()
    finally:
        autocastgen.clear_runtime_policies()


def test_the_two_references_differ(lower_precision_result, fp8_result):
    assert not exact(lower_precision_result, fp8_result), "fp8 and bfloat16 give the same bits: the tests would prove nothing"


def test_auto_on_a_cpu_runs_the_lower_precision_bit_for_bit(lower_precision_result):
    load("auto")
    with autocastgen.stats() as counted:
        got = run()
    assert_exact(got, lower_precision_result)
    for op in ("aten::linear", "aten::mm", "aten::addmm"):
        row = counted.ops[op]
        assert row["policy"] == "fp8" and row["ran_in"] == {"bfloat16": 1}, row
        assert row["fp8_skipped"] == {"auto: fp8 is slower than the lower precision on CPUs": 1}, row


def test_the_stats_verb_says_why(tmp_path):
    cli = os.environ.get("AUTOCASTGEN_CLI", str(BUILD / "bin" / "autocastgen"))
    require_built(BUILD, cli)  # an error under ctest where missing
    load("auto")
    path = tmp_path / "stats.json"
    with autocastgen.stats(str(path)):
        run()
    import subprocess

    shown = subprocess.run([cli, "stats", str(path)], capture_output=True, text=True, check=True).stdout
    assert "fp8 calls run in the lower precision, and why:" in shown, shown
    assert "  aten::linear: 1 of 1 calls\n           1  auto: fp8 is slower than the lower precision on CPUs" in shown, shown
    as_json = subprocess.run([cli, "stats", str(path), "--json"], capture_output=True, text=True, check=True).stdout
    assert '"fp8_skipped"' in as_json


def test_all_counts_the_support_rule_s_refusals():
    load("all")
    with autocastgen.stats() as counted, torch.autocast("cpu", dtype=torch.bfloat16):
        torch.nn.functional.linear(torch.randn(8, 20), torch.randn(24, 20))  # K = 20: no fp8
        torch.nn.functional.linear(torch.randn(16, 32), torch.randn(16, 32))  # fp8
    row = counted.ops["aten::linear"]
    assert row["ran_in"] == {"bfloat16": 1, "float8_e4m3fn": 1}, row
    assert list(row["fp8_skipped"].values()) == [1] and "16" in next(iter(row["fp8_skipped"])), row


def test_the_auto_rule_per_device_class():
    rule = autocastgen.fp8_auto_rule
    assert rule("cuda", 4096, 4096, 4096) == (True, "")
    assert rule("cuda", 16384, 8192, 11008) == (True, "")
    for m, k, n in ((4096, 1024, 2816), (4096, 2816, 1024), (4096, 4096, 1024), (2048, 8192, 8192)):
        ok, reason = rule("cuda", m, k, n)
        assert not ok and "4096" in reason, (m, k, n, reason)
    assert rule("cpu", 16384, 8192, 8192) == (False, "auto: fp8 is slower than the lower precision on CPUs")
    with pytest.raises(RuntimeError, match="unknown granularity 'columnwise'"):
        rule("cuda", 4096, 4096, 4096, granularity="columnwise")


@pytest.mark.parametrize("times, chooses_fp8", [("1,2", True), ("2,1", False)])
def test_measured_keeps_the_faster_and_its_file(times, chooses_fp8, monkeypatch, lower_precision_result, fp8_result):
    monkeypatch.setenv(TIMES, times)
    load("measured")
    with autocastgen.stats() as counted:
        got = run()
    assert_exact(got, fp8_result if chooses_fp8 else lower_precision_result)
    decisions = autocastgen.fp8_selections()
    # linear [32 x 64] x [64 x 48], mm [32 x 48] x [48 x 32], addmm [32 x 32] x [32 x 32].
    assert [(d["m"], d["k"], d["n"], d["backward"], d["fp8"], d["source"]) for d in decisions] == [
        (32, 64, 48, True, chooses_fp8, "measured"), (32, 48, 32, True, chooses_fp8, "measured"),
        (32, 32, 32, True, chooses_fp8, "measured")]
    assert all(d["device"] == "cpu" and d["dtype"] == "BFloat16" and d["granularity"] == "tensorwise" for d in decisions)
    if not chooses_fp8:
        assert counted.ops["aten::linear"]["fp8_skipped"] == {"measured: the lower precision was faster": 1}
    # The file: one row per class; a new process reads it and measures nothing (its forced times
    # are malformed: a measurement would raise).
    path = Path(autocastgen.fp8_selection_file("cpu"))
    assert path.name == f"cpu-torch{torch.__version__.split('+')[0]}.tsv"
    lines = path.read_text().splitlines()
    assert len(lines) == 4 and lines[-1].startswith("#end rows=3 fnv1a64="), lines  # Note [the fp8 decisions file]
    policy = path.parent / "measured.yaml"
    policy.write_text(POLICY.format(select="measured"))
    result = child_process.run_child(BUILD, "", f"""
        import json, torch, autocastgen
        autocastgen.load_policy({str(policy)!r})
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.nn.functional.linear(torch.randn(32, 64, requires_grad=True), torch.randn(48, 64, requires_grad=True))
        print(json.dumps(autocastgen.fp8_selections()))
        """, env={"AUTOCASTGEN_FP8_SELECT_CACHE": os.environ["AUTOCASTGEN_FP8_SELECT_CACHE"], TIMES: "not numbers"})
    (read,) = child_process.last_json(result)
    assert (read["fp8"], read["source"], read["m"], read["k"], read["n"]) == (chooses_fp8, "file", 32, 64, 48)


def fnv1a64(data: bytes) -> str:
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) % (1 << 64)
    return f"{value:016x}"


@pytest.mark.parametrize("damage", ["cut", "edited", "old format"])
def test_a_damaged_decisions_file_is_measured_again(damage, monkeypatch):
    """Note [the fp8 decisions file]: a cut row must never be read as a time (the decision would
    flip); a damaged file reads as empty, with a warning, and is written anew, whole."""
    monkeypatch.setenv(TIMES, "1,2")
    load("measured")
    run()
    path = Path(autocastgen.fp8_selection_file("cpu"))
    text = path.read_text()
    body = text[: text.rindex("#end ")]
    assert text == body + f"#end rows=3 fnv1a64={fnv1a64(body.encode())}\n"
    if damage == "cut":  # the last row cut inside its second time: "...\t1\t2" -> "...\t1\t"
        path.write_text(body[: body.rindex("\t") + 1])
    elif damage == "edited":  # a time changed, the end line kept
        path.write_text(body.replace("\t2\n", "\t0.5\n", 1) + text[len(body):])
    else:  # rows as autocastgen wrote them before the end line
        path.write_text(body)
    autocastgen.forget_fp8_selections()  # the process's decisions; the file stays
    monkeypatch.setenv(TIMES, "2,1")  # measuring now chooses the lower precision
    with pytest.warns(UserWarning, match="the fp8 selection cache .* is damaged"):
        run()
    decisions = autocastgen.fp8_selections()
    assert [(d["source"], d["fp8"]) for d in decisions] == [("measured", False)] * 3, decisions
    text = path.read_text()
    body = text[: text.rindex("#end ")]
    assert text == body + f"#end rows=3 fnv1a64={fnv1a64(body.encode())}\n" and body.count("\t2\t1\n") == 3, text


@pytest.mark.parametrize("fault", ["file-size limit", "full disk"])
def test_a_failed_write_keeps_the_previous_decisions_file(fault, tmp_path):
    """The file is written whole or not at all (support/atomic_file.h): under `ulimit -f` the old
    writer renamed a cut file over the whole one; on a full disk likewise. Now the write warns and
    the previous file stays, whole; the decision is kept in memory."""
    import full_disk

    row = "cpu|tensorwise|BFloat16|M64|K64|N64|backward\t3\t1\n"
    previous = f"{row}#end rows=1 fnv1a64={fnv1a64(row.encode())}\n"
    name = Path(autocastgen.fp8_selection_file("cpu")).name
    policy = tmp_path / "measured.yaml"
    policy.write_text(POLICY.format(select="measured"))
    body = f"""
        import json, resource, torch, warnings, autocastgen
        autocastgen.load_policy({str(policy)!r})
        with warnings.catch_warnings(record=True) as caught:  # the child's stderr is a file: limited too
            warnings.simplefilter("always")
            if {fault == "file-size limit"}:
                resource.setrlimit(resource.RLIMIT_FSIZE, ({len(previous) + 8}, resource.RLIM_INFINITY))
            with torch.autocast("cpu", dtype=torch.bfloat16):
                torch.nn.functional.linear(torch.randn(32, 64, requires_grad=True), torch.randn(48, 64, requires_grad=True))
            resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        print(json.dumps([autocastgen.fp8_selections(), [str(w.message) for w in caught]]))
        """

    def run_in(folder: Path, reason: str) -> None:
        result = child_process.run_child(BUILD, "", body, env={"AUTOCASTGEN_FP8_SELECT_CACHE": str(folder), TIMES: "2,1"})
        (decision,), messages = child_process.last_json(result)
        assert (decision["source"], decision["fp8"]) == ("measured", False), decision
        wanted = f"cannot write the fp8 selection cache {folder / name}: {reason} (decisions are kept in memory)"
        assert any(wanted in m for m in messages), messages
        assert (folder / name).read_text() == previous
        assert full_disk.temporaries(folder) == []

    if fault == "file-size limit":
        (tmp_path / "cache").mkdir()
        (tmp_path / "cache" / name).write_text(previous)
        run_in(tmp_path / "cache", "File too large")
        return
    try:
        with full_disk.full_file_system({name: previous.encode()}) as folder:
            run_in(folder, "No space left on device")
    except full_disk.Unavailable as why:
        pytest.skip(str(why))


DELAYED = """\
autocast:
  device: cpu
  lower_precision: [bfloat16]
  fp8: {{scaling: delayed, amax_history_len: 4, margin: 1, select: {select}}}
lists:
  fp8: [linear, mm, addmm]
"""


def steps_with(policy, count=3):
    """Forward and gradients of `count` steps of one model whose weights change between steps, so
    that delayed scaling's history (per weight) takes part: a step's scale is the earlier steps'."""
    autocastgen.clear_runtime_policies()
    if policy is not None:
        autocastgen.load_policy(policy)
    torch.ops.autocastgen.fp8_clear_weight_cache("cpu")
    model = Model()
    results = []
    for step in range(count):
        x = torch.randn(32, 64, generator=torch.Generator().manual_seed(10 + step), requires_grad=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = model(x)
        y.float().square().mean().backward()
        results.append([y.detach(), x.grad, *(p.grad.clone() for p in model.parameters())])
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.5 * p.grad
                p.grad = None
    return results


@pytest.mark.parametrize("times, chooses_fp8", [("1,2", True), ("2,1", False)], ids=["fp8", "lower"])
def test_measured_with_delayed_scaling(times, chooses_fp8, monkeypatch):
    """A chosen GEMM runs delayed scaling exactly as select: all does, step after step (its history
    advances alike); one not chosen runs the lower precision bit for bit."""
    monkeypatch.setenv(TIMES, times)
    got = steps_with(DELAYED.format(select="measured"))
    monkeypatch.delenv(TIMES)
    want = steps_with(DELAYED.format(select="all") if chooses_fp8 else None)
    other = steps_with(None if chooses_fp8 else DELAYED.format(select="all"))
    for step, (g, w, o) in enumerate(zip(got, want, other, strict=True)):
        assert_exact(g, w, f"step {step}")
        assert not exact(g, o), f"step {step}: the two references agree, the test proves nothing"


def test_measured_classes_by_tokens_rounded_and_by_direction(monkeypatch):
    monkeypatch.setenv(TIMES, "1,2")
    load("measured")
    w = torch.randn(48, 64, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for tokens in (48, 64, 80):  # 48 and 64 share the class M64; 80 is M128
            torch.nn.functional.linear(torch.randn(tokens, 64), w)
        with torch.no_grad():
            torch.nn.functional.linear(torch.randn(64, 64), w)  # no backward: another class
    assert [(d["m"], d["backward"]) for d in autocastgen.fp8_selections()] == [(64, True), (128, True), (64, False)]


def test_a_measurement_for_real_is_consistent_and_leaves_the_random_stream(lower_precision_result, fp8_result):
    load("measured")
    x, w = torch.randn(32, 64, requires_grad=True), torch.randn(48, 64, requires_grad=True)
    before = torch.random.get_rng_state()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.nn.functional.linear(x, w)  # measured here: its values come from a private generator
    assert_exact(torch.random.get_rng_state(), before, "the measurement drew from the user's random stream")
    autocastgen.forget_fp8_selections()
    got = run()
    decisions = autocastgen.fp8_selections()
    assert len(decisions) == 3 and all(d["fp8_ms"] > 0 and d["lower_ms"] > 0 for d in decisions)
    assert all(d["fp8"] == (d["fp8_ms"] < d["lower_ms"]) for d in decisions), decisions
    if all(d["fp8"] for d in decisions):
        assert_exact(got, fp8_result)
    elif not any(d["fp8"] for d in decisions):
        assert_exact(got, lower_precision_result)


@pytest.mark.parametrize("select, times", [("auto", None), ("measured", "1,2"), ("measured", "2,1"), ("measured", None)])
def test_compiled_is_eager_bit_for_bit(select, times, monkeypatch):
    if times:
        monkeypatch.setenv(TIMES, times)
    load(select)
    torch._dynamo.reset()
    # PyTorch traces the backward inside the forward's autocast scope by default, where the
    # backward GEMMs of a linear that ran in bfloat16 meet the fp8 list as mm calls of their own
    # (docs/fp8.md, "Where fp8 pays"); eager runs them outside it. "off" is eager's behaviour.
    with torch._functorch.config.patch(backward_pass_autocast="off"):
        # The measurement, when there is one, happens while Dynamo traces (FakeTensors).
        compiled = run(lambda model: torch.compile(model, fullgraph=True, backend="aot_eager"))
    eager = run()
    assert_exact(compiled, eager)
    if select == "measured":
        assert len(autocastgen.fp8_selections()) == 3, autocastgen.fp8_selections()


def test_forgetting_the_decisions_traces_again(monkeypatch, lower_precision_result, fp8_result):
    # A compiled graph holds the decisions it was traced with; forgetting them drops it.
    monkeypatch.setenv(TIMES, "1,2")  # fp8 faster: chosen
    load("measured")
    torch._dynamo.reset()
    model, x = Model(), torch.randn(32, 64, generator=torch.Generator().manual_seed(1), requires_grad=True)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")

    def forward():
        with torch._functorch.config.patch(backward_pass_autocast="off"), torch.autocast("cpu", dtype=torch.bfloat16):
            return compiled(x).detach()

    assert_exact(forward(), fp8_result[0])
    monkeypatch.setenv(TIMES, "2,1")  # now the lower precision is
    assert_exact(forward(), fp8_result[0])  # decided once per class
    autocastgen.forget_fp8_selections(file=True)  # else they come back from the file
    assert_exact(forward(), lower_precision_result[0])


def test_bad_select_is_located():
    with pytest.raises(autocastgen.PolicyError, match=r"<string>:4:\d+: error: unknown fp8 select 'sometimes'"):
        autocastgen.load_policy(POLICY.format(select="sometimes"))


def test_the_agreement_op_is_a_real_custom_op():
    torch.library.opcheck(torch.ops.autocastgen.fp8_select_agree.default, (torch.tensor([1.5, 2.5], dtype=torch.float64),))
    assert_exact(torch.ops.autocastgen.fp8_select_agree(torch.tensor([1.5, 2.5], dtype=torch.float64)),
                 torch.tensor([1.5, 2.5], dtype=torch.float64))
