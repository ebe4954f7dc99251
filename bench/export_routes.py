"""autocastgen's ONNX route against transformers' own ONNX exporter (``transformers.exporters``) on
the same model (issue 57, item 3): accuracy against float32 eager and against eager under the
policy, Cast nodes, ONNX Runtime latency. As deploy_anchors.py does for ModelOpt, whose helpers it
uses (latency taken in turns, bench/gpu/paired.py; Casts by their node metadata).

  $(scripts/models-venv) bench/export_routes.py                       # the table, markdown
  $(scripts/models-venv) bench/export_routes.py --models llama --dtypes bfloat16 --rounds 10 --json out.json

Graphs of a causal LM's logits (no cache: ``use_cache=False``), one thread:
- float32: transformers' OnnxExporter (its defaults: onnxscript's optimizer on), the latency base;
- transformers, model in DTYPE: the same exporter on ``model.to(DTYPE)`` (its route to a
  lower precision: the whole model in it; transformers has no mixed precision of its own);
- ours: ``autocastgen.export_onnx`` of ``autocastgen.export`` under the shipped CPU policy;
- ours on transformers' Dynamo program: ``autocastgen.apply_policy`` of the program its
  DynamoExporter made (the route of docs/export.md, "transformers' exporters"), then ``export_onnx``.
References: eager under the policy (the shipped CPU policy, torch.autocast) and eager with the
model in DTYPE. A graph ONNX Runtime cannot load (no bfloat16 kernels on the CPU) is run by
onnx.reference and has no latency.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import deploy_anchors as da  # noqa: E402  (puts the build's package, tests/python and bench/gpu on sys.path)
import onnx  # noqa: E402
import torch  # noqa: E402

import autocastgen  # noqa: E402

MODELS = {
    # name: (LlamaConfig fields, batch, tokens)
    "llama": (dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2), 2, 16),
    "llama-wide": (dict(vocab_size=2048, hidden_size=512, intermediate_size=1408, num_hidden_layers=2,
                        num_attention_heads=8, num_key_value_heads=4), 1, 128),
}


class Logits(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


def build(name: str) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    import transformers

    fields, batch, tokens = MODELS[name]
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(max_position_embeddings=256, **fields)).eval()
    ids = torch.randint(0, fields["vocab_size"], (batch, tokens), generator=torch.Generator().manual_seed(1))
    return model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def theirs(model: torch.nn.Module, inputs: dict[str, torch.Tensor], path: Path) -> None:
    """transformers' OnnxExporter, its defaults, the logits only."""
    from transformers.exporters import OnnxConfig, OnnxExporter

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exported = OnnxExporter().export(model, {**inputs, "use_cache": False}, OnnxConfig())
    OnnxExporter.save_program(exported.program, path)


def dynamo_program(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> torch.export.ExportedProgram:
    from transformers.exporters import DynamoConfig, DynamoExporter

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return DynamoExporter().export(model, {**inputs, "use_cache": False}, DynamoConfig()).program


def eager_under_policy(model: torch.nn.Module, inputs: dict[str, torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    autocastgen.load_policy(autocastgen.shipped_policy("cpu"))
    try:
        with torch.no_grad(), autocastgen.attach(model), torch.autocast("cpu", dtype=dtype):
            return Logits(model)(**inputs)
    finally:
        autocastgen.clear_runtime_policies()


def ours(program: torch.export.ExportedProgram, path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        autocastgen.export_onnx(program, path=path)


def count_casts(path: Path) -> int:
    return sum(node.op_type == "Cast" for node in onnx.load(str(path)).graph.node)


def measure(name: str, dtype: torch.dtype, folder: Path, rounds: int, runs: int) -> list[dict[str, Any]]:
    model, inputs = build(name)
    args = (inputs["input_ids"], inputs["attention_mask"])
    low = str(dtype).removeprefix("torch.")
    with torch.no_grad():
        float32 = Logits(model)(**inputs)
        in_dtype = Logits(copy.deepcopy(model).to(dtype))(**inputs)
    eager = eager_under_policy(model, inputs, dtype)
    shipped = str(autocastgen.shipped_policy("cpu"))
    graphs: dict[str, Any] = {}

    def make(label: str, write: Any) -> None:
        path = folder / f"{name}-{low}-{len(graphs)}.onnx"
        try:
            write(path)
            graphs[label] = path
        except Exception as error:  # noqa: BLE001 - a route that fails is a row that says so
            graphs[label] = f"fails: {type(error).__name__}: {str(error).splitlines()[0][:120]}"

    make("float32 (transformers' exporter)", lambda p: theirs(model, inputs, p))
    make(f"transformers' exporter, model in {low}", lambda p: theirs(copy.deepcopy(model).to(dtype), inputs, p))
    make("ours (autocastgen.export, export_onnx)", lambda p: ours(
        autocastgen.export(Logits(model), args, device="cpu", dtype=dtype, policy=shipped), p))

    def on_theirs(path: Path) -> None:
        autocastgen.load_policy(shipped)
        try:
            program = autocastgen.apply_policy(dynamo_program(model, inputs), device="cpu", dtype=dtype)
        finally:
            autocastgen.clear_runtime_policies()
        ours(program, path)

    make("ours on transformers' Dynamo program (apply_policy, export_onnx)", on_theirs)

    rows, sessions = [], {}
    for label, path in graphs.items():
        row: dict[str, Any] = {"model": name, "dtype": low, "graph": label}
        if isinstance(path, str):
            rows.append({**row, "ran": path})
            continue
        out, ran, session = da.run_graph(path, args)
        out = torch.from_numpy(out)
        row.update(vs_float32=(out - float32).abs().max().item(), vs_eager=(out - eager.float()).abs().max().item(),
                   vs_eager_mean=(out - eager.float()).abs().mean().item(), equal=da.equal_share(out, eager),
                   casts=da.casts(path) if label.startswith("ours") else str(count_casts(path)), ran=ran,
                   nodes=len(onnx.load(str(path)).graph.node))
        if session is not None:
            sessions[label] = session
        rows.append(row)
    for label, reference in ((f"eager, model in {low} (reference)", in_dtype),
                             ("eager under the policy (reference)", eager)):
        rows.append({"model": name, "dtype": low, "graph": label,
                     "vs_float32": (reference.float() - float32).abs().max().item(),
                     "vs_eager": (reference.float() - eager.float()).abs().max().item(),
                     "vs_eager_mean": (reference.float() - eager.float()).abs().mean().item(),
                     "equal": da.equal_share(reference, eager), "casts": "-", "ran": "PyTorch eager"})
    if sessions and next(iter(graphs)) in sessions:
        timed = da.latency_in_turns(sessions, args, rounds, runs)
        for row in rows:
            if row["graph"] in timed:
                row["latency"] = timed[row["graph"]]
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | dtype | graph | vs float32 | vs eager (mean) | = eager | Casts | nodes | ran in | "
             "latency / float32 (quartiles) | us a call |",
             "|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|"]
    for row in rows:
        if "vs_float32" not in row:
            lines.append(f"| {row['model']} | {row['dtype']} | {row['graph']} | | | | | | {row['ran']} | | |")
            continue
        latency = row.get("latency")
        timing = (f"{latency['median']:.2f} ({latency['q1']:.2f}-{latency['q3']:.2f}) | {latency['seconds'] * 1e6:.0f}"
                  if latency else "- | -")
        lines.append(f"| {row['model']} | {row['dtype']} | {row['graph']} | {row['vs_float32']:.1e} | "
                     f"{row['vs_eager']:.1e} ({row['vs_eager_mean']:.1e}) | {100 * row['equal']:.1f} % | {row['casts']} | "
                     f"{row.get('nodes', '-')} | {row['ran']} | {timing} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--dtypes", default="bfloat16,float16")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json")
    args = parser.parse_args()
    da.THREADS = args.threads
    torch.set_num_threads(args.threads)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="export-routes-") as folder:
        for name in args.models.split(","):
            for dtype in args.dtypes.split(","):
                rows += measure(name, getattr(torch, dtype), Path(folder), args.rounds, args.runs)
                print(table(rows[-6:]), file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    print(table(rows))


if __name__ == "__main__":
    main()
