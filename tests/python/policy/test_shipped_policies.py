"""Prove the shipped policy lists (schemas/policies/*.yaml) against the installed PyTorch.

Two kinds of checks:

1. Registration parity: the overloads a policy lists (after `extends`/`remove`, with `name.*`
   expanded from the installed native_functions.yaml) are exactly the overloads that have a
   non-fallthrough kernel for the policy's autocast dispatch key in the installed torch.
2. Behaviour: every listed op is run under PyTorch's own autocast with inputs built from a small
   recipe table, and what autocast did (the casts it issued, seen through a dispatch mode, and the
   output dtype) must match the list the op is in.
   - cpu.yaml runs on real CPU tensors under `torch.autocast("cpu", dtype=bfloat16)`.
   - cuda.yaml / generic.yaml run on fake tensors (FakeTensorMode) placed on a cuda / xpu / mtia
     device, so PyTorch's AutocastCUDA / AutocastXPU / AutocastMTIA kernels run without a GPU:
     autocast only looks at device and dtype, and fake tensors carry both.

The policies are resolved for the release of the torch that runs the test (entries whose
`since:`/`until:` gates exclude it are skipped), so any installed release can be checked:
tests/release_policies/check_release.py runs the registration tests under the venv of each
installed release (2.7, 2.11) and the pinned one.

Run: python3 -m pytest tests/python/policy/test_shipped_policies.py
"""

from __future__ import annotations

import contextlib
import functools
import pathlib
import sys

import pytest
import torch
import torchgen.model as torchgen_model
import yaml
from torch.utils._python_dispatch import TorchDispatchMode

# Several listed ops are deprecated aliases (chain_matmul, svd, ...) that warn when called.
pytestmark = pytest.mark.filterwarnings("ignore:.*deprecated:UserWarning")

REPO = pathlib.Path(__file__).resolve().parents[3]
POLICY_DIR = REPO / "schemas" / "policies"
NATIVE_FUNCTIONS = (
    pathlib.Path(torchgen_model.__file__).resolve().parent
    / "packaged" / "ATen" / "native" / "native_functions.yaml"
)

LIST_NAMES = (
    "lower_precision_fp",
    "fp32",
    "fp32_set_opt_dtype",
    "fp32_append_dtype",
    "promote",
    "banned",
)

# Which dispatch keys each shipped file must match, and the hand-written kernels left out of them:
# one table for this test and the release checks (tests/release_policies/policy_keys.py).
sys.path.insert(0, str(REPO / "tests" / "release_policies"))
from policy_keys import HANDWRITTEN, POLICY_KEYS  # noqa: E402

# --------------------------------------------------------------------------------------------
# Schemas: the installed native_functions.yaml
# --------------------------------------------------------------------------------------------


@functools.cache
def native_schemas():
    """{'name' or 'name.overload': FunctionSchema} for every entry of native_functions.yaml."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(NATIVE_FUNCTIONS) as fh:
        entries = yaml.load(fh, Loader=loader)
    out = {}
    for entry in entries:
        schema = torchgen_model.FunctionSchema.parse(entry["func"])
        out[op_key(str(schema.name.name), schema.name.overload_name)] = schema
    return out


def op_key(name, overload):
    return f"{name}.{overload}" if overload else name


def is_eligible_schema(schema):
    """Autocast can wrap it: out-of-place (functional) and at least one Tensor-like input."""
    return schema.kind() == torchgen_model.SchemaKind.functional and any(
        a.type.is_tensor_like() for a in schema.arguments.flat_all
    )


@functools.cache
def overloads_by_name():
    by_name = {}
    for key, schema in native_schemas().items():
        by_name.setdefault(str(schema.name.name), []).append(key)
    return by_name


def expand_entry(entry):
    """Entry text -> list of overload keys.  Raises ValueError for an unknown/ineligible op."""
    schemas = native_schemas()
    name, dot, overload = entry.partition(".")
    if dot and overload == "*":
        keys = [k for k in overloads_by_name().get(name, []) if is_eligible_schema(schemas[k])]
        if not keys:
            raise ValueError(f"{entry}: no eligible overload of {name}")
        return sorted(keys)
    if entry not in schemas:
        raise ValueError(f"{entry}: no such overload in {NATIVE_FUNCTIONS}")
    if not is_eligible_schema(schemas[entry]):
        raise ValueError(f"{entry}: not functional or has no Tensor input")
    return [entry]


# --------------------------------------------------------------------------------------------
# Policies: a minimal independent reader of our YAML format (design.md 3.2)
# --------------------------------------------------------------------------------------------


def release(text):
    major, minor = str(text).split(".")[:2]
    return int(major), int(minor)


TORCH_RELEASE = release(torch.__version__.split("+")[0])


def admitted(item):
    """Whether an entry's release gates (since: inclusive, until: exclusive) admit this torch."""
    if not isinstance(item, dict):
        return True
    if "since" in item and TORCH_RELEASE < release(item["since"]):
        return False
    return not ("until" in item and TORCH_RELEASE >= release(item["until"]))


def entry_op(item):
    return item["op"] if isinstance(item, dict) else str(item)


GATES = {"since", "until"}
ENTRY_FIELDS = {"banned": {"op", "message"} | GATES, "fp32_append_dtype": {"op", "redispatch"} | GATES}


def check_entry_fields(filename, list_name, item):
    if list_name == "banned" and not (isinstance(item, dict) and item.get("message")):
        raise ValueError(f"{filename}: banned entry {item!r} needs a message")
    if not isinstance(item, dict):
        return
    unknown = set(item) - ENTRY_FIELDS.get(list_name, {"op"} | GATES)
    if unknown or "op" not in item:
        raise ValueError(f"{filename}: {list_name} entry {item!r}: bad fields")
    if "redispatch" in item:
        target = native_schemas().get(item["redispatch"])
        if target is None or not any(
            a.name == "dtype" and str(a.type) == "ScalarType" for a in target.arguments.flat_all
        ):
            raise ValueError(f"{filename}: {item!r}: redispatch target takes no ScalarType dtype")


@functools.cache
def load_policy(filename):
    """Returns (header, {list_name: {overload_key: entry}}) with extends/remove applied."""
    return _load_policy(POLICY_DIR / filename, ())


def _load_policy(path, chain):
    path = path.resolve()
    if path in chain:
        raise ValueError(f"extends cycle: {' -> '.join(map(str, chain + (path,)))}")
    with open(path) as fh:
        doc = yaml.safe_load(fh)
    unknown = set(doc) - {"autocast", "extends", "remove", "lists"}
    if unknown:
        raise ValueError(f"{path.name}: unknown keys {sorted(unknown)}")
    lists = {name: {} for name in LIST_NAMES}
    if doc.get("extends"):
        _, lists = _load_policy(path.parent / doc["extends"], chain + (path,))
        lists = {name: dict(items) for name, items in lists.items()}
    for removed in doc.get("remove") or []:
        if not admitted(removed):
            continue
        for key in expand_entry(entry_op(removed)):
            hits = [name for name in LIST_NAMES if lists[name].pop(key, None) is not None]
            if not hits:
                raise ValueError(f"{path.name}: remove {removed}: not inherited")
    own = doc.get("lists") or {}
    unknown = set(own) - set(LIST_NAMES)
    if unknown:
        raise ValueError(f"{path.name}: unknown lists {sorted(unknown)}")
    for name in LIST_NAMES:
        for item in own.get(name) or []:
            if not admitted(item):
                continue
            check_entry_fields(path.name, name, item)
            for key in expand_entry(entry_op(item)):
                others = [n for n in LIST_NAMES if key in lists[n]]
                if others:
                    raise ValueError(f"{path.name}: {key} in {name} and {others}")
                lists[name][key] = item
    return doc.get("autocast") or {}, lists


def policy_ops(filename):
    """{overload_key: list_name} of one shipped policy."""
    _, lists = load_policy(filename)
    return {key: name for name, items in lists.items() for key in items}


# --------------------------------------------------------------------------------------------
# Registrations in the installed torch
# --------------------------------------------------------------------------------------------


def dispatch_key_exists(key):
    try:
        torch._C._dispatch_has_kernel_for_dispatch_key("aten::mm", key)
        return True
    except Exception:  # unknown DispatchKey name in this build
        return False


@functools.cache
def registered_ops(key):
    """Overload keys ('aten::' dropped; other namespaces kept) with a real kernel for `key`."""
    found = set()
    for qualified in torch._C._dispatch_get_all_op_names():
        if not torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key):
            continue
        lines = [
            line for line in torch._C._dispatch_dump(qualified).splitlines()
            if line.startswith(key + ":")
        ]
        if lines and all("fallthrough" in line for line in lines):
            continue
        found.add(qualified[len("aten::"):] if qualified.startswith("aten::") else qualified)
    return frozenset(found)


# --------------------------------------------------------------------------------------------
# Test 1: registration parity
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("filename", sorted(POLICY_KEYS))
def test_entries_are_valid(filename):
    header, lists = load_policy(filename)  # raises on unknown / ineligible / duplicated entries
    assert header.get("device") and header.get("dispatch_key")
    assert header.get("lower_precision"), "lower_precision must name at least one dtype"
    for dtype in header["lower_precision"]:
        assert dtype in ("float16", "bfloat16"), dtype
    assert any(lists.values())


@pytest.mark.parametrize(
    "filename,key",
    [(f, k) for f, keys in sorted(POLICY_KEYS.items()) for k in keys],
)
def test_registration_parity(filename, key):
    if not dispatch_key_exists(key):
        pytest.skip(f"this torch build has no {key}")
    registered = registered_ops(key)
    if not registered:
        pytest.skip(f"nothing is registered for {key} in this torch build")
    handwritten = HANDWRITTEN.get(key, {})
    listed = set(policy_ops(filename))
    missing = sorted(registered - listed - set(handwritten))
    extra = sorted(listed - registered)
    stale = sorted(set(handwritten) - registered)
    both = sorted(listed & set(handwritten))
    problems = []
    if missing:
        problems.append(f"registered for {key} but not in {filename}:\n  " + "\n  ".join(missing))
    if extra:
        problems.append(f"in {filename} but not registered for {key}:\n  " + "\n  ".join(extra))
    if stale:
        problems.append("HANDWRITTEN names kernels torch no longer registers: " + ", ".join(stale))
    if both:
        problems.append("hand-written kernels must not be listed: " + ", ".join(both))
    assert not problems, f"torch {torch.__version__}: " + "\n".join(problems)


def test_every_policy_checked_against_some_key():
    for filename, keys in POLICY_KEYS.items():
        usable = [k for k in keys if dispatch_key_exists(k) and registered_ops(k)]
        assert usable, f"{filename}: none of {keys} has registrations in this torch"


@pytest.mark.parametrize("filename", sorted(POLICY_KEYS))
def test_default_lower_precision_matches_torch(filename):
    header, _ = load_policy(filename)
    try:
        default = torch.get_autocast_dtype(header["device"])
    except Exception as exc:  # pragma: no cover - device type unknown to this torch
        pytest.skip(f"torch knows no device {header['device']!r}: {exc}")
    assert DTYPES[header["lower_precision"][0]] == default


def test_cuda_extends_generic():
    generic = policy_ops("generic.yaml")
    cuda = policy_ops("cuda.yaml")
    changed = {k: (v, cuda.get(k)) for k, v in generic.items() if cuda.get(k) != v}
    assert not changed, f"cuda.yaml changes inherited entries: {changed}"


# --------------------------------------------------------------------------------------------
# Input recipes: op key -> function(Inputs) returning (args, kwargs)
# --------------------------------------------------------------------------------------------


class Inputs:
    """Makes one call's tensors on `device`.  The i-th floating tensor made gets dtypes[i] (the
    last dtype repeats), so one recipe serves all-fp32, all-lower and mixed (promote) calls."""

    def __init__(self, device, dtypes):
        self.device = device
        self.dtypes = list(dtypes)
        self.count = 0

    def _dtype(self):
        dtype = self.dtypes[min(self.count, len(self.dtypes) - 1)]
        self.count += 1
        return dtype

    def _float(self, t):
        return t.to(self._dtype())

    def f(self, *shape):  # standard normal
        return self._float(torch.randn(shape, device=self.device))

    def pos(self, *shape):  # in (0.5, 1.5)
        return self._float(torch.rand(shape, device=self.device) + 0.5)

    def prob(self, *shape):  # in (0.1, 0.9)
        return self._float(torch.rand(shape, device=self.device) * 0.8 + 0.1)

    def spd(self, n):  # symmetric positive definite
        a = torch.randn(n, n, device=self.device)
        return self._float(a @ a.mT + n * torch.eye(n, device=self.device))

    def tril(self, n):  # lower triangular, well conditioned
        a = torch.randn(n, n, device=self.device).tril()
        return self._float(a + n * torch.eye(n, device=self.device))

    def long(self, values):
        return torch.tensor(values, dtype=torch.long, device=self.device)

    def int32(self, values):
        return torch.tensor(values, dtype=torch.int32, device=self.device)


def unary(m):
    return (m.pos(4),), {}


def two(m):
    return (m.f(4), m.f(4)), {}


def loss_pair(m):
    return (m.f(3, 4), m.f(3, 4)), {}


def mat(m):
    return (m.f(4, 4),), {}


def spd(m):
    return (m.spd(4),), {}


def tall(m):
    return (m.f(4, 3),), {}


def conv_nd(nd, padding_str=False):
    def recipe(m):
        spatial = (6,) * nd
        args = (m.f(1, 2, *spatial), m.f(3, 2, *(3,) * nd), m.f(3))
        if padding_str:
            return args + ([1] * nd, "same"), {}
        return args, {}
    return recipe


def conv_transpose_nd(nd):
    return lambda m: ((m.f(1, 2, *(5,) * nd), m.f(2, 3, *(3,) * nd), m.f(3)), {})


def conv_general(m, transposed=False, tf32=None):
    w = m.f(2, 3, 3, 3) if transposed else m.f(3, 2, 3, 3)
    args = [m.f(1, 2, 6, 6), w, None, [1, 1], [0, 0], [1, 1], transposed, [0, 0], 1]
    if tf32 is not None:
        args += [False, False, True] + ([tf32] if tf32 else [])
    return tuple(args), {}


def upsample(nd, *extra):
    return lambda m: ((m.f(1, 1, *(4,) * nd), [8] * nd, *extra), {})


def rnn_cell(gates):
    return lambda m: ((m.f(2, 3), m.f(2, 4), m.f(gates * 4, 3), m.f(gates * 4, 4),
                       m.f(gates * 4), m.f(gates * 4)), {})


def fft_1d(m):
    return (m.f(8),), {}


def fft_nd(m):
    return (m.f(4, 4),), {}


def ctc_inputs(m, as_tensors):
    log_probs = m.f(10, 2, 5)
    targets = m.long([[1, 2, 3], [2, 3, 4]])
    lengths = ([10, 10], [3, 3])
    if as_tensors:
        lengths = (m.long(lengths[0]), m.long(lengths[1]))
    return (log_probs, targets, *lengths), {}


def multilabel_target(m):
    return m.long([[0, 1, -1, -1], [2, -1, -1, -1], [3, 0, 1, -1]])


def mkldnn_rnn_layer(m):
    # one LSTM layer (mode 2), seq 3, batch 2, input 4, hidden 5
    return (m.f(3, 2, 4), m.f(20, 4), m.f(20, 5), m.f(20), m.f(20), m.f(2, 5), m.f(2, 5),
            False, [], 2, 5, 1, True, False, False, False), {}


def cudnn_rnn(m):
    # one LSTM layer (mode 2), seq 3, batch 2, input 4, hidden 5, weights with biases
    weights = [m.f(20, 4), m.f(20, 5), m.f(20), m.f(20)]
    return (m.f(3, 2, 4), weights, 4, None, m.f(1, 2, 5), m.f(1, 2, 5), 2, 5, 0, 1, False, 0.0,
            False, False, [], None), {}


def native_mha(m):
    e = 4
    return (m.f(2, 3, e), m.f(2, 3, e), m.f(2, 3, e), e, 2, m.f(3 * e, e), m.f(3 * e),
            m.f(e, e), m.f(e)), {}


RECIPES = {
    # ---- matmul / conv family
    "mm": lambda m: ((m.f(3, 4), m.f(4, 5)), {}),
    "bmm": lambda m: ((m.f(2, 3, 4), m.f(2, 4, 5)), {}),
    "mv": lambda m: ((m.f(3, 4), m.f(4)), {}),
    "matmul": lambda m: ((m.f(3, 4), m.f(4, 5)), {}),
    "addmm": lambda m: ((m.f(3, 5), m.f(3, 4), m.f(4, 5)), {}),
    "_addmm_activation": lambda m: ((m.f(3, 5), m.f(3, 4), m.f(4, 5)), {"use_gelu": True}),
    "addmv": lambda m: ((m.f(3), m.f(3, 4), m.f(4)), {}),
    "addr": lambda m: ((m.f(3, 4), m.f(3), m.f(4)), {}),
    "addbmm": lambda m: ((m.f(3, 5), m.f(2, 3, 4), m.f(2, 4, 5)), {}),
    "baddbmm": lambda m: ((m.f(2, 3, 5), m.f(2, 3, 4), m.f(2, 4, 5)), {}),
    "linear": lambda m: ((m.f(2, 4), m.f(3, 4), m.f(3)), {}),
    "linalg_vecdot": loss_pair,
    "einsum": lambda m: (("ij,jk->ik", [m.f(2, 3), m.f(3, 4)]), {}),
    "chain_matmul": lambda m: (([m.f(2, 3), m.f(3, 4), m.f(4, 5)],), {}),
    "linalg_multi_dot": lambda m: (([m.f(2, 3), m.f(3, 4), m.f(4, 5)],), {}),
    "prelu": lambda m: ((m.f(2, 3, 4), m.f(3)), {}),
    "conv1d": conv_nd(1),
    "conv2d": conv_nd(2),
    "conv3d": conv_nd(3),
    "conv1d.padding": conv_nd(1, padding_str=True),
    "conv2d.padding": conv_nd(2, padding_str=True),
    "conv3d.padding": conv_nd(3, padding_str=True),
    "conv_transpose1d": conv_transpose_nd(1),
    "conv_transpose2d.input": conv_transpose_nd(2),
    "conv_transpose3d.input": conv_transpose_nd(3),
    "conv_tbc": lambda m: ((m.f(10, 7, 3), m.f(5, 3, 5), m.f(5), 0), {}),
    "convolution": lambda m: conv_general(m),
    "_convolution": lambda m: conv_general(m, tf32=True),
    "_convolution.deprecated": lambda m: conv_general(m, tf32=False),
    "cudnn_convolution": lambda m: ((m.f(1, 2, 6, 6), m.f(3, 2, 3, 3), [0, 0], [1, 1], [1, 1], 1,
                                     False, False, True), {}),
    "cudnn_convolution_transpose": lambda m: ((m.f(1, 2, 6, 6), m.f(2, 3, 3, 3), [0, 0], [0, 0],
                                               [1, 1], [1, 1], 1, False, False, True), {}),
    # ---- recurrent cells and layers
    "lstm_cell": lambda m: ((m.f(2, 3), [m.f(2, 4), m.f(2, 4)], m.f(16, 3), m.f(16, 4), m.f(16),
                             m.f(16)), {}),
    "gru_cell": rnn_cell(3),
    "rnn_tanh_cell": rnn_cell(1),
    "rnn_relu_cell": rnn_cell(1),
    "_thnn_fused_lstm_cell": lambda m: ((m.f(2, 16), m.f(2, 16), m.f(2, 4), m.f(16), m.f(16)), {}),
    "_thnn_fused_gru_cell": lambda m: ((m.f(2, 12), m.f(2, 12), m.f(2, 4), m.f(12), m.f(12)), {}),
    "mkldnn_rnn_layer": mkldnn_rnn_layer,
    "_cudnn_rnn": cudnn_rnn,
    # ---- attention
    "scaled_dot_product_attention": lambda m: ((m.f(1, 2, 4, 8), m.f(1, 2, 4, 8),
                                                m.f(1, 2, 4, 8)), {}),
    "_scaled_dot_product_flash_attention": lambda m: ((m.f(1, 2, 4, 8), m.f(1, 2, 4, 8),
                                                       m.f(1, 2, 4, 8)), {}),
    "_native_multi_head_attention": native_mha,
    # ---- pointwise math
    "acos": lambda m: ((m.prob(4),), {}),
    "asin": lambda m: ((m.prob(4),), {}),
    "cosh": unary, "erfinv": lambda m: ((m.prob(4),), {}), "exp": unary, "expm1": unary,
    "log": unary, "log10": unary, "log2": unary, "log1p": unary, "reciprocal": unary,
    "rsqrt": unary, "sinh": unary, "tan": unary, "softplus": unary,
    "pow.Tensor_Scalar": lambda m: ((m.pos(4), 2), {}),
    "pow.Tensor_Tensor": lambda m: ((m.pos(4), m.f(4)), {}),
    "pow.Scalar": lambda m: ((2.0, m.f(4)), {}),
    "atan2": two,
    "addcdiv": lambda m: ((m.f(4), m.f(4), m.pos(4)), {}),
    "addcmul": lambda m: ((m.f(4), m.f(4), m.f(4)), {}),
    "polar": lambda m: ((m.pos(4), m.f(4)), {}),
    "view_as_complex": lambda m: ((m.f(4, 2),), {}),
    "fake_quantize_per_tensor_affine": lambda m: ((m.f(4), 0.1, 0, 0, 255), {}),
    # ---- normalization
    "layer_norm": lambda m: ((m.f(2, 4), [4], m.f(4), m.f(4)), {}),
    "native_layer_norm": lambda m: ((m.f(2, 4), [4], m.f(4), m.f(4), 1e-5), {}),
    "rms_norm": lambda m: ((m.f(2, 4), [4], m.f(4)), {}),
    "group_norm": lambda m: ((m.f(2, 4, 3), 2, m.f(4), m.f(4)), {}),
    # ---- norms and distances
    "frobenius_norm.dim": lambda m: ((m.f(3, 4), [0, 1]), {}),
    "nuclear_norm": lambda m: ((m.f(3, 4),), {}),
    "nuclear_norm.dim": lambda m: ((m.f(3, 4), [0, 1]), {}),
    "norm.Scalar": lambda m: ((m.f(4),), {}),
    "norm.ScalarOpt_dim": lambda m: ((m.f(3, 4), 2, [1]), {}),
    "linalg_vector_norm": lambda m: ((m.f(4),), {}),
    "linalg_matrix_norm": lambda m: ((m.f(3, 4), 1), {}),
    "linalg_matrix_norm.str_ord": lambda m: ((m.f(3, 4), "fro"), {}),
    "cosine_similarity": loss_pair,
    "dist": two,
    "pdist": lambda m: ((m.f(4, 3),), {}),
    "cdist": lambda m: ((m.f(3, 4), m.f(5, 4)), {}),
    "renorm": lambda m: ((m.f(3, 4), 2, 0, 1.0), {}),
    "trace": mat,
    # ---- reductions, softmax
    "logsumexp": lambda m: ((m.f(3, 4), [1]), {}),
    "prod": lambda m: ((m.f(4),), {}),
    "prod.dim_int": lambda m: ((m.f(3, 4), 1), {}),
    "sum": lambda m: ((m.f(4),), {}),
    "sum.dim_IntList": lambda m: ((m.f(3, 4), [1]), {}),
    "cumsum": lambda m: ((m.f(4), 0), {}),
    "cumprod": lambda m: ((m.f(4), 0), {}),
    "softmax.int": lambda m: ((m.f(3, 4), 1), {}),
    "log_softmax.int": lambda m: ((m.f(3, 4), 1), {}),
    "quantile": lambda m: ((m.f(8), m.prob(2)), {}),
    "quantile.scalar": lambda m: ((m.f(8), 0.5), {}),
    "nanquantile": lambda m: ((m.f(8), m.prob(2)), {}),
    "nanquantile.scalar": lambda m: ((m.f(8), 0.5), {}),
    # ---- losses
    "poisson_nll_loss": lambda m: ((m.f(4), m.pos(4), True, False, 1e-8, 1), {}),
    "cosine_embedding_loss": lambda m: ((m.f(3, 4), m.f(3, 4), m.long([1, -1, 1])), {}),
    "nll_loss": lambda m: ((m.f(3, 5), m.long([0, 4, 2])), {}),
    "nll_loss2d": lambda m: ((m.f(2, 3, 4, 4), m.long([[[0, 1, 2, 0]] * 4] * 2)), {}),
    "cross_entropy_loss": lambda m: ((m.f(3, 5), m.long([0, 4, 2])), {}),
    "hinge_embedding_loss": lambda m: ((m.f(4), m.long([1, -1, 1, -1])), {}),
    "kl_div": lambda m: ((m.f(4), m.prob(4)), {}),
    "l1_loss": loss_pair,
    "smooth_l1_loss": loss_pair,
    "huber_loss": loss_pair,
    "mse_loss": loss_pair,
    "soft_margin_loss": loss_pair,
    "margin_ranking_loss": lambda m: ((m.f(4), m.f(4), m.f(4)), {}),
    "multilabel_margin_loss": lambda m: ((m.f(3, 4), multilabel_target(m)), {}),
    "multilabel_margin_loss_forward": lambda m: ((m.f(3, 4), multilabel_target(m), 1), {}),
    "triplet_margin_loss": lambda m: ((m.f(3, 4), m.f(3, 4), m.f(3, 4)), {}),
    "multi_margin_loss": lambda m: ((m.f(3, 4), m.long([0, 1, 3])), {}),
    "binary_cross_entropy_with_logits": lambda m: ((m.f(4), m.prob(4)), {}),
    "binary_cross_entropy": lambda m: ((m.prob(4), m.prob(4)), {}),
    "ctc_loss.IntList": lambda m: ctc_inputs(m, as_tensors=False),
    "ctc_loss.Tensor": lambda m: ctc_inputs(m, as_tensors=True),
    # ---- resampling, pooling, padding
    "upsample_nearest1d": upsample(1),
    "upsample_nearest2d": upsample(2),
    "upsample_nearest3d": upsample(3),
    "_upsample_nearest_exact1d": upsample(1),
    "_upsample_nearest_exact2d": upsample(2),
    "_upsample_nearest_exact3d": upsample(3),
    "upsample_linear1d": upsample(1, False),
    "upsample_bilinear2d": upsample(2, False),
    "_upsample_bilinear2d_aa": upsample(2, False),
    "upsample_trilinear3d": upsample(3, False),
    "upsample_bicubic2d": upsample(2, False),
    "_upsample_bicubic2d_aa": upsample(2, False),
    "grid_sampler": lambda m: ((m.f(1, 1, 4, 4), m.f(1, 3, 3, 2), 0, 0, False), {}),
    "grid_sampler_2d": lambda m: ((m.f(1, 1, 4, 4), m.f(1, 3, 3, 2), 0, 0, False), {}),
    "_grid_sampler_2d_cpu_fallback": lambda m: ((m.f(1, 1, 4, 4), m.f(1, 3, 3, 2), 0, 0, False),
                                                {}),
    "grid_sampler_3d": lambda m: ((m.f(1, 1, 4, 4, 4), m.f(1, 2, 2, 2, 3), 0, 0, False), {}),
    "avg_pool3d": lambda m: ((m.f(1, 1, 4, 4, 4), [2, 2, 2]), {}),
    "max_pool3d": lambda m: ((m.f(1, 1, 4, 4, 4), [2, 2, 2]), {}),
    "adaptive_avg_pool3d": lambda m: ((m.f(1, 2, 4, 4, 4), [2, 2, 2]), {}),
    "adaptive_max_pool3d": lambda m: ((m.f(1, 2, 4, 4, 4), [2, 2, 2]), {}),
    "fractional_max_pool2d": lambda m: ((m.f(1, 1, 8, 8), [2, 2], [4, 4], m.prob(1, 1, 2)), {}),
    "fractional_max_pool3d": lambda m: ((m.f(1, 1, 8, 8, 8), [2, 2, 2], [4, 4, 4],
                                         m.prob(1, 1, 3)), {}),
    "max_unpool2d": lambda m: ((m.f(1, 1, 2, 2), m.long([[[[0, 2], [8, 10]]]]), [4, 4]), {}),
    "max_unpool3d": lambda m: ((m.f(1, 1, 2, 2, 2),
                                m.long([[[[[0, 2], [8, 10]], [[32, 34], [40, 42]]]]]),
                                [4, 4, 4], [2, 2, 2], [0, 0, 0]), {}),
    "reflection_pad1d": lambda m: ((m.f(1, 2, 5), [2, 2]), {}),
    "reflection_pad2d": lambda m: ((m.f(1, 1, 5, 5), [1, 1, 1, 1]), {}),
    "replication_pad1d": lambda m: ((m.f(1, 2, 5), [2, 2]), {}),
    "replication_pad2d": lambda m: ((m.f(1, 1, 5, 5), [1, 1, 1, 1]), {}),
    "replication_pad3d": lambda m: ((m.f(1, 1, 3, 3, 3), [1] * 6), {}),
    # ---- spectral
    "fft_fft": fft_1d, "fft_ifft": fft_1d, "fft_rfft": fft_1d, "fft_irfft": fft_1d,
    "fft_hfft": fft_1d, "fft_ihfft": fft_1d,
    "fft_fft2": fft_nd, "fft_ifft2": fft_nd, "fft_rfft2": fft_nd, "fft_irfft2": fft_nd,
    "fft_fftn": fft_nd, "fft_ifftn": fft_nd, "fft_rfftn": fft_nd, "fft_irfftn": fft_nd,
    "stft": lambda m: ((m.f(32), 8), {"window": m.pos(8), "return_complex": True}),
    "stft.center": lambda m: ((m.f(32), 8), {"window": m.pos(8), "center": True,
                                             "return_complex": True}),
    # ---- linear algebra
    "inverse": spd, "linalg_inv": spd, "linalg_inv_ex": spd,
    "linalg_cholesky": spd, "linalg_cholesky_ex": spd,
    "linalg_eigh": spd, "linalg_eigvalsh": spd, "linalg_matrix_sqrth": spd,
    "linalg_eig": mat, "linalg_eigvals": mat,
    "linalg_cond": spd,
    "linalg_cond.p_str": lambda m: ((m.spd(4), "fro"), {}),
    "linalg_matrix_rank": lambda m: ((m.f(4, 4), 1e-5), {}),
    "linalg_matrix_rank.atol_rtol_float": mat,
    "linalg_matrix_rank.atol_rtol_tensor": mat,
    "linalg_matrix_rank.tol_tensor": lambda m: ((m.f(4, 4), m.pos()), {}),
    "linalg_solve": lambda m: ((m.spd(4), m.f(4, 2)), {}),
    "linalg_lstsq": lambda m: ((m.f(5, 3), m.f(5, 2)), {}),
    "linalg_svd": tall, "linalg_svdvals": tall, "svd": tall, "linalg_qr": tall, "geqrf": tall,
    "pinverse": tall,
    "linalg_householder_product": lambda m: ((m.f(4, 3), m.f(3)), {}),
    "orgqr": lambda m: ((m.f(4, 3), m.f(3)), {}),
    "ormqr": lambda m: ((m.f(4, 3), m.f(3), m.f(4, 2)), {}),
    "linalg_tensorinv": lambda m: ((m.spd(4).reshape(4, 2, 2), 1), {}),
    "linalg_tensorsolve": lambda m: ((m.spd(6).reshape(2, 3, 6), m.f(2, 3)), {}),
    "cholesky_inverse": lambda m: ((m.tril(4),), {}),
    "cholesky_solve": lambda m: ((m.f(4, 2), m.tril(4)), {}),
    "lu_solve": lambda m: ((m.f(4, 2), m.spd(4), m.int32([1, 2, 3, 4])), {}),
    "_lu_with_info": spd,
    "triangular_solve": lambda m: ((m.f(4, 2), m.tril(4), False), {}),
    # ---- promote family: tensors of possibly different float types
    "cat": lambda m: (([m.f(4), m.f(4)],), {}),
    "stack": lambda m: (([m.f(4), m.f(4)],), {}),
    "index_copy": lambda m: ((m.f(5, 3), 0, m.long([0, 2, 4]), m.f(3, 3)), {}),
    "index_put": lambda m: ((m.f(5), [m.long([0, 2])], m.f(2)), {}),
    "scatter_add": lambda m: ((m.f(5), 0, m.long([0, 1, 2]), m.f(3)), {}),
    "cross": lambda m: ((m.f(4, 3), m.f(4, 3)), {"dim": 1}),
    "dot": two,
    "vdot": two,
    "tensordot": lambda m: ((m.f(3, 4), m.f(4, 5), [1], [0]), {}),
    "bilinear": lambda m: ((m.f(2, 3), m.f(2, 4), m.f(5, 3, 4), m.f(5)), {}),
    # listed by older releases only (cholesky and qr until 2.14: their gates in cpu.yaml)
    "cholesky": spd,
    "qr": tall,
}

# Ops of a shipped list whose behaviour cannot be exercised here (key -> reason).  Keep it short.
# The named-tensor overloads are listed by releases before 2.13 only.
NAMED_TENSORS = "named tensors are not supported under a TorchDispatchMode (NYI)"
NO_BEHAVIOUR_TEST = {
    key: NAMED_TENSORS
    for key in ("prod.dim_Dimname", "softmax.Dimname", "log_softmax.Dimname", "cumprod.dimname", "cumsum.dimname",
                "sum.dim_DimnameList", "norm.names_ScalarOpt_dim", "index_copy.dimname")
}


# --------------------------------------------------------------------------------------------
# Running an op under PyTorch's autocast
# --------------------------------------------------------------------------------------------

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


class CallLog(TorchDispatchMode):
    """Records the calls that reach the Python key, i.e. what autocast passed down."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.calls.append((func, args, kwargs))
        return func(*args, **kwargs)

    def leading_casts(self):
        """(from, to) of the dtype casts issued before the first other call: autocast's own."""
        casts = []
        for func, args, kwargs in self.calls:
            if func.namespace != "aten":  # e.g. prim.device: fake tensors asking for metadata
                continue
            if func is not torch.ops.aten._to_copy.default:
                break
            if "dtype" in kwargs and isinstance(args[0], torch.Tensor):
                casts.append((args[0].dtype, kwargs["dtype"]))
        return casts

    def casts(self):
        return [
            (args[0].dtype, kwargs["dtype"])
            for func, args, kwargs in self.calls
            if func is torch.ops.aten._to_copy.default and "dtype" in kwargs
        ]


def resolve_op(key):
    name, _, overload = key.partition(".")
    return getattr(getattr(torch.ops.aten, name), overload or "default")


def first_float_output(out):
    stack = [out]
    while stack:
        item = stack.pop(0)
        if isinstance(item, (tuple, list)):
            stack[0:0] = list(item)
        elif isinstance(item, torch.Tensor) and (item.is_floating_point() or item.is_complex()):
            return item
    return None


class Runner:
    """Runs ops for one shipped policy, on `device`, under PyTorch's autocast for it."""

    def __init__(self, filename, device, fake):
        header, _ = load_policy(filename)
        self.lower = DTYPES[header["lower_precision"][0]]
        self.device = device
        self.fake = fake

    def _context(self):
        if not self.fake:
            return torch.autocast(self.device, dtype=self.lower)
        return self._fake_autocast()

    @contextlib.contextmanager
    def _fake_autocast(self):
        # torch.autocast("cuda") turns itself off when no GPU is present; set the same
        # thread-local state it would set, directly.
        device = self.device
        prev = torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)
        torch.set_autocast_enabled(device, True)
        torch.set_autocast_dtype(device, self.lower)
        try:
            yield
        finally:
            torch.set_autocast_enabled(device, prev[0])
            torch.set_autocast_dtype(device, prev[1])
            torch.clear_autocast_cache()

    def _mode(self):
        if not self.fake:
            return contextlib.nullcontext()
        from torch._subclasses.fake_tensor import FakeTensorMode

        return FakeTensorMode()

    def run(self, key, dtypes, extra_kwargs=None):
        """Returns (output or exception, CallLog)."""
        torch.manual_seed(0)
        with self._mode():
            args, kwargs = RECIPES[key](Inputs(self.device, dtypes))
            kwargs = {**kwargs, **(extra_kwargs or {})}
            log = CallLog()
            with self._context(), log:
                try:
                    out = resolve_op(key)(*args, **kwargs)
                except Exception as exc:  # banned ops raise; reported by the caller
                    out = exc
            return out, log


def kernel_raises_alone(log, key, error):
    """Whether the op's own kernel, called outside autocast with exactly the arguments autocast
    passed down to it, raises the same error: a limit of this machine's kernel (oneDNN has no
    bfloat16 LSTM primitive on CPUs without AVX-512, say), not something autocast did."""
    op = resolve_op(key)
    for func, args, kwargs in log.calls:
        if func is op:
            try:
                func(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - compared with the error autocast saw
                return type(exc) is type(error) and str(exc) == str(error)
            return False
    return False


# (device, op) pairs whose kernel cannot run on fake tensors of that device on a machine without
# the device (the kernel asks the device runtime or driver).  Autocast's casts happen before the
# kernel is reached, so for these only the casts are checked, not the output.
FAKE_DEVICE_LIMITS = {
    ("cuda", "cudnn_convolution"): "cuDNN kernels need a CUDA driver even for fake tensors",
    ("cuda", "cudnn_convolution_transpose"): "cuDNN kernels need a CUDA driver even for fake "
    "tensors",
    ("xpu", "grid_sampler"): "picks its kernel by asking the XPU runtime",
    ("mtia", "grid_sampler"): "picks its kernel by asking the MTIA runtime",
    ("xpu", "scaled_dot_product_attention"): "picks its backend by asking the XPU runtime",
}

RUNNERS = {
    "cpu.yaml": [("cpu", False)],
    "cuda.yaml": [("cuda", True)],
    "generic.yaml": [("xpu", True), ("mtia", True)],
}

F32 = (torch.float32, torch.complex64)


def dtype_of(t):
    return None if t is None else t.dtype


def check_behaviour(filename, device, fake, key, list_name):
    runner = Runner(filename, device, fake)
    lower, f32 = runner.lower, torch.float32

    def run(dtypes, **extra):
        out, log = runner.run(key, dtypes, extra)
        if isinstance(out, Exception) and list_name != "banned":
            reached_kernel = any(func.namespace == "aten" for func, _, _ in log.calls)
            if fake and (device, key) in FAKE_DEVICE_LIMITS and reached_kernel:
                return None, log, None  # casts are checked; the output cannot be
            if not fake and kernel_raises_alone(log, key, out):
                return None, log, None  # this machine's kernel cannot run it; casts are checked
            raise AssertionError(f"{key} raised under autocast: {out!r}") from out
        return out, log, first_float_output(out) if not isinstance(out, Exception) else None

    if list_name == "lower_precision_fp":
        out, log, t = run([f32])
        assert (f32, lower) in log.leading_casts(), f"no cast to {lower}: {log.leading_casts()}"
        assert t is None or t.dtype == lower, f"output {t.dtype}, expected {lower}"
    elif list_name == "fp32":
        out, log, t = run([lower])
        assert (lower, f32) in log.leading_casts(), f"no cast to float32: {log.leading_casts()}"
        assert t is None or t.dtype in F32, f"output {t.dtype}, expected float32"
    elif list_name == "fp32_set_opt_dtype":
        out, log, t = run([lower])
        assert dtype_of(t) == f32, f"output {dtype_of(t)}, expected float32"
        # an explicit dtype is kept, and nothing is cast
        out, log, t = run([lower], dtype=lower)
        assert (lower, f32) not in log.casts(), f"cast with explicit dtype: {log.casts()}"
        assert dtype_of(t) == lower, f"explicit dtype={lower} gave {dtype_of(t)}"
    elif list_name == "fp32_append_dtype":
        out, log, t = run([lower])
        assert dtype_of(t) == f32, f"output {dtype_of(t)}, expected float32"
        assert (lower, f32) not in log.leading_casts(), "append_dtype must not cast inputs"
        item = load_policy(filename)[1][list_name][key]
        target = item.get("redispatch") if isinstance(item, dict) else None
        called = [
            func.__name__ for func, args, kwargs in log.calls
            if func.namespace == "aten" and kwargs.get("dtype") == f32
        ]
        if target:
            assert called[:1] == [target], f"expected a call of {target}, saw {called}"
        else:
            name = key.partition(".")[0]
            assert any(c.startswith(name + ".") for c in called), f"no dtype redispatch: {called}"
    elif list_name == "promote":
        out, log, t = run([lower, f32])
        assert (lower, f32) in log.leading_casts(), f"no promotion cast: {log.leading_casts()}"
        assert t is None or t.dtype == f32, f"mixed inputs gave {t.dtype}, expected float32"
        out, log, t = run([lower])
        assert not log.leading_casts(), f"all-{lower} inputs were cast: {log.leading_casts()}"
        assert t is None or t.dtype == lower, f"all-{lower} inputs gave {t.dtype}"
    elif list_name == "banned":
        out, log, t = run([f32])
        assert isinstance(out, RuntimeError), f"{key} did not raise under autocast"
        assert "autocast" in str(out), str(out)
    else:  # pragma: no cover
        raise AssertionError(list_name)


def behaviour_cases():
    cases = []
    for filename, runners in sorted(RUNNERS.items()):
        try:
            ops = policy_ops(filename)
        except (OSError, ValueError, yaml.YAMLError) as exc:
            # reported by test_entries_are_valid; keep collection of the other files going
            cases.append(pytest.param(filename, None, None, None, None, id=f"{filename[:-5]}-load",
                                      marks=pytest.mark.skip(reason=f"cannot load: {exc}")))
            continue
        for key, list_name in ops.items():
            for device, fake in runners:
                marks = []
                if key in NO_BEHAVIOUR_TEST:
                    marks.append(pytest.mark.skip(reason=NO_BEHAVIOUR_TEST[key]))
                cases.append(pytest.param(
                    filename, device, fake, key, list_name, marks=marks,
                    id=f"{filename[:-5]}-{device}-{list_name}-{key}",
                ))
    return cases


def test_every_listed_op_has_a_recipe():
    for filename in RUNNERS:
        missing = sorted(set(policy_ops(filename)) - set(RECIPES) - set(NO_BEHAVIOUR_TEST))
        assert not missing, f"{filename}: no input recipe for {missing}"


def pinned_release() -> str:
    """The PyTorch release scripts/requirements.txt pins (major.minor)."""
    for line in (pathlib.Path(__file__).resolve().parents[3] / "scripts" / "requirements.txt").read_text().splitlines():
        if line.startswith("torch=="):
            return ".".join(line.split("==")[1].split(".")[:2])
    return ""


@pytest.mark.parametrize("filename,device,fake,key,list_name", behaviour_cases())
def test_behaviour(filename, device, fake, key, list_name):
    if fake:
        # What an op does on a fake cuda/xpu/mtia tensor depends on the release's fake-tensor
        # support (2.11 cannot run _convolution or gru_cell there; 2.4 has no MTIA autocast), so
        # these run for the pinned release only; registration parity covers the others
        # (docs/policies.md).
        running = ".".join(torch.__version__.split(".")[:2])
        if running != pinned_release():
            pytest.skip(f"fake-device behaviour is checked with the pinned PyTorch {pinned_release()}, not {running}")
    if key not in RECIPES:
        pytest.fail(f"no input recipe for {key}")
    check_behaviour(filename, device, fake, key, list_name)


# --------------------------------------------------------------------------------------------
# Refresh helper: classify every op registered for a key by running it
#   python3 tests/python/policy/test_shipped_policies.py AutocastCPU [AutocastCUDA ...]
# --------------------------------------------------------------------------------------------

CLASSIFY_DEVICES = {
    "AutocastCPU": ("cpu", False, torch.bfloat16),
    "AutocastCUDA": ("cuda", True, torch.float16),
    "AutocastXPU": ("xpu", True, torch.float16),
    "AutocastMTIA": ("mtia", True, torch.float16),
}


def classify(key, device, fake, lower):
    """Which list `key` behaves like under PyTorch's autocast on `device` (needs a recipe)."""
    runner = Runner.__new__(Runner)
    runner.lower, runner.device, runner.fake = lower, device, fake
    f32 = torch.float32
    schema = native_schemas().get(key)
    has_dtype = schema is not None and any(a.name == "dtype" for a in schema.arguments.flat_all)
    out, log = runner.run(key, [f32])
    if (f32, lower) in log.leading_casts():
        raised = isinstance(out, Exception)
        return "lower_precision_fp" + (" (casts seen; the op itself raised)" if raised else "")
    if isinstance(out, Exception):
        return "banned" if "autocast" in str(out) else f"? raised with float32 inputs: {out!r:.120}"
    out, log = runner.run(key, [lower])
    if isinstance(out, Exception):
        return f"? raised with {lower} inputs: {out!r:.120}"
    if (lower, f32) in log.leading_casts():
        if has_dtype:  # a composite op may cast by itself once autocast has set dtype=float32
            _, log2 = runner.run(key, [lower], {"dtype": lower})
            if (lower, f32) not in log2.casts():
                return "fp32_set_opt_dtype"
        return "fp32"
    if dtype_of(first_float_output(out)) == f32:
        return "fp32_set_opt_dtype" if has_dtype else "fp32_append_dtype"
    out, log = runner.run(key, [lower, f32])
    if not isinstance(out, Exception) and (lower, f32) in log.leading_casts():
        return "promote"
    return "? no autocast effect seen"


def main(keys):
    for dispatch_key in keys:
        device, fake, lower = CLASSIFY_DEVICES[dispatch_key]
        print(f"# {dispatch_key} (torch {torch.__version__})")
        for key in sorted(registered_ops(dispatch_key)):
            if key not in RECIPES:
                verdict = "? no input recipe in RECIPES"
            else:
                try:
                    verdict = classify(key, device, fake, lower)
                except Exception as exc:  # report and go on
                    verdict = f"? {exc!r:.120}"
            print(f"{key}: {verdict}")


if __name__ == "__main__":
    import sys
    import warnings

    warnings.simplefilter("ignore")
    main(sys.argv[1:] or list(CLASSIFY_DEVICES))
