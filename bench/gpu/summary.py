#!/usr/bin/env python3
"""Writes the GPU check's summary (Markdown) from the files scripts/gpu-check left in a folder:
env.txt, phases.txt, tests.log (pytest and gtest closing lines), scaler.json, sweep.jsonl, fp8.json,
fp8_rowwise.json.

Usage: bench/gpu/summary.py OUT_DIR
"""
from __future__ import annotations

import json
import pathlib
import re
import sys


def read(path):
    return path.read_text(errors="replace") if path.exists() else ""


def number(value, digits=3):
    return "-" if value is None else f"{value:.{digits}g}" if isinstance(value, float) else str(value)


def test_lines(log):
    """The closing lines of each pytest and gtest run, and failures named by pytest's -r summary."""
    keep = []
    for line in log.splitlines():
        if re.match(r"^(=+ )?\d+ (passed|failed|skipped|error)", line) or re.search(r"\d+ (passed|failed)[,\s]", line) \
                or line.startswith(("FAILED ", "ERROR ", "SKIPPED ", "[  PASSED", "[  FAILED", "== ", "conformance_cuda:")):
            keep.append(line.strip())
    return keep


def scaler_table(result):
    lines = ["| row | ours | PyTorch | copy | ratio | goal | met |", "|---|---|---|---|---|---|---|"]
    for r in result.get("rows", []):
        if "copy_GBps" in r:
            theirs = "no kernel" if r["pytorch_GBps"] is None else f"{r['pytorch_GBps']:.0f} GB/s"
            lines.append(f"| {r['row']} | {r['ours_GBps']:.0f} GB/s | {theirs} | "
                         f"{r['copy_GBps']:.0f} GB/s | {r['ours_over_copy']:.3f} of copy | {r['goal'] or ''} | "
                         f"{'' if r['met'] is None else r['met']} |")
        elif "pytorch" in r:
            lines.append(f"| {r['row']} | {r['ours_wall_us']:.1f} us wall, {r['ours_gpu_us']:.1f} us GPU | "
                         f"{r['pytorch']} | | | | |")
        else:
            lines.append(f"| {r['row']} | {r['ours_wall_us']:.1f} us wall, {r['ours_gpu_us']:.1f} us GPU | "
                         f"{r['pytorch_wall_us']:.1f} us wall, {r['pytorch_gpu_us']:.1f} us GPU | | "
                         f"wall {r['wall_ratio']:.3f}, GPU {r['gpu_ratio']:.3f} | {r.get('goal') or ''} | {'' if r.get('met') is None else r['met']} |")
    return lines


def sweep_table(path):
    """bench_unscale_sweep's rows (one JSON object per line) as a table."""
    lines = ["| row | loads in flight (unroll) | chunk | GB/s | of copy | GPU us |", "|---|---|---|---|---|---|"]
    for line in read(path).splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            lines.append(f"| {r['row']} | {r.get('unroll', '')} | {r.get('chunk', '')} | {number(r.get('GBps'), 4)} | "
                         f"{number(r.get('over_copy'))} | {number(r.get('us'))} |")
    return lines


def fp8_table(result):
    lines = ["| row | variant | mode | ms | x bf16 | x torchao | rel. error vs bf16 | first loss | error |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in result.get("rows", []):
        lines.append(f"| {r['row']} | {r['variant']} | {r['mode']} | {number(r.get('ms'), 4)} | "
                     f"{number(r.get('speedup_vs_bf16'))} | {number(r.get('speedup_vs_torchao'))} | "
                     f"{number(r.get('rel_error_vs_bf16'))} | {number(r.get('first_loss'), 6)} | {r.get('error', '')[:160]} |")
    lines += ["", "| goal | value | met |", "|---|---|---|"]
    for g in result.get("goals", []):
        lines.append(f"| {g['goal']} | {number(g['value'])} | {g['met']} |")
    return lines


def rowwise_table(result):
    lines = ["| row | M x K x N | fused ms | ops ms | ops / fused |", "|---|---|---|---|---|"]
    for r in result.get("rows", []):
        lines.append(f"| {r['what']} | {r['m']}x{r['k']}x{r['n']} | {number(r['fused_ms'], 4)} | "
                     f"{number(r['ops_ms'], 4)} | {number(r['ratio'])} |")
    return lines


def turns_table(result):
    """Rows taken in turns (paired.py): the median of the pairs' ratios, their quartiles and range."""
    lines = ["| row | pairs | median | quartiles | range | goal |", "|---|---|---|---|---|---|"]
    for r in result.get("rows", []):
        if "paired" in r:
            p = r["paired"]
            what = f"{r['model']}" if "model" in r else f"{r['size']} {r['variant']} {r['mode']}"
            lines.append(f"| {what} | {p['pairs']} | {number(p['median'])} | {number(p['q1'])}-{number(p['q3'])} | "
                         f"{number(p['low'])}-{number(p['high'])} | {r.get('goal_098') or r.get('goal_102')} |")
        elif "error" in r:
            lines.append(f"| {r.get('model') or r.get('variant')} {r.get('mode', '')} | error: {r['error'][:120]} | | | | |")
    return lines


def main():
    out = pathlib.Path(sys.argv[1])
    lines = ["# GPU check", "", "```", read(out / "env.txt").strip(), "```", "", "## Phases (rc 0 = passed, 124 = timed out)",
             "", "```", read(out / "phases.txt").strip(), "```", "", "## Tests", "", "```"]
    lines += test_lines(read(out / "tests.log")) + ["```", ""]
    for name, title, table in (("scaler.json", "Scaler", scaler_table), ("fp8.json", "fp8 linear and MLP", fp8_table),
                                ("fp8_rowwise.json", "Row-wise quantisation, fused against the ops", rowwise_table),
                                ("llama_turns.json", "Llama, variants in turns (speed-up over bf16)", turns_table),
                                ("models.json", "Real models, generated / PyTorch per round of processes", turns_table)):
        path = out / name
        if path.exists():
            result = json.loads(path.read_text())
            lines += [f"## {title} ({result.get('device')}, torch {result.get('torch')}"
                      + (f", torchao {result['torchao']}" if "torchao" in result else "") + ")", ""]
            lines += table(result) + [""]
        else:
            lines += [f"## {title}: no results ({name} missing)", ""]
        if name == "scaler.json" and (out / "sweep.jsonl").exists():
            lines += ["## The unscale kernel's tuning (bench_unscale_sweep; CUDA events)", ""]
            lines += sweep_table(out / "sweep.jsonl") + [""]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
