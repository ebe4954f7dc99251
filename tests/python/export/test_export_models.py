"""autocastgen.export on real models (docs/export.md): transformers Llama, GPT-2, BERT, ResNet, ViT
and T5 (encoder-decoder) built small from configs, a conv/BatchNorm net, nn.TransformerEncoderLayer
and an LSTM; float16 and bfloat16; the shipped CPU policy as runtime policies and as the build's
generated library (compiled), each with a `modules:` section putting one module in float32. Every
program equals eager under the same policy bit for bit, in this process with gradients on and under
no_grad (Note [views of any layout] in _export/program.py), and after save and load in a process
without autocastgen, run there inside torch.autocast too; its record names what decided the casts
(the shipped policy's file, or the generated library and no runtime policy of the shipped lists),
and its precision map shows the section in float32 and the rest in the lower-precision dtype.

Each case costs a few seconds: the default run takes Llama, GPT-2 and T5 (both dtypes) and a window
of the others (tests/python/rotation.py); AUTOCASTGEN_ALL_CASES=1 runs all 36.
"""
from __future__ import annotations

import os
import pathlib
import warnings

import pytest
import torch

import requires
from built_tree import require_built

transformers = requires.module("transformers")

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
CPU_LIBRARY = BUILD / "lib" / "libautocastgen_torch_cpu.so"
# The build's generated CPU library is part of the default build: missing under ctest is an error.
require_built(BUILD, "python/autocastgen/__init__.py", CPU_LIBRARY.relative_to(BUILD))

import autocastgen  # noqa: E402
from exact import exact  # noqa: E402
from export_checks import SavedCases, small_t5  # noqa: E402
from rotation import rotating  # noqa: E402

# autocastgen.export with the pinned PyTorch: an error under ctest where it says no (requires.py).
requires.supported(autocastgen._export.supported())


class Logits(torch.nn.Module):
    """A transformers model returning one tensor (a program's output a process without transformers
    can read)."""

    def __init__(self, model: torch.nn.Module, field: str, **kwargs: object) -> None:
        super().__init__()
        self.model, self.field, self.kwargs = model, field, kwargs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(x, **self.kwargs), self.field)


class LSTMNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm, self.head = torch.nn.LSTM(16, 32, batch_first=True), torch.nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.lstm(x)[0])


def build(name: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...], str]:
    """The model, its inputs, and the module its section puts in float32."""
    model, x, section = _built(name)
    return model, x if isinstance(x, tuple) else (x,), section


def _built(name: str) -> tuple[torch.nn.Module, torch.Tensor | tuple[torch.Tensor, ...], str]:
    torch.manual_seed(0)
    ids = torch.randint(0, 128, (2, 16))
    image = torch.randn(2, 3, 32, 32)
    if name == "llama":
        config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        return Logits(transformers.LlamaForCausalLM(config), "logits", use_cache=False), ids, "model.lm_head"
    if name == "gpt2":
        config = transformers.GPT2Config(vocab_size=128, n_positions=32, n_embd=64, n_layer=2, n_head=4,
                                         bos_token_id=0, eos_token_id=0)
        return Logits(transformers.GPT2LMHeadModel(config), "logits", use_cache=False), ids, "model.lm_head"
    if name == "bert":
        config = transformers.BertConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=128, max_position_embeddings=64)
        return Logits(transformers.BertModel(config), "last_hidden_state"), ids, "model.encoder.layer.1.output"
    if name == "resnet":
        config = transformers.ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                                           layer_type="basic")
        return Logits(transformers.ResNetModel(config), "last_hidden_state"), image, "model.encoder.stages.1"
    if name == "vit":
        config = transformers.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=64,
                                        num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
        # transformers 5 names ViT's blocks layers.N (an older release's encoder.layer.N.output matches nothing).
        return Logits(transformers.ViTModel(config), "last_hidden_state"), image, "model.layers.1.mlp"
    if name == "t5":
        # The decoder's cross-attention in float32. Self-attention's mask is the relative position
        # bias, made from a parameter: with gradients on the CPU's sdpa runs its math kernel, under
        # no_grad its flash kernel, each laying out its result otherwise (issue 57).
        decoder_ids = torch.randint(0, 128, (2, 12))
        return (small_t5(transformers), (ids, decoder_ids),
                "model.decoder.block.1.layer.1.EncDecAttention")
    if name == "convbn":
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                    torch.nn.Conv2d(8, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                    torch.nn.Linear(4, 3))
        return model, image, "6"
    if name == "encoder":
        # Run with gradients on: under no_grad eager takes PyTorch's fused inference kernel
        # (_native_multi_head_attention), which torch.export never records (docs/export.md).
        model = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True, dropout=0.0)
        return model, torch.randn(2, 10, 32), "linear2"
    return LSTMNet(), torch.randn(2, 7, 16), "head"


MODELS = ["llama", "gpt2", "bert", "resnet", "vit", "t5", "convbn", "encoder", "lstm"]
ALL = [(m, d, k) for m in MODELS for d in ("bfloat16", "float16") for k in ("runtime", "compiled")]
CASES = rotating(ALL, 4, always=[("llama", "bfloat16", "runtime"), ("gpt2", "float16", "compiled"),
                                 ("t5", "bfloat16", "runtime"), ("t5", "float16", "compiled")])
# Under no_grad eager runs nn.TransformerEncoderLayer's fused inference kernel, which torch.export
# never records (docs/export.md): its program is compared with eager with gradients on only.
NOT_UNDER_NO_GRAD = {"encoder"}


def policies_for(kind: str, section: str) -> None:
    """The shipped CPU policy as runtime policies or the generated library's wrappers (loaded for
    the module), and a runtime policy that is only a section: the model's `section` in float32."""
    autocastgen.clear_runtime_policies()
    if kind == "runtime":
        autocastgen.load_policy(autocastgen.shipped_policy("cpu"))
    autocastgen.load_policy(f'autocast: {{device: cpu, lower_precision: [bfloat16, float16]}}\nmodules:\n  "{section}": fp32\n')


def section_ops(rows: list[dict], section: str) -> tuple[set[str], set[str]]:
    """The dtypes the precision map's rows ran in: inside the section's module, and elsewhere."""
    inside, outside = set(), set()
    for row in rows:
        into = inside if row["module"] == section or row["module"].startswith(section + ".") else outside
        into.update(row["ran_in"])
    return inside, outside


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory):
    torch.ops.load_library(str(CPU_LIBRARY))
    warnings.filterwarnings("ignore", message=".*(replaces the kernel|matches no module|TypedStorage).*")
    saved = SavedCases(tmp_path_factory.mktemp("models"))
    in_process = {}
    for name, dtype_name, kind in CASES:
        model, args, section = build(name)
        model.eval()
        dtype = getattr(torch, dtype_name)
        policies_for(kind, section)
        # torch.export traces with oneDNN off (PyTorch's choice: a portable program), so its LSTM
        # is the cells of the generic kernel; eager runs the same with oneDNN off.
        with torch.backends.mkldnn.flags(enabled=name != "lstm"), autocastgen.attach(model), \
                torch.autocast("cpu", dtype=dtype):
            expected = model(*args)
            with torch.no_grad():
                expected_no_grad = model(*args)
        program = autocastgen.export(model, args, device="cpu", dtype=dtype)
        case = f"{name}-{dtype_name}-{kind}"
        module = program.module()
        with torch.no_grad():
            no_grad = name in NOT_UNDER_NO_GRAD or exact(module(*args), expected_no_grad)
        in_process[case] = {"equal": exact(module(*args), expected), "no_grad": no_grad,
                            "ran_in": section_ops(autocastgen.precision_map(program)["rows"], section)}
        saved.add(case, program, args, {}, expected)
    autocastgen.clear_runtime_policies()
    return in_process, saved.check()


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(c))
def test_a_real_model_is_eager_under_the_policy_after_save_and_load(results, case) -> None:
    in_process, fresh = results
    name = "-".join(case)
    here = in_process[name]
    assert here["equal"] and here["no_grad"], here
    assert fresh[name]["equal"], fresh[name]
    assert fresh[name]["inside_autocast"] == {"torch.float16": True, "torch.bfloat16": True}
    record = fresh[name]["record"]
    assert record["dtype"] == case[1]
    # What decided the casts: the shipped policy's file as runtime policies over the generated library
    # (loaded for the module), or the generated library alone; the section's runtime policy
    # (`<string>`) either way; never PyTorch's own lists.
    shipped = [p for p in record["policies"] if p.endswith("policies/cpu.yaml")]
    generated = [p for p in record["policies"] if p.startswith("generated library ")]
    assert len(generated) == 1 and "<string>" in record["policies"], record["policies"]
    assert len(shipped) == (1 if case[2] == "runtime" else 0), record["policies"]
    assert not any("autocast lists" in p for p in record["policies"]), record["policies"]
    # The section took effect: its module's ops ran in float32 only, and others in the lower dtype.
    inside, outside = here["ran_in"]
    assert inside == {"float32"}, inside
    assert case[1] in outside, outside
