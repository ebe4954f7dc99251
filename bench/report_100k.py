"""Times `autocastgen report` on a 100k-row statistics file (issue 40: "large files render in
seconds"): reading and checking the file, writing the page, and headless Chromium loading it
until report.js has run (body data-ready). Not a test: run by hand, numbers in bench/README.md.

  PYTHONPATH=build/python python3 bench/report_100k.py [ROWS] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", nargs="?", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3, help="times each step is timed (medians printed)")
    options = parser.parse_args()
    rows = options.rows
    browser = shutil.which("chromium")
    made, loaded, ready = [], [], True
    with tempfile.TemporaryDirectory() as tmp:
        path, page = Path(tmp) / "big.json", Path(tmp) / "big.html"
        path.write_text(json.dumps(synthetic(rows)))
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        for _ in range(options.runs):
            start = time.perf_counter()
            autocastgen.report(str(path), output=page)
            made.append(time.perf_counter() - start)
            if browser:
                start = time.perf_counter()
                dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp}/p",
                                      "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=600)
                loaded.append(time.perf_counter() - start)
                ready = ready and 'data-ready="true"' in dom.stdout
        print(f"{rows} rows: file {path.stat().st_size / 1e6:.1f} MB, page {page.stat().st_size / 1e6:.1f} MB, "
              f"read + checked + written in {statistics.median(made):.2f} s (median of {len(made)}: "
              f"{', '.join(f'{t:.2f}' for t in made)})")
        if loaded:
            print(f"chromium --headless --dump-dom: {statistics.median(loaded):.2f} s (median of {len(loaded)}: "
                  f"{', '.join(f'{t:.2f}' for t in loaded)}; browser start included), script ran: {ready}")
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
