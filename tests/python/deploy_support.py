"""What the deployment tests share: the models of issue 49 (an MLP and a causal attention block),
their policy, the baked programs, and the references (eager under the policy, float32, PyTorch's
default lists).

`baked_program` is autocastgen.export (issue 48): torch.export of the model as eager runs it, then
the policy's casts baked, places kept, the program guarded against autocast twice.
"""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import torch

import requires
from built_tree import require_built
from export_checks import ISSUE_POLICY

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", ROOT / "build"))


def import_autocastgen() -> ModuleType:
    """The build's autocastgen package, with onnx, onnxscript and onnxruntime (scripts/requirements.txt);
    the test module is skipped where the build or they are missing, an error where ctest runs it
    (built_tree.py; requires.py: with the pinned PyTorch, which scripts/setup installs them beside)."""
    require_built(BUILD, "python/autocastgen/deploy/__init__.py")
    for package in ("onnx", "onnxscript", "onnxruntime"):
        requires.module(package)
    import autocastgen

    return autocastgen

POLICY = ISSUE_POLICY  # export's (export_checks.py): GELU lower, linear layers' GEMMs float32

# For the real models: attention and the norms in float32, GELU in the lower-precision dtype, the
# GEMMs (linear, addmm, matmul, conv) in it as PyTorch's CPU lists say.
REAL_POLICY = """\
autocast: {device: cpu, lower_precision: [bfloat16, float16]}
lists:
  fp32: [scaled_dot_product_attention, batch_norm, layer_norm]
  lower_precision_fp: [gelu]
"""

FP8_POLICY = """\
autocast: {device: cpu, lower_precision: [bfloat16], fp8: {scaling: %s, granularity: %s}}
lists:
  fp8: [linear, mm, addmm]
"""


def fp8_model() -> tuple[torch.nn.Module, torch.Tensor]:
    """Linear - GELU - Linear with GEMM dimensions fp8 takes (multiples of 16)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 16)).eval()
    return model, torch.randn(16, 32)


class MLP(torch.nn.Module):
    """Linear - GELU - LayerNorm - Linear - softmax."""

    def __init__(self, width: int = 32, hidden: int = 64):
        super().__init__()
        self.fc1 = torch.nn.Linear(width, hidden)
        self.act = torch.nn.GELU()
        self.norm = torch.nn.LayerNorm(hidden)
        self.fc2 = torch.nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.fc2(self.norm(self.act(self.fc1(x)))), dim=-1)


class Block(torch.nn.Module):
    """A causal self-attention block with a residual MLP."""

    def __init__(self, width: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.norm = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.mlp = MLP(width, 2 * width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        q, k, v = (t.view(batch, tokens, self.heads, -1).transpose(1, 2)
                   for t in self.qkv(self.norm(x)).chunk(3, dim=-1))
        scores = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
        causal = torch.ones(tokens, tokens, dtype=torch.bool).tril()
        attention = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (attention @ v).transpose(1, 2).reshape(batch, tokens, width)
        return x + self.proj(y) + self.mlp.fc2(self.mlp.act(self.mlp.fc1(x)))


class Scoped(torch.nn.Module):
    """A model whose forward opens the autocast scope itself (the other way users bake casts)."""

    def __init__(self, inner: torch.nn.Module, dtype: torch.dtype):
        super().__init__()
        self.inner = inner
        self.dtype = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=self.dtype):
            return self.inner(x)


def make(name: str) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = {"mlp": MLP, "block": Block}[name]().eval()
    return model, torch.randn(4, 8, 32)


@contextlib.contextmanager
def policy_loaded(policy: str = POLICY) -> Iterator[None]:
    import autocastgen

    autocastgen.load_policy(policy)
    try:
        yield
    finally:
        autocastgen.clear_runtime_policies()


def baked_program(model: torch.nn.Module, args: tuple, *, device: str = "cpu", dtype: torch.dtype,
                  policy: str = POLICY) -> torch.export.ExportedProgram:
    """The policy baked into the model's program by autocastgen.export."""
    import autocastgen

    with torch.no_grad():
        return autocastgen.export(model, args, device=device, dtype=dtype, policy=policy)


def scoped_program(model: torch.nn.Module, args: tuple, *, dtype: torch.dtype,
                   policy: str = POLICY) -> torch.export.ExportedProgram:
    """The scope inside forward, decomposed while the policy is loaded."""
    program = torch.export.export(Scoped(model, dtype), args)
    with policy_loaded(policy), torch.no_grad():
        return program.run_decompositions({})


def references(model: torch.nn.Module, x: torch.Tensor, dtype: torch.dtype,
               policy: str = POLICY) -> dict[str, torch.Tensor]:
    """Eager under the policy in its own dtype (what a deployment gives bit for bit, where it does),
    and float32 and PyTorch's default lists as float32 tensors."""
    with torch.no_grad():
        float32 = first(model(x))
        with torch.autocast("cpu", dtype=dtype):
            default = first(model(x))
            with policy_loaded(policy):
                eager = first(model(x))
    return {"eager": eager, "float32": float32.float(), "default": default.float()}


def first(output: object) -> torch.Tensor:
    """A model's first output: the tensor itself, a tuple's first, a transformers output's logits."""
    return output if isinstance(output, torch.Tensor) else output[0]


def distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest |difference|."""
    return (a.float() - b.float()).abs().max().item()


def mean_distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """The mean |difference|: where a few last-bit differences of float32 sums (another summation
    order than PyTorch's kernels) dominate the largest."""
    return (a.float() - b.float()).abs().mean().item()


class BasicBlock(torch.nn.Module):
    """ResNet's basic block (torchvision is not installed here)."""

    def __init__(self, channels_in: int, channels: int, stride: int):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(channels_in, channels, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(channels)
        self.conv2 = torch.nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(channels)
        self.relu = torch.nn.ReLU()
        self.downsample = None
        if stride != 1 or channels_in != channels:
            self.downsample = torch.nn.Sequential(torch.nn.Conv2d(channels_in, channels, 1, stride, bias=False),
                                                  torch.nn.BatchNorm2d(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x))))) + identity)


class ResNet(torch.nn.Module):
    """A small ResNet (torchvision's layout: stem, two stages of basic blocks, pooling, fc)."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(16)
        self.relu = torch.nn.ReLU()
        self.layer1 = torch.nn.Sequential(BasicBlock(16, 16, 1), BasicBlock(16, 16, 1))
        self.layer2 = torch.nn.Sequential(BasicBlock(16, 32, 2), BasicBlock(32, 32, 1))
        self.avgpool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer2(self.layer1(self.relu(self.bn1(self.conv1(x)))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


REAL_MODELS = ("llama", "gpt2", "bert", "resnet")


def real_model(name: str) -> tuple[torch.nn.Module, tuple]:
    """A small model of each kind, from a config (nothing downloaded), with its inputs (transformers
    models without a cache: their programs' outputs are the logits alone)."""
    torch.manual_seed(0)
    if name == "resnet":
        model = ResNet().eval()
        with torch.no_grad():  # running statistics other than 0 and 1, as a trained model has
            for module in model.modules():
                if isinstance(module, torch.nn.BatchNorm2d):
                    module.running_mean.uniform_(-0.5, 0.5)
                    module.running_var.uniform_(0.5, 2.0)
        return model, (torch.randn(2, 3, 16, 16),)
    transformers = requires.module("transformers")  # scripts/models-venv: a skip elsewhere, an error there

    common = {"vocab_size": 128, "use_cache": False}
    if name == "llama":
        config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                          **common)
        model = transformers.LlamaForCausalLM(config)
    elif name == "gpt2":
        config = transformers.GPT2Config(n_positions=32, n_embd=64, n_layer=2, n_head=4, bos_token_id=0,
                                         eos_token_id=0, **common)
        model = transformers.GPT2LMHeadModel(config)
    elif name == "bert":
        config = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=128, max_position_embeddings=32, **common)
        model = transformers.BertForMaskedLM(config)
    else:
        raise ValueError(name)
    return model.eval(), (torch.randint(0, 128, (2, 16)),)


# Runs a package where autocastgen cannot be imported: a fresh interpreter without the build's
# python/ on its path or our environment variables; it says so before it loads the package.
_ELSEWHERE = """
import importlib, importlib.util, sys
import torch
assert importlib.util.find_spec("autocastgen") is None, "autocastgen is importable here"
for name in sys.argv[4:]:  # the model's library, whose output classes the package's pytree names
    importlib.import_module(name)
runner = torch._inductor.aoti_load_package(sys.argv[1])
outputs = runner(*torch.load(sys.argv[2]))
torch.save(outputs if isinstance(outputs, torch.Tensor) else outputs[0], sys.argv[3])
assert not [name for name in sys.modules if name.startswith("autocastgen")]
"""


def run_without_autocastgen(package: Path, inputs: tuple, folder: Path, imports: tuple[str, ...] = ()) -> torch.Tensor:
    """The first output of an AOTInductor package run in a process where autocastgen is absent
    (and `imports` imported: transformers.modeling_outputs, whose classes a package's outputs name)."""
    import subprocess

    torch.save(inputs, folder / "inputs.pt")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOCASTGEN_") and k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-c", _ELSEWHERE, str(package), str(folder / "inputs.pt"),
                    str(folder / "output.pt"), *imports], env=env, check=True, timeout=300, cwd=folder)
    return torch.load(folder / "output.pt")


def wasted_casts(model: object) -> list[str]:
    """Casts that could be left out: a second Cast of one value to one type, and a Cast to a
    low-precision type of a value cast up from that type with only exact ops in between that ONNX
    Runtime's CPU provider could have run in the low type (Reshape, Transpose, Concat...; not Neg,
    which has no float16 kernel there). On a runtime without low-precision kernels each Cast is a
    pass over memory."""
    import onnx

    from autocastgen.deploy._onnx.kernels import KernelTable
    from autocastgen.deploy._onnx.passes import LOW_PRECISION, SELECTING

    kernels = KernelTable("CPUExecutionProvider").kernels

    def runs_in(node: onnx.NodeProto, low: int) -> bool:
        return node.op_type in SELECTING and not node.domain and any(
            low in types for _, constraints in kernels.get(("", node.op_type), []) for types in constraints.values())

    types = {v.name: v.type.tensor_type.elem_type for v in [*model.graph.value_info, *model.graph.input]}
    types.update({i.name: i.data_type for i in model.graph.initializer})
    producer = {out: node for node in model.graph.node for out in node.output}
    to = {node.name: onnx.helper.get_attribute_value(next(a for a in node.attribute if a.name == "to"))
          for node in model.graph.node if node.op_type == "Cast"}
    seen: dict[tuple[str, int], str] = {}
    wasted = []
    for node in model.graph.node:
        if node.op_type != "Cast":
            continue
        if (node.input[0], to[node.name]) in seen:
            wasted.append(f"{node.name}: casts {node.input[0]} as {seen[node.input[0], to[node.name]]} does")
        seen[node.input[0], to[node.name]] = node.name
        low = to[node.name]
        if low not in LOW_PRECISION:
            continue
        source = producer.get(node.input[0])
        while source is not None and source.op_type != "Cast" and runs_in(source, low):
            source = producer.get(source.input[0])
        if (source is not None and source.op_type == "Cast" and to[source.name] == onnx.TensorProto.FLOAT
                and types.get(source.input[0]) == low):
            wasted.append(f"{node.name}: rounds {source.input[0]} cast up by {source.name}")
    return wasted


def graph_onnxruntime_runs(export: object, folder: Path) -> object:
    """The ONNX graph an export's session runs, after ONNX Runtime's optimizer (which merges the
    policy's repeated casts of one input; its hardware-specific level left out)."""
    import onnx
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(folder / "runs.onnx")
    export.session(sess_options=options)
    return onnx.load(str(folder / "runs.onnx"))
