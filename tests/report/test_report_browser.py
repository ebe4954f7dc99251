"""The report as a user sees it: a transformers Llama built from a config (no download), attached,
with statistics, value ranges and the non-finite watch on, its report rendered by headless
Chromium (Debian's `chromium`, installed by scripts/setup): the page loads without a script
error, the script runs to its end, and the page shows the model's modules; a screenshot is taken.

Skips without transformers (the models venv of scripts/models-venv has it; under ctest with that
venv's python, an error: tests/python/requires.py); without chromium, which scripts/setup installs,
an error under ctest and a skip by hand. By hand:
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

sys.path.insert(0, str(REPO / "tests" / "python"))  # built_tree, requires
import requires  # noqa: E402
from built_tree import require_built  # noqa: E402

require_built(BUILD, "python/autocastgen/reporter/__init__.py")  # an error under ctest where missing
if CHROMIUM is None:
    if "AUTOCASTGEN_BUILD_DIR" in os.environ:
        raise RuntimeError("no chromium on PATH: scripts/setup installs Debian's (apt-get install chromium)")
    pytest.skip("no chromium (scripts/setup installs Debian's)", allow_module_level=True)
import torch  # noqa: E402

transformers = requires.module("transformers")


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
    for path, _module in model.named_modules():
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


def test_large_table_drawn_sorted_and_filtered_in_chromium(tmp_path):
    # 3000 rows: report.js decodes the embedded rows (Note [compact rows] in html.py) and draws the
    # rows in view; a probe added to a copy of the page sorts and filters as a click and typing do.
    import json
    import random

    import autocastgen.reporter as reporter
    from autocastgen.reporter import html

    rng = random.Random(40)
    ops = []
    for i in range(3000):
        calls = rng.randint(1, 60)
        ops.append({"op": ("aten::linear", "aten::mm", "aten::softmax")[i % 3], "policy": "lower_precision_fp",
                    "module": f"blocks.{i // 30}.{i % 10}", "calls": calls, "ran_in": {"bfloat16": calls},
                    "casts": 0, "cast_bytes": 0, "cache_hits": 0, "output_max_abs": 10 ** rng.uniform(-3, 5)})
    (tmp_path / "big.json").write_text(json.dumps({"version": 1, "ops": ops}))
    text = reporter.render([str(tmp_path / "big.json")])
    data = json.loads(re.search(r'<script type="application/json" id="rows-modules">(.*?)</script>', text).group(1))
    columns = [c[0] for c in data["columns"]]
    rows = html.decode_rows(data)
    # %-formatting keeps the JavaScript's braces as written (an f-string would double them).
    probe = """<script>
(function () {
  const table = document.querySelector('table[data-rows="modules"]');
  const cells = () => Array.from(table.tBodies[0].rows).filter((r) => !r.classList.contains("pad"))
    .map((r) => Array.from(r.cells).map((td) => td.textContent));
  const out = {drawn: cells(), count: document.querySelector("#modules .count").textContent};
  table.tHead.rows[0].cells[%d].click();
  out.sorted = cells();
  const filter = document.querySelector("#modules input");
  filter.value = "blocks.7. LINEAR";
  filter.dispatchEvent(new Event("input"));
  out.filtered = cells();
  out.filteredCount = document.querySelector("#modules .count").textContent;
  filter.value = "";
  filter.dispatchEvent(new Event("input"));
  // Scrolled to the middle: the rows drawn there are the ones in view (drawn on the next frame).
  const scroller = table.closest(".scroll");
  const row = table.tBodies[0].rows[1].getBoundingClientRect().height;
  scroller.scrollTop = Math.round(row * 1500);
  scroller.dispatchEvent(new Event("scroll"));
  requestAnimationFrame(() => requestAnimationFrame(() => {
    out.scrolled = cells();
    const view = scroller.getBoundingClientRect();
    out.inView = Array.from(table.tBodies[0].rows).filter((r) => !r.classList.contains("pad")).filter((r) => {
      const box = r.getBoundingClientRect();
      return box.bottom > view.top && box.top < view.bottom;
    }).map((r) => r.cells[0].textContent + " " + r.cells[1].textContent);
    const pre = document.createElement("pre");
    pre.id = "probe";
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  }));
})();
</script>
</body>""" % columns.index("calls")  # noqa: UP031
    page = tmp_path / "big.html"
    page.write_text(text.replace("</body>", probe))
    dom = chromium("--dump-dom", "--virtual-time-budget=5000", page.resolve().as_uri(), tmp=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert re.search(r'<body[^>]*data-ready="true"', dom.stdout)
    import html as html_module

    out = json.loads(html_module.unescape(re.search(r'<pre id="probe">(.*?)</pre>', dom.stdout, re.S).group(1)))
    width = len(columns)
    assert out["count"] == "3000 rows"
    assert 20 <= len(out["drawn"]) < 3000 and out["drawn"] == [r[:width] for r in rows[:len(out["drawn"])]]
    # Sorted by calls, most first; equal calls keep the order they had (reversed with it).
    calls = columns.index("calls")
    expected = sorted(enumerate(rows), key=lambda item: (int(item[1][calls]), item[0]), reverse=True)
    assert out["sorted"] == [r[:width] for _, r in expected[:len(out["sorted"])]]
    # Filtered: the rows holding both words (in any case), in the file's order again.
    kept = [r[:width] for r in rows if any("blocks.7." in c for c in r[:width]) and any("linear" in c for c in r[:width])]
    assert out["filteredCount"] == f"{len(kept)} rows (filtered from 3000)"
    assert out["filtered"] == kept[:len(out["filtered"])] and len(out["filtered"]) == len(kept)
    # Scrolled to row 1500: a run of rows around it is drawn, in the data's order, and those in
    # the scroller's view are among them (the padding rows keep them where they belong).
    scrolled = out["scrolled"]
    start = [r[:width] for r in rows].index(scrolled[0])  # each row's (module, op) differs
    assert start < 1500 < start + len(scrolled) and scrolled == [r[:width] for r in rows[start:start + len(scrolled)]]
    assert len(scrolled) < 400 and 10 <= len(out["inView"])
    in_view = [f"{r[0]} {r[1]}" for r in rows[1480:1560]]
    assert all(text in in_view for text in out["inView"]), (out["inView"][:3], in_view[:3])


# Names a statistics file can hold, each trying to run script on the page: as HTML, as an end of
# the JSON data's <script> element, as an attribute, as the template's own {{variables}}, and
# characters JavaScript source cannot hold raw. The handlers would mark the page (data-pwned).
MARK = "document.documentElement.setAttribute('data-pwned',"
HOSTILE_NAMES = [
    f'<img src=x onerror="{MARK}1)">',
    f"</script><script>{MARK}2)</script>",
    f'"><svg onload="{MARK}3)">',
    f"'><iframe srcdoc=\"<script>parent.{MARK}4)</script>\">",
    "<!--<script>",
    "{{script}}{{body}}",
    "\u2028\u2029`${alert(5)}`",
    f"javascript:{MARK}6)",
    "\x1b[31m\u202e",
]


def test_hostile_names_run_no_script_in_chromium(tmp_path):
    # Every name a file gives the page (op, module, rule, dtype, the first event's message and line,
    # the file's own name, the title), in more rows than the first page so that report.js draws
    # them from the embedded data too; the page must load, run its script to the end and run none
    # of theirs.
    import json

    import autocastgen.reporter as reporter

    ops = []
    for i in range(600):
        name = HOSTILE_NAMES[i % len(HOSTILE_NAMES)]
        ops.append({"op": f"{name}::op{i}", "policy": name, "module": f"model.{name}.{i % 5}", "calls": 1 + i % 3,
                    "ran_in": {name: 1 + i % 3}, "casts": 0, "cast_bytes": 0, "cache_hits": 0, "outputs_checked": 1,
                    "nonfinite": 1 if i < len(HOSTILE_NAMES) else 0, "output_max_abs": 70000.0 + i,
                    "first_nonfinite": {"message": name, "line": name} if i < len(HOSTILE_NAMES) else None})
    source = tmp_path / "<img src=x onerror=alert(7)>.json"
    source.write_text(json.dumps({"version": 1, "ops": ops}))
    page = reporter.report(str(source), output=tmp_path / "hostile.html", title=HOSTILE_NAMES[0])
    text = page.read_text()
    for raw in ("<img src=x", "<svg onload", "<iframe srcdoc", "</script><script>", "<!--<script>"):
        assert raw not in text, raw  # every name escaped in the file
    dom = chromium("--dump-dom", "--virtual-time-budget=5000", page.resolve().as_uri(), tmp=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert re.search(r'<body[^>]*data-ready="true"', dom.stdout), dom.stdout[:500]
    assert "data-pwned=" not in dom.stdout
    assert "<img" not in dom.stdout and "<iframe" not in dom.stdout and "<svg onload" not in dom.stdout
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == [], console
    # The names are there, as text: the per-op table shows the first one's op as written.
    import html as html_module

    assert html_module.escape(f"{HOSTILE_NAMES[0]}::op0", quote=False) in dom.stdout
