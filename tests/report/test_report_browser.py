"""The report as a user sees it: a transformers Llama built from a config (no download), attached,
with statistics, value ranges and the non-finite watch on, its report rendered by headless
Chromium (Debian's `chromium`, installed by scripts/setup): the page loads without a script
error, the script runs to its end, and the page shows the model's modules; a screenshot is taken.

Skips without chromium or transformers (the models venv of scripts/models-venv has it). By hand:
  AUTOCASTGEN_BUILD_DIR=build-h40 /root/.cache/autocastgen/venv-models/bin/python -m pytest tests/report/test_report_browser.py
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium (scripts/setup installs Debian's)"),
    pytest.mark.skipif(not (BUILD / "python" / "autocastgen" / "reporter").is_dir(),
                       reason="the build's Python package is missing (set AUTOCASTGEN_BUILD_DIR)"),
]
sys.path.insert(0, str(BUILD / "python"))
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def llama_report(out: Path, stats_path: Path) -> tuple[Path, object]:
    """A two-layer Llama from a config, one float16 CPU autocast forward under the shipped CPU
    policy (runtime kernels), attached, statistics with ranges and the watch on; its report."""
    import autocastgen

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config).eval()
    autocastgen.load_policy(autocastgen.shipped_policy("cpu"))
    try:
        tokens = torch.randint(0, 128, (2, 16))
        with torch.no_grad(), autocastgen.attach(model), autocastgen.watch("record"), \
                autocastgen.stats(str(stats_path), ranges=True), torch.autocast("cpu", dtype=torch.float16):
            model(tokens)
    finally:
        autocastgen.clear_runtime_policies()
    return autocastgen.report(str(stats_path), output=out, model=model), model


def chromium(*args: str, tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--no-first-run", "--enable-logging=stderr", f"--user-data-dir={tmp / 'profile'}", *args],
                          capture_output=True, text=True, timeout=120)


def test_report_in_headless_chromium(tmp_path):
    page, model = llama_report(tmp_path / "llama.html", tmp_path / "llama.stats.json")
    url = page.resolve().as_uri()
    dom = chromium("--dump-dom", "--virtual-time-budget=5000", url, tmp=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    # The script ran to its end (report.js marks the body), and nothing in the page failed.
    assert re.search(r'<body[^>]*data-ready="true"', dom.stdout), dom.stdout[:500]
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == [], console
    # The model's modules, as named_modules() spells them, with their classes, in the tree.
    for path, module in model.named_modules():
        if path.count(".") <= 3:
            assert f'data-path="{path}"' in dom.stdout, path
    assert "(LlamaDecoderLayer)" in dom.stdout and "(LlamaAttention)" in dom.stdout
    assert 'data-path="model.layers.1.self_attn.q_proj"' in dom.stdout
    # The tables as report.js rendered them: the per-op table has aten::linear in float16.
    assert re.search(r"<td[^>]*>aten::linear</td><td[^>]*>lower_precision_fp</td><td[^>]*>\d+</td>"
                     r"<td[^>]*>float16 \d+</td>", dom.stdout)
    shot = tmp_path / "llama.png"
    taken = chromium(f"--screenshot={shot}", "--window-size=1280,1400", url, tmp=tmp_path)
    assert taken.returncode == 0, taken.stderr[-2000:]
    header = shot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", header[16:24]) == (1280, 1400)
