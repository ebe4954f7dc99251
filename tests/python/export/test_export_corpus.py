"""autocastgen.export as broad as torch.export (issue 57 item 1; docs/export.md, "The corpus: every
family torch.export takes"): every architecture family of export_corpus.FAMILIES (decoders, MoE
decoders, encoders, encoder-decoders, vision, audio; built tiny from configs, nothing downloaded),
under the shipped CPU policy as runtime policies plus a place (a `modules:` section putting one
module in float32), in bfloat16 and float16.
Each program equals eager under the policy bit for bit in this process, with gradients on and
under no_grad, and after save and load in a process without autocastgen, run there inside
torch.autocast too (export_checks.SavedCases). The families without a custom op load in a process
that imports nothing but torch; the MoE families, whose experts call transformers' grouped GEMM
(transformers::grouped_mm_fallback), in one that imports transformers.integrations.moe first, as a
deployment of them must, and exactly their programs hold that op. The section's module runs in
float32 and the rest in the lower dtype.

F.interpolate's modes keep a dynamic batch (test_interpolate_keeps_a_dynamic_batch: the upsample ops'
C++ kernels specialized MobileViT's; Note [which ops a program keeps] in _export/ops.py).

Every family here is one torch.export.export exports and runs (the float32 program gives eager's
bits), checked first: a family PyTorch could no longer export would fail as PyTorch's, not ours.

Each case costs 2-15 seconds: the default run takes Mixtral in bfloat16 and a window of 24 of the
others (tests/python/rotation.py); AUTOCASTGEN_ALL_CASES=1 runs all (docs/export.md gives the time),
AUTOCASTGEN_CORPUS_FAMILIES=t5,mixtral the named families alone (both dtypes).
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
require_built(BUILD, "python/autocastgen/__init__.py")

import autocastgen  # noqa: E402
from exact import assert_exact, exact  # noqa: E402
from export_checks import SavedCases  # noqa: E402
from export_corpus import BY_NAME, FAMILIES, Family, build, section  # noqa: E402
from rotation import rotating  # noqa: E402

# autocastgen.export with the pinned PyTorch: an error under ctest where it says no (requires.py).
requires.supported(autocastgen._export.supported())

ALL = [(family.name, dtype) for family in FAMILIES for dtype in ("bfloat16", "float16")]
# AUTOCASTGEN_CORPUS_FAMILIES=llama,t5 runs those families alone (both dtypes), rotation or not.
ONLY = [name for name in os.environ.get("AUTOCASTGEN_CORPUS_FAMILIES", "").split(",") if name]
CASES = ([case for case in ALL if case[0] in ONLY] if ONLY
         else rotating(ALL, 24, always=[("mixtral", "bfloat16")]))
# What a program may call besides aten's ops and PyTorch's higher-order ops (the guard).
CUSTOM_OPS = {"transformers::grouped_mm_fallback"}


def custom_ops(program: torch.export.ExportedProgram) -> set[str]:
    """The ops of the program's graphs outside aten (and PyTorch's higher-order ops)."""
    found = set()
    for module in program.graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            for node in module.graph.nodes:
                target = node.target
                if isinstance(target, torch._ops.OpOverload) and target.namespace not in ("aten", "prims"):
                    found.add(target._schema.name)
    return found


def section_ops(rows: list[dict], place: str) -> tuple[set[str], set[str]]:
    """The dtypes the precision map's rows ran in: inside the place's module, and elsewhere."""
    inside, outside = set(), set()
    for row in rows:
        into = inside if row["module"] == place or row["module"].startswith(place + ".") else outside
        into.update(row["ran_in"])
    return inside, outside


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory):
    warnings.filterwarnings("ignore", message=".*(replaces the kernel|matches no module|TypedStorage).*")
    # One child imports nothing; the other the MoE families' custom-op library (all one module).
    imports = sorted({module for family in FAMILIES for module in family.imports})
    plain = SavedCases(tmp_path_factory.mktemp("plain"))
    with_ops = SavedCases(tmp_path_factory.mktemp("custom-ops"), imports=tuple(imports))
    here = {}
    for name, dtype_name in CASES:
        try:
            here[f"{name}-{dtype_name}"] = one_case(BY_NAME[name], dtype_name, plain, with_ops)
        except Exception as error:  # the case fails alone, with its error; the others run
            here[f"{name}-{dtype_name}"] = {"error": f"{type(error).__name__}: {error}"[:2000]}
    autocastgen.clear_runtime_policies()
    fresh = {**(plain.check() if plain.names else {}), **(with_ops.check() if with_ops.names else {})}
    return here, fresh


def one_case(family: Family, dtype_name: str, plain: SavedCases, with_ops: SavedCases) -> dict:
    """Eager under the policy, PyTorch's float32 program and ours, in this process; ours saved."""
    name = family.name
    for module in family.imports:
        __import__(module)
    model, args = build(transformers, family)
    dtype = getattr(torch, dtype_name)
    autocastgen.clear_runtime_policies()
    with torch.no_grad():
        float32 = model(*args)
        by_pytorch = torch.export.export(model, args, strict=False).module()(*args)
    place = section(family, model, args)
    autocastgen.load_policy(autocastgen.shipped_policy("cpu"))
    autocastgen.load_policy(f'autocast: {{device: cpu, lower_precision: [bfloat16, float16]}}\n'
                            f'modules:\n  "{place}": fp32\n')
    with autocastgen.attach(model), torch.autocast("cpu", dtype=dtype):
        expected = model(*args)
        with torch.no_grad():
            expected_no_grad = model(*args)
    program = autocastgen.export(model, args, device="cpu", dtype=dtype)
    module = program.module()
    case = f"{name}-{dtype_name}"
    with torch.no_grad():
        no_grad = exact(module(*args), expected_no_grad)
    result = {"pytorch": exact(by_pytorch, float32), "equal": exact(module(*args), expected),
              "no_grad": no_grad, "custom_ops": custom_ops(program),
              "ran_in": section_ops(autocastgen.precision_map(program)["rows"], place)}
    (with_ops if family.imports else plain).add(case, program, args, {}, expected)
    return result


def test_the_corpus_is_broad() -> None:
    """Issue 57: at least 20 families, each kind represented."""
    assert len(FAMILIES) >= 20 and len(BY_NAME) == len(FAMILIES)
    assert {f.kind for f in FAMILIES} == {"decoder", "MoE", "encoder", "encoder-decoder", "vision", "audio"}


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(c))
def test_a_family_is_eager_under_the_policy_after_save_and_load(results, case) -> None:
    here_all, fresh = results
    name = "-".join(case)
    family, here = BY_NAME[case[0]], here_all[name]
    assert "error" not in here, here["error"]
    assert here["pytorch"], f"{case[0]}: torch.export.export's own float32 program differs from eager"
    assert here["equal"] and here["no_grad"], here
    # A family that names a custom-op library calls its op; the others call aten's only.
    assert here["custom_ops"] == (CUSTOM_OPS if family.imports else set()), here["custom_ops"]
    assert fresh[name]["equal"], fresh[name]
    assert fresh[name]["inside_autocast"] == {"torch.float16": True, "torch.bfloat16": True}
    record = fresh[name]["record"]
    assert record["dtype"] == case[1]
    assert any(p.endswith("policies/cpu.yaml") for p in record["policies"]), record["policies"]
    assert "<string>" in record["policies"], record["policies"]
    inside, outside = here["ran_in"]
    assert inside == {"float32"}, inside
    assert case[1] in outside, outside


class Interpolations(torch.nn.Module):
    """F.interpolate's modes on (batch, 4, 6, 6) images, by scale factor and by size (the upsample
    ops' .vec overloads: Note [which ops a program keeps] in _export/ops.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        F = torch.nn.functional
        x = self.conv(x)
        parts = [F.interpolate(x, scale_factor=2, mode="nearest"),
                 F.interpolate(x, scale_factor=2, mode="bilinear"),
                 F.interpolate(x, size=(12, 12), mode="bilinear", align_corners=True),
                 F.interpolate(x, scale_factor=2, mode="bicubic"),
                 F.interpolate(x, size=(12, 12), mode="nearest-exact")]
        line = F.interpolate(x.flatten(2), scale_factor=4, mode="linear").reshape(x.shape[0], 4, 12, 12)
        volume = F.interpolate(x.unsqueeze(2), scale_factor=(1, 2, 2), mode="trilinear").squeeze(2)
        return torch.cat([*parts, line, volume], dim=1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_interpolate_keeps_a_dynamic_batch(dtype: torch.dtype) -> None:
    """The upsample ops' C++ kernels would specialize the batch (MobileViT's); the program keeps it
    dynamic and gives eager's bits at batch sizes other than the trace's."""
    torch.manual_seed(0)
    model = Interpolations().eval()
    autocastgen.clear_runtime_policies()
    autocastgen.load_policy(autocastgen.shipped_policy("cpu"))
    try:
        program = autocastgen.export(model, (torch.randn(2, 4, 6, 6),), device="cpu", dtype=dtype,
                                     dynamic_shapes=({0: torch.export.Dim.AUTO},))
        assert program.range_constraints, "the batch was specialized"
        for batch in (2, 3, 5):
            x = torch.randn(batch, 4, 6, 6)
            with autocastgen.attach(model), torch.autocast("cpu", dtype=dtype):
                expected = model(x)
            assert_exact(program.module()(x), expected, batch)
    finally:
        autocastgen.clear_runtime_policies()
