"""Hostile statistics files for `autocastgen report` (Note [hostile statistics files] in
python/autocastgen/reporter/reading.py): nesting past the C++ reader's 64 levels (also behind
brackets in strings), 5000-digit numbers, counts past 2^64 - 1, a million-character module path,
200,000 bad entries, control characters in names. Each is read in a fresh interpreter with 200 MB
of address space and 10 CPU seconds (child_process.run_bounded: limits, not timings) and ends in
the stats verb's located `file:line:col: error:` (the same bytes as `autocastgen stats` where the
source lines are short), or, where the file is good, in a page. Hostile names in a browser:
test_report_browser.py.

ctest sets AUTOCASTGEN_BUILD_DIR and AUTOCASTGEN_CLI; by hand:
  AUTOCASTGEN_BUILD_DIR=build AUTOCASTGEN_CLI=build/bin/autocastgen python3 -m pytest tests/report/test_report_hostile.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
CLI = os.environ.get("AUTOCASTGEN_CLI", str(BUILD / "bin" / "autocastgen"))

sys.path.insert(0, str(REPO / "tests" / "python"))  # built_tree, requires
from built_tree import require_built  # noqa: E402
from child_process import run_bounded  # noqa: E402

require_built(BUILD, "python/autocastgen/reporter/__init__.py", CLI)  # an error under ctest where missing

ENTRY = '"calls":1,"ran_in":{},"casts":0,"cast_bytes":0,"cache_hits":0'
MAX_NAME = 2**20  # bytes: kMaxStatsNameBytes in core/support/stats_names.h
MAX_KEY = 1022  # bytes of a member name: kMaxStatsKeyBytes there
HEAD = '{"version":1,"ops":'

HOSTILE = {  # name -> (the file's text, the first line of the diagnostics after the file's name)
    "deep": (HEAD + "[" * 100_000 + "]" * 100_000 + "}", ":1:83: error: invalid JSON: nesting deeper than 64 levels"),
    "deep_member": (HEAD + '[{"op":"a",' + ENTRY + ',"x":' + "[" * 3000 + "]" * 3000 + "}]}",
                    ":1:158: error: invalid JSON: nesting deeper than 64 levels"),
    "deep_behind_strings": (HEAD + '[],"s":"' + "]" * 2000 + '","x":' + "[" * 3000 + "]" * 3000 + "}",
                            ":1:2097: error: invalid JSON: nesting deeper than 64 levels"),
    "deep_then_syntax": (HEAD + "[" * 70 + "oops", ":1:83: error: invalid JSON: nesting deeper than 64 levels"),
    "long_integer": (HEAD + '[{"op":"a","calls":' + "9" * 5000 + ',"ran_in":{},"casts":0,"cast_bytes":0,"cache_hits":0}]}',
                     ":1:39: error: 'calls' must be a non-negative integer, found '" + "9" * 40 + "...'"),
    "past_uint64": (HEAD + '[{"op":"a","calls":18446744073709551616,"ran_in":{},"casts":0,"cast_bytes":0,"cache_hits":0}]}',
                    ":1:39: error: 'calls' must be a non-negative integer, found '18446744073709551616'"),
    "long_float": (HEAD + '[{"op":"a",' + ENTRY + ',"output_max_abs":1' + "0" * 5000 + ".5}]}",
                   ":1:110: error: 'output_max_abs' must be a non-negative number or null, found '1" + "0" * 39 + "...'"),
    "many_errors": (HEAD + '[{"op":"a","calls":1,"ran_in":{' + ",".join(f'"d{i}":-1' for i in range(200_000))
                    + '},"casts":0,"cast_bytes":0,"cache_hits":0}]}',
                    ":1:56: error: 'ran_in' of 'd0' must be a non-negative integer, found '-1'"),
    # Past the bounds on names (Note [names in statistics files] in core/support/stats_names.h),
    # counted in bytes of UTF-8: 524,288 two-byte characters and one more byte; a member name.
    "long_module": (HEAD + '[{"op":"a","module":"' + "é" * (MAX_NAME // 2) + 'x",' + ENTRY + "}]}",
                    f":1:40: error: 'module' is {MAX_NAME + 1} bytes long; names in statistics files hold at most "
                    f"{MAX_NAME} bytes"),
    "long_dtype": (HEAD + '[{"op":"a","calls":1,"ran_in":{"' + "d" * (MAX_NAME + 1) + '":1},"casts":0,"cast_bytes":0,'
                   '"cache_hits":0}]}', f":1:51: error: a dtype name in 'ran_in' is {MAX_NAME + 1} bytes long; member "
                   f"names in statistics files hold at most {MAX_KEY} bytes"),
    "control_characters": (HEAD + '[{"op":"\\u001b[31mred\\u202e",' + ENTRY + '},{"op":"\\u001b[31mred\\u202e",' + ENTRY
                           + "}]}", ":1:112: error: '\\x1b[31mred\\u202e' is listed twice"),
}

READ = """
import json
from autocastgen.reporter.reading import ReadError, read_stats
try:
    read_stats(PATH)
    print(json.dumps({"ok": True}))
except ReadError as error:
    print(json.dumps({"ok": False, "text": str(error), "count": error.count}))
"""


def read_bounded(path: Path) -> dict:
    done = run_bounded(BUILD, READ.replace("PATH", repr(str(path))), memory_mb=200, cpu_s=10)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_file_is_a_located_error_within_bounds(name, tmp_path):
    text, wanted = HOSTILE[name]
    path = tmp_path / f"{name}.json"
    path.write_text(text)
    result = read_bounded(path)
    assert result["ok"] is False
    first = result["text"].split("\n", 1)[0]
    assert first == f"{path}{wanted}", first[:400]
    # A long source line is shown around its column, and the caret under that part only.
    shown = [line for line in result["text"].splitlines() if ": error: " not in line and ": note: " not in line
             and not line.startswith("autocastgen: ")]
    assert shown and max(map(len, shown)) <= 206, max(map(len, shown))
    if name == "many_errors":  # counted whole, the first 20 shown
        assert result["count"] == 200_000
        assert result["text"].count(": error: ") == 20
        assert result["text"].endswith(f"autocastgen: ... and 199980 more errors in {path}\n")
    if name == "control_characters":  # nothing a terminal would act on
        assert "\x1b" not in result["text"] and "\u202e" not in result["text"]


@pytest.mark.parametrize("name", ["deep", "deep_member", "deep_behind_strings", "long_integer", "past_uint64",
                                  "long_module"])
def test_the_stats_verb_says_the_same(name, tmp_path):
    # Byte for byte where every source line shown is short (both show a long one cut differently),
    # else the first line.
    import autocastgen.reporter as reporter

    text, _ = HOSTILE[name]
    path = tmp_path / f"{name}.json"
    path.write_text(text)
    with pytest.raises(reporter.ReportError) as caught:
        reporter.report(str(path), output=tmp_path / "r.html")
    stats = subprocess.run([CLI, "stats", str(path)], capture_output=True, text=True, timeout=120)
    assert stats.returncode == 1
    ours = str(caught.value)
    if len(text) < 400:
        assert ours + "autocastgen: 1 error; no report written\n" == stats.stderr
    else:
        assert ours.split("\n", 1)[0] == stats.stderr.split("\n", 1)[0]


def test_good_files_with_hostile_parts_make_a_page(tmp_path):
    # A 5000-digit number where nothing reads it, and a module path of a million characters in
    # 500,000 segments (Note [bounded tree] in view.py): a page, the module in the per-module table.
    deep_module = "m." * 500_000 + "x"
    rows = [{"op": "aten::mm", "module": deep_module, "calls": 2, "ran_in": {"bfloat16": 2}, "casts": 1,
             "cast_bytes": 8, "cache_hits": 0},
            {"op": "aten::mm", "module": "layers.0", "calls": 1, "ran_in": {"float32": 1}, "casts": 0,
             "cast_bytes": 0, "cache_hits": 0}]
    path = tmp_path / "good.json"
    path.write_text(json.dumps({"version": 1, "ops": rows})[:-1] + ',"note":' + "7" * 5000 + "}")
    out = tmp_path / "page.html"
    code = f"""
        from autocastgen.reporter import report
        report({str(path)!r}, output={str(out)!r})
        """
    done = run_bounded(BUILD, code, memory_mb=400, cpu_s=20)
    assert done.returncode == 0, done.stderr[-3000:]
    page = out.read_text()
    assert "1 rows ran in modules nested deeper than 64 levels or named by more than 1024 characters" in page
    assert 'data-path="layers.0"' in page and 'data-path="m.m' not in page
    assert deep_module in page  # in the per-module table's rows


def test_both_readers_take_names_of_the_bound_and_refuse_one_byte_more(tmp_path):
    # The readers agree on the bounds the runtime writes within (tests/python/insight/test_stats.py writes
    # names past them through real runs): every kind of name at exactly its bound reads in the
    # stats verb and the reporter; one byte more is an error at the same place in both. Past its
    # bound a member name is yaml-cpp's error in the stats verb ("end of map flow not found").
    from autocastgen.reporter.reading import MAX_KEY_BYTES, MAX_NAME_BYTES

    assert (MAX_NAME_BYTES, MAX_KEY_BYTES) == (MAX_NAME, MAX_KEY)

    def write(name: str, value_extra: int, key_extra: int) -> Path:
        entry = {"op": "o" * (MAX_NAME + value_extra), "module": "é" * (MAX_NAME // 2 - 1) + "m" * (2 + value_extra),
                 "calls": 2, "ran_in": {"é" * (MAX_KEY // 2 - 1) + "d" * (2 + key_extra): 2},
                 "fp8_skipped": {"r" * (MAX_KEY + key_extra): 1}, "casts": 0, "cast_bytes": 0, "cache_hits": 0}
        path = tmp_path / name
        path.write_text(json.dumps({"version": 1, "ops": [entry]}, ensure_ascii=False))
        return path

    def both(path: Path) -> tuple[dict, subprocess.CompletedProcess]:
        return read_bounded(path), subprocess.run([CLI, "stats", str(path)], capture_output=True, text=True, timeout=120)

    def errors(text: str) -> list[str]:
        return [line for line in text.splitlines() if ": error: " in line]

    ours, theirs = both(write("fits.json", 0, 0))
    assert ours == {"ok": True} and theirs.returncode == 0, theirs.stderr[-2000:]

    ours, theirs = both(write("long_values.json", 1, 0))
    assert ours["ok"] is False and theirs.returncode == 1
    assert errors(ours["text"]) == errors(theirs.stderr) and len(errors(theirs.stderr)) == 2, theirs.stderr[-2000:]
    for what in ("'op'", "'module'"):
        assert any(f"error: {what} is {MAX_NAME + 1} bytes long; names in statistics files hold at most {MAX_NAME} "
                   "bytes" in line for line in errors(ours["text"])), what

    ours, theirs = both(write("long_keys.json", 0, 1))
    assert ours["ok"] is False and theirs.returncode == 1
    first = errors(ours["text"])[0]
    assert first.endswith(f"error: a dtype name in 'ran_in' is {MAX_KEY + 1} bytes long; member names in statistics "
                          f"files hold at most {MAX_KEY} bytes"), first
    assert f"error: a reason in 'fp8_skipped' is {MAX_KEY + 1} bytes long" in errors(ours["text"])[1]
    place = first.split(" error: ")[0]
    assert errors(theirs.stderr) == [f"{place} error: invalid JSON: end of map flow not found"], theirs.stderr[-2000:]
