"""autocastgen.export_onnx: the programs of issue 49 (an MLP and a causal attention block, bfloat16
and float16, the policy baked in two ways) as ONNX that passes onnx.checker, loads and runs in ONNX
Runtime on the CPU, and gives eager's results under the policy (docs/deploy.md).

ctest sets AUTOCASTGEN_BUILD_DIR; by hand:
  AUTOCASTGEN_BUILD_DIR=build python3 -m pytest tests/python/deploy/test_deploy_onnx.py
"""
from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import deploy_support as ds  # noqa: E402

autocastgen = ds.import_autocastgen()
import onnx  # noqa: E402
import onnxruntime  # noqa: E402

from autocastgen._export import program as export_program  # noqa: E402
from autocastgen.deploy._onnx import elem_types  # noqa: E402
from autocastgen.deploy._onnx import kernels as onnx_kernels  # noqa: E402
from autocastgen.deploy._onnx import passes as onnx_pass  # noqa: E402
from exact import assert_exact, exact  # noqa: E402

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def test_the_element_types_are_onnxs() -> None:
    # The export's sets of types are made before onnx is imported (Note [optional packages]).
    names = [name for name in vars(elem_types) if name.isupper()]
    assert len(names) == 13 and {name: getattr(elem_types, name) for name in names} == \
        {name: getattr(onnx.TensorProto, name) for name in names}


@functools.cache
def case(name: str, dtype: str, baked: str) -> tuple:
    """(model, input, references, program, export) for one of the eight graphs."""
    model, x = ds.make(name)
    make = ds.baked_program if baked == "baked" else ds.scoped_program
    program = make(model, (x,), dtype=DTYPES[dtype])
    return model, x, ds.references(model, x, DTYPES[dtype]), program, autocastgen.export_onnx(program)


@pytest.mark.parametrize("baked", ["baked", "scoped"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["mlp", "block"])
def test_the_eight_graphs_run_in_onnxruntime_as_eager_ran_them(name: str, dtype: str, baked: str) -> None:
    model, x, refs, program, export = case(name, dtype, baked)
    # autocastgen.export, and the policy decomposed under a scope in forward, bake eager's casts bit for bit.
    assert_exact(ds.first(program.module()(x)), refs["eager"])
    onnx.checker.check_model(export.model, full_check=True)
    (out,) = export.run(x)
    assert out.dtype == torch.float32
    assert ds.distance(out, refs["eager"]) < ds.distance(out, refs["float32"])
    assert ds.distance(out, refs["eager"]) < ds.distance(out, refs["default"])
    if name == "block":
        # Every op with a low-precision result ends in one rounding, as eager's do: the same bits.
        assert_exact(out, refs["eager"])
    else:
        # LayerNorm and softmax compute in float32, in ONNX Runtime's own order.
        assert ds.distance(out, refs["eager"]) < 1e-7


def test_without_the_pass_onnxruntime_refuses_or_drops_the_rounding() -> None:
    model, x, refs, program, _ = case("block", "bfloat16", "baked")
    kept = autocastgen.export_onnx(program, no_kernel="keep", check=False)
    assert {n.op for n in kept.no_kernel} == {"MatMul", "Where", "Softmax", "Gelu"}
    with pytest.raises(Exception, match="NOT_IMPLEMENTED|Could not find an implementation"):
        kept.session()
    # float16: ONNX Runtime runs the nodes it has no kernel for in float32 itself and drops the
    # casts between them, so its result leaves eager's.
    model, x, refs, program, _ = case("block", "float16", "baked")
    (out,) = autocastgen.export_onnx(program, no_kernel="keep").run(x)
    assert out.dtype == refs["eager"].dtype and not exact(out, refs["eager"])


def test_mixed_layernorm_operands_computed_in_float32() -> None:
    _, _, _, _, export = case("mlp", "bfloat16", "baked")
    assert [(n.op, n.dtypes, n.module) for n in export.mixed] == [
        ("LayerNormalization", ("bfloat16", "float"), "norm")]
    graph = onnx_pass.Graph(export.model)
    (norm,) = [n for n in graph.nodes if n.op_type == "LayerNormalization"]
    assert [graph.types[name] for name in norm.input] == [onnx.TensorProto.FLOAT] * 3
    (after,) = [n for n in graph.nodes if norm.output[0] in n.input]
    assert after.op_type == "Cast" and after.attribute[0].i == onnx.TensorProto.BFLOAT16


def test_module_paths_and_rewrites_in_node_metadata() -> None:
    _, _, _, _, export = case("block", "bfloat16", "baked")
    # Standard ONNX only: nothing of ours (no custom domain, no functions) is needed to run it.
    assert {o.domain for o in export.model.opset_import} <= {"", "ai.onnx"} and not export.model.functions
    props = [{p.key: p.value for p in n.metadata_props} for n in export.model.graph.node]
    by_module = {}
    for node, meta in zip(export.model.graph.node, props):
        by_module.setdefault(meta.get(onnx_pass.MODULE_KEY), set()).add(node.op_type)
    assert {"", "norm", "qkv", "proj", "mlp.fc1", "mlp.act", "mlp.fc2"} <= set(by_module)
    assert "Gelu" in by_module["mlp.act"] and "MatMul" in by_module["qkv"]
    # q @ k and attention @ v are the block's own MatMuls, in bfloat16 (PyTorch's list), run in
    # float32 with a rounding; the linear layers' are float32 (the policy): metadata tells them apart.
    rewritten = {(n.op_type, meta[onnx_pass.MODULE_KEY]) for n, meta in zip(export.model.graph.node, props)
                 if meta.get(onnx_pass.REWRITE_KEY) == "run in float32"}
    assert ("MatMul", "") in rewritten and ("Gelu", "mlp.act") in rewritten
    assert not {m for op, m in rewritten if op == "MatMul"} - {""}
    assert {str(n) for n in export.no_kernel} >= {"Gelu 'node_gelu' (bfloat16) in 'mlp.act'"}
    casts = [meta for n, meta in zip(export.model.graph.node, props) if n.op_type == "Cast"
             and meta.get(onnx_pass.REWRITE_KEY, "").startswith("rounds")]
    assert casts and all(onnx_pass.MODULE_KEY in meta for meta in casts)


def test_a_rounding_between_two_float32_nodes_survives_onnxruntime() -> None:
    # Note [the ONNX pass]: Cast(float->low)->Cast(low->float) is the rounding; no level drops it.
    x = torch.tensor([1.0001, 3.14159, 1e-3, 7.77777])
    for low, dtype in ((onnx.TensorProto.BFLOAT16, torch.bfloat16), (onnx.TensorProto.FLOAT16, torch.float16)):
        graph = onnx.helper.make_graph(
            [onnx.helper.make_node("Cast", ["x"], ["a"], to=low), onnx.helper.make_node("Cast", ["a"], ["b"], to=1),
             onnx.helper.make_node("Add", ["b", "b"], ["y"])], "g",
            [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])],
            [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])])
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 20)])
        for level in (onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL,
                      onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL):
            options = onnxruntime.SessionOptions()
            options.graph_optimization_level = level
            session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            assert_exact(torch.from_numpy(session.run(None, {"x": x.numpy()})[0]), x.to(dtype).float() * 2)


def test_wasted_casts_finds_a_rounding_of_a_rounded_value() -> None:
    # A Neg in float32 (no float16 kernel) needs its casts; a Reshape (which has one) does not.
    low = onnx.TensorProto.FLOAT16
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Cast", ["x"], ["up"], name="up", to=1),
         onnx.helper.make_node("Reshape", ["up", "shape"], ["moved"], name="move"),
         onnx.helper.make_node("Cast", ["moved"], ["y"], name="again", to=low),
         onnx.helper.make_node("Cast", ["x"], ["up2"], name="twice", to=1),
         onnx.helper.make_node("Neg", ["up2"], ["negated"], name="neg"),
         onnx.helper.make_node("Cast", ["negated"], ["z"], name="needed", to=low)], "g",
        [onnx.helper.make_tensor_value_info("x", low, [4])],
        [onnx.helper.make_tensor_value_info("y", low, [4]), onnx.helper.make_tensor_value_info("z", low, [4])],
        [onnx.helper.make_tensor("shape", onnx.TensorProto.INT64, [1], [4])])
    assert [w.split(":")[0] for w in ds.wasted_casts(onnx.helper.make_model(graph))] == ["again", "twice"]


def test_an_input_cast_up_reuses_the_programs_cast_of_that_value() -> None:
    # The program casts x up after the Sqrt the pass runs in float32: the pass takes that Cast
    # (moved up to right after x) instead of adding a second one, and the values are eager's bits.
    half, float32 = onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT
    model = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Sqrt", ["x"], ["root"], name="sqrt"),
         onnx.helper.make_node("Cast", ["x"], ["wide"], name="programs_cast", to=float32),
         onnx.helper.make_node("Add", ["wide", "wide"], ["twice"], name="add")], "g",
        [onnx.helper.make_tensor_value_info("x", half, [5])],
        [onnx.helper.make_tensor_value_info("root", half, [5]), onnx.helper.make_tensor_value_info("twice", float32, [5])]),
        opset_imports=[onnx.helper.make_opsetid("", 20)])
    graph = onnx_pass.Graph(model)
    onnx_pass.run_in_float32(graph, [n for n in graph.nodes if n.name == "sqrt"])
    graph.commit()
    onnx.checker.check_model(model, full_check=True)  # the moved Cast keeps the graph in order
    assert [n.name for n in model.graph.node if n.op_type == "Cast" and n.input[0] == "x"] == ["programs_cast"]
    x = torch.tensor([2.0, 3.0, 0.1, 1e-4, 60000.0], dtype=torch.float16)
    root, twice = autocastgen.OnnxExport(model, "CPUExecutionProvider").run(x)
    assert_exact(root, torch.sqrt(x))
    assert_exact(twice, x.float() * 2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["mlp", "block"])
def test_onnxruntime_runs_no_cast_that_could_be_left_out(name: str, dtype: str, tmp_path: Path) -> None:
    # The rounding eager does after each op is all that ours pays over float32 on ONNX Runtime's
    # CPU provider (bench/README.md, deploy_anchors.py): what the runtime runs after its optimizer
    # (which merges the policy's repeated casts of one input) has no Cast that could be left out.
    export = case(name, dtype, "baked")[4]
    runs = ds.graph_onnxruntime_runs(export, tmp_path)
    assert sum(n.op_type == "Cast" for n in runs.graph.node) >= 4
    assert ds.wasted_casts(runs) == []


def test_elementwise_chains_round_after_every_op_bit_for_bit() -> None:
    # Each op of the chain has no bfloat16 kernel in ONNX Runtime: each runs in float32 and rounds,
    # which is what PyTorch's CPU kernels compute; the results are eager's bits.
    class Chain(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return (torch.sqrt(x.abs() + y) * y - x / (y + 3)).exp()

    torch.manual_seed(3)
    for dtype in DTYPES.values():
        x, y = torch.randn(64, 33).to(dtype), torch.rand(64, 33).to(dtype)
        eager = Chain()(x, y)
        export = autocastgen.export_onnx(ds.baked_program(Chain(), (x, y), dtype=dtype))
        (out,) = export.run(x, y)
        assert out.dtype == dtype
        assert_exact(out, eager)
        assert {n.op for n in export.in_float32} >= {"Sqrt", "Mul", "Div", "Exp"}


def test_no_kernel_choices_and_refusals() -> None:
    _, x, _, program, _ = case("block", "bfloat16", "baked")
    with pytest.raises(autocastgen.DeployError, match=r"CPUExecutionProvider has no kernel for 5 node\(s\).*"
                       r"Gelu 'node_gelu' \(bfloat16\) in 'mlp.act'"):
        autocastgen.export_onnx(program, no_kernel="error")
    with pytest.raises(ValueError, match="no_kernel='fast'"):
        autocastgen.export_onnx(program, no_kernel="fast")
    with pytest.raises(autocastgen.DeployError, match="deployed as it was baked"):
        autocastgen.export_onnx(program, dtype=torch.bfloat16)
    unbaked = torch.export.export(ds.Scoped(ds.make("mlp")[0], torch.bfloat16), (x,))
    with pytest.raises(autocastgen.DeployError, match="not baked: node .* is an autocast scope"):
        autocastgen.export_onnx(unbaked)
    with pytest.raises(autocastgen.DeployError, match="needs dtype="):
        autocastgen.export_onnx(ds.make("mlp")[0], (x,), device="cpu")


def test_a_module_is_baked_by_autocastgen_export_and_its_record_kept() -> None:
    """export_onnx(module, args, device=, dtype=, policy=) bakes through autocastgen.export: the same
    graph as deploying the baked program, and the program's record in the ONNX model's metadata."""
    model, x = ds.make("block")
    refs = ds.references(model, x, torch.bfloat16)
    direct = autocastgen.export_onnx(model, (x,), device="cpu", dtype=torch.bfloat16, policy=ds.POLICY)
    baked = autocastgen.export_onnx(ds.baked_program(model, (x,), dtype=torch.bfloat16))
    (out,) = direct.run(x)
    assert_exact(out, refs["eager"])
    assert_exact(out, baked.run(x)[0])
    props = {p.key: p.value for p in direct.model.metadata_props}
    record = autocastgen.export(model, (x,), device="cpu", dtype=torch.bfloat16,
                                policy=ds.POLICY).graph_module.meta["custom"]["autocastgen"]
    assert record, "autocastgen.export records the policy it baked"
    for key, value in record.items():
        assert props[f"pkg.autocastgen.{key}"] == (value if isinstance(value, str) else json.dumps(value, sort_keys=True))


def test_the_kernel_table_is_onnxruntimes() -> None:
    table = onnx_kernels.KernelTable("CPUExecutionProvider")
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []),
                                   opset_imports=[onnx.helper.make_opsetid("", 20)])
    graph = onnx_pass.Graph(model)

    def has(op: str, types: dict[str, int]) -> bool:
        node = onnx.helper.make_node(op, [], [])
        schema = graph.schema(node)
        return table.has_kernel(node, schema, {param: [("input", 0, t)] for param, t in types.items()})

    assert has("MatMul", {"T": onnx.TensorProto.FLOAT})
    assert not has("MatMul", {"T": onnx.TensorProto.BFLOAT16})
    assert has("LayerNormalization", {"T": onnx.TensorProto.BFLOAT16, "U": onnx.TensorProto.FLOAT})
    with pytest.raises(ValueError, match="no kernels for the execution provider 'NoSuchExecutionProvider'"):
        onnx_kernels.KernelTable("NoSuchExecutionProvider")


def test_the_callers_program_is_left_as_it_was() -> None:
    _, x, refs, program, _ = case("block", "bfloat16", "baked")
    before = program.graph_module.code
    autocastgen.export_onnx(program, check=False)
    assert program.graph_module.code == before


class Attention(torch.nn.Module):
    """torch's fused attention (PyTorch's CPU list runs it in the lower-precision dtype), grouped."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(32, 96)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).view(2, 16, 3, 4, 8).permute(2, 0, 3, 1, 4)
        return torch.nn.functional.scaled_dot_product_attention(q, k[:, :2], v[:, :2], is_causal=True,
                                                                enable_gqa=True)


def test_fused_attention_as_eagers_kernel_computes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # Note [attention in low precision]: against PyTorch's translation run in float32 with one
    # rounding, a tenth of the differing outputs.
    from autocastgen.deploy._onnx import fp8 as onnx_fp8
    from autocastgen.deploy._onnx import translations as onnx_translations

    torch.manual_seed(0)
    model, x = Attention().eval(), torch.randn(2, 16, 32)
    refs = ds.references(model, x, torch.bfloat16)
    program = ds.baked_program(model, (x,), dtype=torch.bfloat16)
    (ours,) = autocastgen.export_onnx(program).run(x)
    monkeypatch.setattr(onnx_translations, "translations",
                        lambda: {torch.ops.aten._scaled_mm.default: onnx_fp8.scaled_mm_to_onnx})
    (plain,) = autocastgen.export_onnx(program).run(x)
    differing = [(out.float() != refs["eager"]).float().mean().item() for out in (ours, plain)]
    assert differing[0] < 0.1 < 0.2 < differing[1], differing
    assert ds.mean_distance(ours, refs["eager"]) < ds.mean_distance(ours, refs["float32"]) / 10


def test_the_policys_casts_are_eagers() -> None:
    # The Casts without pkg.autocastgen.rewrite are the program's: the casts eager made on values
    # computed from the inputs (weights' casts are folded into bfloat16 initializers).
    _, _, _, program, export = case("block", "bfloat16", "baked")
    program = export_program.unguarded(program)  # the body out of autocastgen.export's guard scope
    constants = {*program.graph_signature.inputs_to_parameters, *program.graph_signature.inputs_to_buffers}
    eager_casts = [n for n in program.graph.nodes if n.target is torch.ops.aten._to_copy.default
                   and not (n.args[0].op == "placeholder" and n.args[0].name in constants)]
    reasons = [{p.key: p.value for p in n.metadata_props}.get(onnx_pass.REWRITE_KEY)
               for n in export.model.graph.node if n.op_type == "Cast"]
    assert reasons.count(None) == len(eager_casts) == 6
    # q @ k * 0.35355339: eager's float32 opmath, written as a cast up, the Mul, a cast down.
    opmath = "a Python number's arithmetic in float32, as eager's"
    assert reasons.count(opmath) == 2
    assert [n.op_type for n in export.model.graph.node
            if any(p.value == opmath for p in n.metadata_props)].count("Mul") == 1
