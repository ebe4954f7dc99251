"""autocastgen.export_onnx against NVIDIA ModelOpt's AutoCast and onnxconverter-common on the same
models: error against float32 and against eager under the policy, Cast nodes, ONNX Runtime latency.

  python3 bench/deploy_anchors.py                       # the models' table, markdown
  python3 bench/deploy_anchors.py --rounds 40 --runs 50 --json out.json
  python3 bench/deploy_anchors.py --models bert,bert-base --dtypes float16 --threads 2

The converters run in their own venv (bench/deploy-anchors-venv: they bring other onnx and
onnxruntime releases), on the float32 ONNX of each model that torch.onnx writes; everything is then
run and timed here, in the project's onnxruntime. A graph ONNX Runtime cannot load (no kernel for a
bfloat16 op) is run by onnx.reference instead, and has no latency. Latency is taken in turns
(bench/gpu/paired.py): --rounds rounds, each running every graph of the model for a block of
--runs calls in a rotated order; a graph's ratio in a round is its median call over the float32
graph's in that round, and the table gives the median of the rounds' ratios and their quartiles
(bench/README.md). What drifts over a run moves all graphs of a round alike. Each graph is timed
twice in the same turns: with ONNX Runtime's default optimizer, and with its SkipLayerNormFusion
off (ONNX Runtime 1.32's CPU SkipLayerNormalization is slower than the Add and LayerNormalization
it replaces: the last table, and bench/README.md). --profile-runs calls of each graph under ONNX
Runtime's profiler give the Cast nodes it runs (after its optimizer) and their share of its kernel
time: what a runtime without low-precision kernels pays for rounding.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", ROOT / "build"))
sys.path[:0] = [str(BUILD / "python"), str(ROOT / "tests" / "python"), str(ROOT / "bench" / "gpu")]

import numpy  # noqa: E402
import onnx  # noqa: E402
import onnx.reference  # noqa: E402
import onnxruntime  # noqa: E402
import torch  # noqa: E402
from paired import paired_ratios  # noqa: E402

import autocastgen  # noqa: E402
import deploy_support as ds  # noqa: E402

# What each converter is asked, as near to the policy as its rules reach (op types, node names):
# "defaults" converts the whole graph but what its built-in rules keep; "linear fp32" keeps the
# op types of linear layers in float32 (MatMul, Gemm), which takes attention's q @ k with them.
CONVERT = textwrap.dedent("""
    import json, sys, onnx
    job = json.loads(sys.argv[1])
    if job["tool"] == "modelopt":
        from modelopt.onnx.autocast import convert_to_mixed_precision
        model = convert_to_mixed_precision(job["src"], low_precision_type=job["dtype"], keep_io_types=True,
                                           op_types_to_exclude=job["exclude"] or None, providers=["cpu"])
    else:
        from onnxconverter_common import float16
        model = float16.convert_float_to_float16(onnx.load(job["src"]), keep_io_types=True,
                                                 op_block_list=(float16.DEFAULT_OP_BLOCK_LIST + job["exclude"]))
    onnx.save(model, job["out"])
""")


def float32_onnx(model: torch.nn.Module, args: tuple, path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, dynamo=True, verbose=False).save(str(path))


def convert(python: str, tool: str, src: Path, dtype: str, exclude: list[str], out: Path) -> str | None:
    job = {"tool": tool, "src": str(src), "dtype": dtype, "exclude": exclude, "out": str(out)}
    done = subprocess.run([python, "-c", CONVERT, json.dumps(job)], capture_output=True, text=True)
    if done.returncode != 0:
        return done.stderr.strip().splitlines()[-1]
    return None


# The fusion the second latency column turns off (see the module docstring).
FUSION_OFF = ["SkipLayerNormFusion"]
THREADS = 1  # ONNX Runtime's intra-op threads (--threads)


def session_options() -> Any:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = THREADS, 1
    return options


def cpu_session(path: Path, disabled_optimizers: Sequence[str] = (), options: Any = None) -> Any:
    return onnxruntime.InferenceSession(str(path), options or session_options(), providers=["CPUExecutionProvider"],
                                        disabled_optimizers=list(disabled_optimizers))


def ort_feeds(session: Any, args: tuple) -> dict[str, Any]:
    return {i.name: onnxruntime.OrtValue.ortvalue_from_numpy(a.numpy()) for i, a in zip(session.get_inputs(), args)}


def run_graph(path: Path, args: tuple) -> tuple[numpy.ndarray, str, Any]:
    """(first output as float32, what ran it, the onnxruntime session or None)."""
    try:
        session = cpu_session(path)
    except Exception:  # no kernel for a type: onnx.reference runs any
        model = onnx.load(str(path))
        evaluator = onnx.reference.ReferenceEvaluator(model)
        out = evaluator.run(None, {i.name: a.numpy() for i, a in zip(model.graph.input, args)})[0]
        return numpy.asarray(out, dtype=numpy.float32), "onnx.reference", None
    (out, *_) = autocastgen.OnnxExport(onnx.load(str(path)), "CPUExecutionProvider").run(*args, session=session)
    return out.float().numpy(), "onnxruntime", session


def latency_in_turns(sessions: dict[Any, Any], args: tuple, rounds: int, runs: int) -> dict[Any, dict]:
    """Each session's ratio to the first one's (float32 with ONNX Runtime's defaults), round by
    round (module docstring)."""
    feeds = {label: ort_feeds(session, args) for label, session in sessions.items()}
    for label, session in sessions.items():  # warm-up
        for _ in range(max(runs // 10, 5)):
            session.run_with_ort_values(None, feeds[label])
    labels = list(sessions)
    medians: dict[str, list[float]] = {label: [] for label in labels}
    for r in range(rounds):
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:
            session, feed, times = sessions[label], feeds[label], []
            for _ in range(runs):
                start = time.perf_counter()
                session.run_with_ort_values(None, feed)
                times.append(time.perf_counter() - start)
            medians[label].append(statistics.median(times))
    return {label: {**paired_ratios(medians[label], medians[labels[0]]),
                    "seconds": statistics.median(medians[label])} for label in labels}


def cast_kernels(path: Path, args: tuple, runs: int) -> dict[str, float]:
    """ONNX Runtime's profiler over `runs` calls: the Cast nodes it runs after its optimizer, their
    kernel time per call and their share of all kernels' time."""
    options = session_options()
    options.enable_profiling = True
    with tempfile.TemporaryDirectory(prefix="deploy-anchors-profile-") as folder:
        options.profile_file_prefix = str(Path(folder) / "profile")
        session = cpu_session(path, options=options)
        feeds = ort_feeds(session, args)
        for _ in range(runs):
            session.run_with_ort_values(None, feeds)
        events = json.loads(Path(session.end_profiling()).read_text())
    kernels = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    total = sum(e["dur"] for e in kernels)
    cast = [e["dur"] for e in kernels if e["args"].get("op_name") == "Cast"]
    return {"nodes": len(cast) / runs, "us": sum(cast) / runs, "share": sum(cast) / total if total else 0.0}


def casts(path: Path) -> str:
    """Cast nodes; for ours "total (the policy's + type promotion + eager's opmath + the pass's)":
    type promotion is torch.onnx's exact cast of a mixed-dtype operation's narrower operand."""
    kinds = {"policy": 0, "promotion": 0, "opmath": 0, "pass": 0}
    nodes = [n for n in onnx.load(str(path)).graph.node if n.op_type == "Cast"]
    for node in nodes:
        meta = {p.key: p.value for p in node.metadata_props}
        why = meta.get("pkg.autocastgen.rewrite", "")
        if why.startswith("a Python number"):
            kinds["opmath"] += 1
        elif why:
            kinds["pass"] += 1
        elif "'convert_element_type" in meta.get("pkg.torch.onnx.name_scopes", ""):
            kinds["promotion"] += 1
        else:
            kinds["policy"] += 1
    ours = any(kinds[k] for k in ("promotion", "opmath", "pass"))
    return f"{len(nodes)} ({' + '.join(str(v) for v in kinds.values())})" if ours else str(len(nodes))


def equal_share(out: torch.Tensor, reference: torch.Tensor) -> float:
    """The share of output elements equal to the reference's: at a deployed width GEMMs of another
    summation order than PyTorch's round a few sums the other way, and those ulps spread through the
    layers, so the largest difference is an ulp of the output's dtype for every graph."""
    return torch.eq(out.float(), reference.float()).float().mean().item()


def activation_casts(program: torch.export.ExportedProgram) -> int:
    """The program's casts of values computed from the inputs (weights' casts are folded into the
    ONNX graph's initializers, so only these become Cast nodes), with export's guard scope inlined."""
    from autocastgen._export.program import unguarded

    program = unguarded(program)
    constants = {*program.graph_signature.inputs_to_parameters, *program.graph_signature.inputs_to_buffers,
                 *program.graph_signature.inputs_to_lifted_tensor_constants}
    return sum(n.target is torch.ops.aten._to_copy.default and not (n.args[0].op == "placeholder"
               and n.args[0].name in constants) for n in program.graph.nodes)


def bert_base() -> tuple[torch.nn.Module, tuple]:
    """BERT-base's layer widths (hidden 768, 12 heads, 3072) in two layers, a sequence of 128: what
    per-node costs weigh when GEMMs are of a deployed size, not the tests' tiny config."""
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=768, num_hidden_layers=2, num_attention_heads=12,
                                     intermediate_size=3072, max_position_embeddings=128, vocab_size=1024,
                                     use_cache=False)
    return transformers.BertForMaskedLM(config).eval(), (torch.randint(0, 1024, (1, 128)),)


def measure(name: str, dtype: torch.dtype, anchors_python: str, folder: Path, rounds: int,
            runs: int, profile_runs: int) -> list[dict]:
    if name in ("mlp", "block"):
        model, x = ds.make(name)
        args, policy = (x,), ds.POLICY
    elif name == "bert-base":
        model, args = bert_base()
        policy = ds.REAL_POLICY
    else:
        model, args = ds.real_model(name)
        policy = ds.REAL_POLICY
    refs = ds.references(model, args[0], dtype, policy)
    dtype_name = str(dtype).removeprefix("torch.")
    short = {"bfloat16": "bf16", "float16": "fp16"}[dtype_name]
    src = folder / f"{name}_float32.onnx"
    float32_onnx(model, args, src)
    program = ds.baked_program(model, args, dtype=dtype, policy=policy)
    baked_casts = activation_casts(program)
    graphs = {"float32 (torch.onnx)": (src, None)}
    ours = autocastgen.export_onnx(program, path=folder / f"{name}_{short}_ours.onnx")
    graphs["ours"] = (folder / f"{name}_{short}_ours.onnx", None)
    if dtype == torch.float16:  # ONNX Runtime runs float16 ops it has no kernel for in float32 itself
        autocastgen.export_onnx(program, no_kernel="keep", path=folder / f"{name}_{short}_ours_keep.onnx")
        graphs["ours, no_kernel=\"keep\""] = (folder / f"{name}_{short}_ours_keep.onnx", None)
    linear_ops = ["MatMul", "Gemm"] if policy is ds.POLICY else []
    jobs = [("modelopt", "ModelOpt AutoCast, defaults", []),
            ("modelopt", "ModelOpt AutoCast, MatMul/Gemm fp32", linear_ops)]
    if dtype == torch.float16:
        jobs += [("onnxconverter", "onnxconverter-common, defaults", []),
                 ("onnxconverter", "onnxconverter-common, MatMul/Gemm fp32", linear_ops)]
    for tool, label, exclude in jobs:
        if label.endswith("fp32") and not exclude:
            continue  # the real model's policy keeps its GEMMs in the lower-precision dtype
        out = folder / f"{name}_{short}_{tool}_{len(exclude)}.onnx"
        error = convert(anchors_python, tool, src, short, exclude, out)
        graphs[label] = (out, error)
    rows, sessions = [], {}
    for label, (path, error) in graphs.items():
        row = {"model": name, "dtype": dtype_name, "graph": label}
        if error is not None:
            rows.append({**row, "error": error})
            continue
        try:
            out, ran_in, session = run_graph(path, args)
        except Exception as failure:  # noqa: BLE001 - reported in the table
            rows.append({**row, "error": f"{type(failure).__name__}: {str(failure).splitlines()[0][:120]}"})
            continue
        if session is not None:
            sessions[label] = session
            sessions[label, "fusion off"] = cpu_session(path, FUSION_OFF)
            if profile_runs:
                row["cast kernels"] = cast_kernels(path, args, profile_runs)
        out = torch.from_numpy(out)
        row.update({"vs float32": ds.distance(out, refs["float32"]), "vs eager": ds.distance(out, refs["eager"]),
                    "vs default": ds.distance(out, refs["default"]), "mean vs eager": ds.mean_distance(out, refs["eager"]),
                    "equal to eager": equal_share(out, refs["eager"]), "casts": casts(path), "ran in": ran_in})
        if label == "ours":
            row["ours in float32"] = len(ours.in_float32)
        rows.append(row)
    if rounds and "float32 (torch.onnx)" in sessions:
        latency = latency_in_turns(sessions, args, rounds, runs)
        for row in rows:
            if row["graph"] in latency:
                row["latency"] = latency[row["graph"]]
                row["latency, fusion off"] = latency[row["graph"], "fusion off"]
    rows.append({"model": name, "dtype": dtype_name, "graph": "eager under the policy (reference)",
                 "vs float32": ds.distance(refs["eager"], refs["float32"]), "vs eager": 0.0, "equal to eager": 1.0,
                 "vs default": ds.distance(refs["eager"], refs["default"]), "casts": baked_casts,
                 "ran in": "PyTorch eager"})
    return rows


def skip_layer_norm(folder: Path, rounds: int, runs: int) -> str:
    """BERT-base's residual and norm (128 x 768, float32) as Add + LayerNormalization, with ONNX
    Runtime's defaults (which fuse them into its SkipLayerNormalization) and with the fusion off."""
    from onnx import TensorProto, helper

    width = 768
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "skip"], ["sum"]),
         helper.make_node("LayerNormalization", ["sum", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-12)],
        "residual_norm", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 128, width]) for n in ("x", "skip")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128, width])],
        [helper.make_tensor("gamma", TensorProto.FLOAT, [width], numpy.ones(width, numpy.float32)),
         helper.make_tensor("beta", TensorProto.FLOAT, [width], numpy.zeros(width, numpy.float32))])
    path = folder / "residual_norm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    sessions = {"Add + LayerNormalization (fusion off)": cpu_session(path, FUSION_OFF),
                "SkipLayerNormalization (ONNX Runtime's defaults)": cpu_session(path)}
    torch.manual_seed(0)
    args = (torch.randn(1, 128, width), torch.randn(1, 128, width))
    latency = latency_in_turns(sessions, args, rounds, runs)
    lines = ["| BERT-base's residual + norm, float32 | us a call | / fusion off (quartiles) |", "|---|---:|---:|"]
    for label, turns in latency.items():
        lines.append(f"| {label} | {1e6 * turns['seconds']:.0f} | {turns['median']:.2f} ({turns['q1']:.2f}-{turns['q3']:.2f}) |")
    return "\n".join(lines)


def table(rows: list[dict]) -> str:
    lines = ["| model | dtype | graph | vs float32 | vs eager (mean) | = eager | vs default lists | Casts (ours: policy's + promotion + opmath + pass's) | ran in | latency / float32 (quartiles) | the same, SkipLayerNormFusion off | Casts run, us a call (share) |",
             "|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['dtype']} | {r['graph']} | | | | | | fails: {r['error']} | | | |")
            continue
        mean = f" ({r['mean vs eager']:.1e})" if "mean vs eager" in r else ""
        latency, fusion_off = (f"{t['median']:.2f} ({t['q1']:.2f}-{t['q3']:.2f})" if t else "-"
                               for t in (r.get("latency"), r.get("latency, fusion off")))
        profile = r.get("cast kernels")
        cast_time = f"{profile['nodes']:.0f}, {profile['us']:.0f} ({100 * profile['share']:.1f} %)" if profile else "-"
        lines.append(f"| {r['model']} | {r['dtype']} | {r['graph']} | {r['vs float32']:.1e} | {r['vs eager']:.1e}{mean} "
                     f"| {100 * r['equal to eager']:.1f} % "
                     f"| {r['vs default']:.1e} | {r['casts']} | {r['ran in']} | {latency} | {fusion_off} | {cast_time} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,block,bert,bert-base")
    parser.add_argument("--dtypes", default="bfloat16,float16")
    parser.add_argument("--rounds", type=int, default=20, help="turns of all graphs (0: no latency)")
    parser.add_argument("--runs", type=int, default=50, help="calls per graph in a turn")
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime's intra-op threads")
    parser.add_argument("--profile-runs", type=int, default=200, help="calls under the profiler (0: none)")
    parser.add_argument("--anchors-python", help="python with ModelOpt and onnxconverter-common "
                        "(default: bench/deploy-anchors-venv's)")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    anchors = options.anchors_python or subprocess.run(
        [str(ROOT / "bench" / "deploy-anchors-venv")], capture_output=True, text=True, check=True).stdout.strip()
    global THREADS
    THREADS = options.threads
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory(prefix="deploy-anchors-") as tmp:
        for name in options.models.split(","):
            for dtype in options.dtypes.split(","):
                rows += measure(name, getattr(torch, dtype), anchors, Path(tmp), options.rounds, options.runs,
                                options.profile_runs)
    print(f"PyTorch {torch.__version__}, onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}, "
          f"{options.threads} thread(s), {options.rounds} rounds of {options.runs} calls, load average {os.getloadavg()[0]:.1f}")
    print(table(rows))
    if options.rounds:
        with tempfile.TemporaryDirectory(prefix="deploy-anchors-") as tmp:
            print()
            print(skip_layer_norm(Path(tmp), options.rounds, options.runs))
    if options.json:
        options.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
