"""Which PyTorch autocast dispatch keys each shipped policy stands for (shared by the release checks
and tests/python/policy/test_shipped_policies.py)."""

# generic.yaml is the device-neutral list that PyTorch registers for XPU, MTIA (from 2.7) and MAIA
# (from 2.8), and offers PrivateUse1 backends; a key that a torch build lacks, or for which nothing
# is registered (PrivateUse1: the backend registers it itself), is skipped -- but at least one key
# per file must be checked.
POLICY_KEYS = {
    "cpu.yaml": ["AutocastCPU"],
    "cuda.yaml": ["AutocastCUDA"],
    "generic.yaml": ["AutocastPrivateUse1", "AutocastXPU", "AutocastMTIA", "AutocastMAIA"],
}

# Kernels PyTorch registers on an autocast key by hand, outside its lists, with behaviour that no
# list policy expresses.  They are deliberately absent from the shipped YAML; the checks still
# demand that they are registered, so a stale entry here is noticed.
HANDWRITTEN = {
    "AutocastCUDA": {
        "_cudnn_rnn": "registered from aten/src/ATen/cudnn/AutocastRNN.cpp; per PyTorch's source "
        "it casts to float16 whatever the autocast dtype and re-flattens the RNN weights into one "
        "half-precision buffer (not runnable here: needs a CUDA driver even on fake tensors)",
    },
}
