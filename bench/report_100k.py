"""Times `autocastgen report` on a 100k-row statistics file (issue 40: "large files render in
seconds"): reading and checking the file, writing the page, and headless Chromium loading it
until report.js has run (body data-ready). Not a test: run by hand, numbers in bench/README.md.

  PYTHONPATH=build/python python3 bench/report_100k.py [ROWS]
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import autocastgen


def synthetic(rows: int) -> dict:
    """`rows` rows of a record with modules and ranges: 5 ops in rows/5 modules of a deep model."""
    rng = random.Random(40)
    ops = []
    for i in range(rows):
        big = 10 ** rng.uniform(-3, 5.2)
        ops.append({"op": f"aten::{('linear', 'mm', 'bmm', 'cat', 'softmax')[i % 5]}", "policy": "lower_precision_fp",
                    "module": f"model.blocks.{i // 500}.layers.{(i // 5) % 100}", "calls": rng.randint(1, 50),
                    "ran_in": {"float32": 1}, "input_dtypes": ["float32"], "casts": 0, "cast_bytes": 0,
                    "cache_hits": 0, "cache_misses": 0, "cache_evictions": 0, "outputs_checked": 1, "nonfinite": 0,
                    "output_max_abs": big,
                    "ranges": {"calls": 1, "input_max_abs": big, "input_min_abs": 1e-3, "output_max_abs": big,
                               "output_min_abs": 1e-4, "output_elements": 4096,
                               "float16_overflow": 40 if big > 65504 else 0, "float16_underflow": 0,
                               "bfloat16_overflow": 0, "bfloat16_underflow": 0}})
    for row in ops:
        row["ran_in"] = {"float32": row["calls"]}
    return {"version": 1, "ops": ops}


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    with tempfile.TemporaryDirectory() as tmp:
        path, page = Path(tmp) / "big.json", Path(tmp) / "big.html"
        path.write_text(json.dumps(synthetic(rows)))
        start = time.perf_counter()
        autocastgen.report(str(path), output=page)
        made = time.perf_counter() - start
        print(f"{rows} rows: file {path.stat().st_size / 1e6:.1f} MB, page {page.stat().st_size / 1e6:.1f} MB, "
              f"read + checked + written in {made:.2f} s")
        browser = shutil.which("chromium")
        if browser:
            start = time.perf_counter()
            dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp}/p",
                                  "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=600)
            loaded = time.perf_counter() - start
            ready = 'data-ready="true"' in dom.stdout
            print(f"chromium --headless --dump-dom: {loaded:.2f} s (browser start included), script ran: {ready}")


if __name__ == "__main__":
    main()
