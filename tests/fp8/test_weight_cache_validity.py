"""The fp8 weight cache serves a weight's fp8 copy only while the weight holds the data the copy was
made from (Note [data stamps] in runtime/torch/data_stamp.h), and only within one autocast scope
(Note [PyTorch's scope end] in runtime/torch/fp8/weight_cache.cpp).

One test per way a weight's data can change without the usual in-place op; each checks that the
cache was serving before the change and that the result after it is, bit for bit, the one an
empty cache gives.
"""
from __future__ import annotations

import threading

import pytest
import torch
from test_fp8_gemm import act, param

from exact import assert_exact, exact

if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_scaled_mm", "CPU"):
    pytest.skip(f"torch {torch.__version__} has no CPU _scaled_mm kernel", allow_module_level=True)

pytestmark = pytest.mark.usefixtures("fresh_fp8_state")


def linear(ops, x, w, cache=True):
    return ops.fp8_linear(x, w, None, out_dtype=torch.float32, cache=cache)


def quantizations_and_hits(ops):
    quantizations, hits, _ = ops.fp8_weight_cache_stats()
    return quantizations, hits


def served_from_cache(ops, x, w):
    """Fills the cache with `w`'s copy and shows that a second call is a hit."""
    first = linear(ops, x, w)
    before = quantizations_and_hits(ops)
    assert_exact(linear(ops, x, w), first)
    after = quantizations_and_hits(ops)
    assert after == (before[0], before[1] + 1), "the cache serves the weight before the change"
    return first


def assert_requantized(ops, x, w, stale, way):
    quantizations = quantizations_and_hits(ops)[0]
    got = linear(ops, x, w)
    assert quantizations_and_hits(ops)[0] == quantizations + 1, f"{way}: the weight was not quantised again"
    assert_exact(got, linear(ops, x, w, cache=False), f"{way}: not the fresh result")
    assert not exact(got, stale), f"{way}: the test changed nothing"


def new_values(w, seed):
    return torch.randn(w.shape, generator=torch.Generator().manual_seed(seed)) * 3


def test_copy_under_no_grad(ops):
    w, x = param(32, 64), act(16, 64, requires_grad=False)
    stale = served_from_cache(ops, x, w)
    with torch.no_grad():
        w.copy_(new_values(w, 1))
    assert_requantized(ops, x, w, stale, "copy_ under no_grad")


def test_data_assignment(ops):
    w, x = param(32, 64), act(16, 64, requires_grad=False)
    stale = served_from_cache(ops, x, w)
    version = w._version
    w.data = new_values(w, 2)  # another storage; the version counter stays
    assert w._version == version
    assert_requantized(ops, x, w, stale, ".data =")


def test_set_(ops):
    w, x = param(32, 64), act(16, 64, requires_grad=False)
    stale = served_from_cache(ops, x, w)
    with torch.no_grad():
        w.set_(new_values(w, 3))
    assert_requantized(ops, x, w, stale, "set_")


def test_storage_resize_and_refill_through_an_alias(ops):
    w, x = param(32, 64), act(16, 64, requires_grad=False)
    stale = served_from_cache(ops, x, w)
    storage = w.untyped_storage()
    storage.resize_(2 * storage.nbytes())  # the data moves; written through another tensor:
    alias = torch.empty(0).set_(storage, 0, w.shape, w.stride())
    with torch.no_grad():
        alias.copy_(new_values(w, 4))
    assert w._version == 0, "the weight's own version counter never moved"
    assert_requantized(ops, x, w, stale, "storage resized and refilled")


def test_load_state_dict_copy_and_assign(ops):
    layer = torch.nn.Linear(64, 32, bias=False)
    x = act(16, 64, requires_grad=False)
    stale = served_from_cache(ops, x, layer.weight)
    layer.load_state_dict({"weight": new_values(layer.weight, 5)})
    assert_requantized(ops, x, layer.weight, stale, "load_state_dict")
    stale = served_from_cache(ops, x, layer.weight)
    layer.load_state_dict({"weight": torch.nn.Parameter(new_values(layer.weight, 6))}, assign=True)
    assert_requantized(ops, x, layer.weight, stale, "load_state_dict(assign=True)")


def refill_in_place(w, values):
    """FSDP2's free and refill of an unsharded parameter: the storage is freed and re-allocated at
    its size, and the all-gather writes into it through another tensor; the parameter's TensorImpl,
    version counter, size and (usually) address stay."""
    storage = w.untyped_storage()
    nbytes, address = storage.nbytes(), storage.data_ptr()
    storage.resize_(0)
    storage.resize_(nbytes)
    with torch.no_grad():
        torch.empty(0).set_(storage, 0, w.shape, w.stride()).copy_(values)
    return storage.data_ptr() == address


def test_fsdp_style_refill_between_torch_autocast_scopes(ops):
    w, x = param(32, 64), act(16, 64, requires_grad=False)
    addresses_repeated = 0
    for step in range(4):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = linear(ops, x, w)
            assert_exact(linear(ops, x, w), got)  # within the scope the copy is reused
            assert_exact(got, linear(ops, x, w, cache=False), f"step {step}: a stale fp8 weight")
        addresses_repeated += refill_in_place(w, new_values(w, 10 + step))
        assert w._version == 0
    # The hazard this test is about: on glibc the freed block comes back at once.
    print(f"address repeated in {addresses_repeated} of 4 refills")
    # Per step: one quantisation for the scope (then a hit), one for the uncached reference.
    assert quantizations_and_hits(ops) == (8, 4)


def test_the_end_of_a_torch_autocast_scope_drops_the_copies(ops):
    w, x = param(32, 64), act(16, 64, requires_grad=False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            linear(ops, x, w)
        linear(ops, x, w)  # an inner scope's end keeps them, as PyTorch's cast cache
        assert ops.fp8_weight_cache_stats() == [1, 1, 1]
    assert ops.fp8_weight_cache_stats()[2] == 0
    with torch.autocast("cpu", dtype=torch.bfloat16):
        linear(ops, x, w)
    assert quantizations_and_hits(ops) == (2, 1)


def test_another_threads_scope_end_only_costs_a_requantisation(ops):
    # PyTorch's cast cache is one for the process: a scope ending elsewhere clears it, and this
    # thread's copies go too (never stale, at worst quantised once more).
    w, x = param(32, 64), act(16, 64, requires_grad=False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = linear(ops, x, w)

        def other():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                pass

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert_exact(linear(ops, x, w), want)


def test_inference_mode_and_no_cache_scopes(ops):
    w, x = param(32, 64), act(16, 64, requires_grad=False)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        first = linear(ops, x, w)
        assert_exact(linear(ops, x, w), first)
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
        # PyTorch keeps no casts here, so nothing tells the scope's end: no copy outlives a call.
        linear(ops, x, w)
        before = quantizations_and_hits(ops)
        linear(ops, x, w)
        assert quantizations_and_hits(ops)[0] == before[0] + 1
